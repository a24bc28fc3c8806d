"""The `tool_call` check: does each tool call of the answer fit what the request offered?

A request that offers tools carries its own contract: the functions' names, a JSON Schema for
each one's arguments (`tools[].function.parameters`), `tool_choice` and `parallel_tool_calls`.
The check holds every call of the answer to that contract, so it needs no configuration of its
own: unknown names, arguments that are not JSON or break the schema, a `tool_choice` that was
not honoured (`none`, `required`, a named function) and parallel calls where the request said
`parallel_tool_calls: false` each fail it with a reason. Chat Completions (`tool_calls`, the
legacy `function_call`/`functions`) and the Responses API (`function_call` output items,
top-level `tools[].parameters`) are read; streamed answers arrive assembled by the capture.

Schemas are compiled once per distinct schema (a bounded cache) with the json_schema check's
compiler (`llmwatch.scorers.checks.schema`): the same request schema costs one compile for the
life of the scorer, however many samples carry it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import Field

from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome
from llmwatch.scorers.checks.base import CheckParams, error_outcome, skipped, upstream_failed
from llmwatch.scorers.checks.schema import CompiledSchema, compile_schema

__all__ = ["REASONS", "ToolCall", "ToolCallParams", "answer_tool_calls", "check_tool_call", "request_tools"]

# Every reason a call (or the answer as a whole) can fail for, as it appears in `details.reasons`.
REASONS = (
    "unknown_tool",
    "arguments_not_json",
    "arguments_schema",
    "tool_choice_none",
    "tool_choice_required",
    "tool_choice_function",
    "parallel_calls",
)
# A function's parameters when the request gives none: the function takes no arguments, and the
# model still has to send a JSON object ("{}").
_NO_PARAMETERS: dict[str, Any] = {"type": "object"}
# Names come from the model: a score keeps at most this much of one.
_NAME_CHARS = 64
_SCHEMA_CACHE_SIZE = 256


class ToolCallParams(CheckParams):
    # Check `format` keywords (date-time, email, ...) in the request's schemas.
    check_formats: bool = False
    # Schema errors kept per call.
    max_errors: int = Field(default=3, ge=1, le=100)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of the answer, as the model sent it."""

    name: str
    arguments: Any  # a JSON string on the wire; some servers send an object


def request_tools(request: Any) -> dict[str, Any] | None:
    """{function name: its parameters schema} of the functions the request offers; None: no tools."""
    if not isinstance(request, dict):
        return None
    found: dict[str, Any] = {}
    offered = False
    for tool in request.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue  # built-in tools (web_search, file_search, ...) have no caller-side schema
        offered = True
        fn: dict[str, Any] = (
            tool["function"] if isinstance(tool.get("function"), dict) else tool
        )  # chat: nested; Responses: flat
        name = fn.get("name")
        if isinstance(name, str):
            params = fn.get("parameters")
            found[name] = _NO_PARAMETERS if params is None else params
    for fn in request.get("functions") or []:  # the legacy `functions` of Chat Completions
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            offered = True
            params = fn.get("parameters")
            found[fn["name"]] = _NO_PARAMETERS if params is None else params
    return found if offered else None


def answer_tool_calls(response: Any) -> list[ToolCall]:
    """Every function call of the answer: all choices' `tool_calls` (or legacy `function_call`),
    or the Responses API's `function_call` output items."""
    if not isinstance(response, dict):
        return []
    calls: list[ToolCall] = []
    choices = response.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            message = choice.get("message") or choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            entries = message.get("tool_calls")
            if isinstance(entries, list):
                for entry in entries:
                    fn = entry.get("function") if isinstance(entry, dict) else None
                    if isinstance(fn, dict):
                        calls.append(ToolCall(str(fn.get("name") or ""), fn.get("arguments")))
            legacy = message.get("function_call")
            if isinstance(legacy, dict):
                calls.append(ToolCall(str(legacy.get("name") or ""), legacy.get("arguments")))
        return calls
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            calls.append(ToolCall(str(item.get("name") or ""), item.get("arguments")))
    return calls


def _tool_choice(request: dict[str, Any]) -> tuple[str, str | None]:
    """("auto" | "none" | "required" | "function", the named function or None)."""
    choice = request.get("tool_choice", request.get("function_call"))
    if choice in ("none", "required", "auto"):
        return str(choice), None
    if isinstance(choice, dict):
        # Chat: {"type": "function", "function": {"name": X}}; Responses: {"type": "function", "name": X};
        # legacy function_call: {"name": X}.
        fn: dict[str, Any] = choice["function"] if isinstance(choice.get("function"), dict) else choice
        name = fn.get("name")
        if isinstance(name, str) and choice.get("type", "function") == "function":
            return "function", name
    return "auto", None


class _SchemaCache:
    """Compiled request schemas by their canonical JSON; an invalid schema is cached as its message."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: dict[tuple[bytes, bool], CompiledSchema | str] = {}

    def get(self, schema: Any, check_formats: bool) -> CompiledSchema | str:
        try:
            key = (orjson.dumps(schema, option=orjson.OPT_SORT_KEYS), check_formats)
        except TypeError as exc:
            return f"parameters are not JSON ({exc})"
        found = self._items.get(key)
        if found is None:
            try:
                found = compile_schema(schema, check_formats, "parameters")
            except ValueError as exc:
                found = str(exc)
            if len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))  # oldest first: dicts keep insertion order
            self._items[key] = found
        return found


_SCHEMAS = _SchemaCache(_SCHEMA_CACHE_SIZE)


def _judge_call(
    index: int, call: ToolCall, tools: dict[str, Any], params: ToolCallParams
) -> tuple[dict[str, Any] | None, str | None]:
    """(the failure of this call or None, an error that stops the verdict or None)."""
    name = call.name[:_NAME_CHARS]
    if call.name not in tools:
        return {"index": index, "name": name, "reason": "unknown_tool"}, None
    args = call.arguments
    if isinstance(args, str):
        try:
            args = orjson.loads(args)
        except orjson.JSONDecodeError as exc:
            return {"index": index, "name": name, "reason": "arguments_not_json", "error": exc.msg}, None
    elif args is None:
        return {"index": index, "name": name, "reason": "arguments_not_json", "error": "no arguments"}, None
    compiled = _SCHEMAS.get(tools[call.name], params.check_formats)
    if isinstance(compiled, str):
        return None, f"tool {name!r} of the request: {compiled}"
    errors, more = compiled.errors(args, params.max_errors)
    if errors:
        return {"index": index, "name": name, "reason": "arguments_schema", "errors": errors, "more_errors": more}, None
    return None, None


def check_tool_call(sample: Sample, params: ToolCallParams) -> CheckOutcome:
    if upstream_failed(sample):
        return skipped("upstream_error", status=sample.status, error_type=sample.error_type)
    tools = request_tools(sample.request)
    if tools is None:
        return skipped("no_tools")
    request: dict[str, Any] = sample.request
    calls = answer_tool_calls(sample.response)
    mode, wanted = _tool_choice(request)
    failures: list[dict[str, Any]] = []
    reasons: set[str] = set()
    if mode == "none" and calls:
        reasons.add("tool_choice_none")
    elif mode == "required" and not calls:
        reasons.add("tool_choice_required")
    elif mode == "function" and (not calls or any(c.name != wanted for c in calls)):
        reasons.add("tool_choice_function")
    if request.get("parallel_tool_calls") is False and len(calls) > 1:
        reasons.add("parallel_calls")
    bad_calls = 0
    for index, call in enumerate(calls):
        failure, error = _judge_call(index, call, tools, params)
        if error is not None:
            # The request's own schema is broken: nothing the model sent can be held to it.
            return error_outcome(error, calls=len(calls))
        if failure is not None:
            failures.append(failure)
            reasons.add(failure["reason"])
            bad_calls += 1
    details: dict[str, Any] = {"calls": len(calls), "tool_choice": mode}
    if finish := sample.finish_reason:
        details["finish_reason"] = finish
    if not reasons:
        return CheckOutcome("pass", 1.0, {**details, "names": sorted({c.name[:_NAME_CHARS] for c in calls})})
    # The share of calls that conform; an answer that broke tool_choice or parallel_tool_calls as a
    # whole conforms in nothing.
    whole = reasons - {"unknown_tool", "arguments_not_json", "arguments_schema"}
    value = 0.0 if whole or not calls else (len(calls) - bad_calls) / len(calls)
    return CheckOutcome("fail", value, {**details, "reasons": sorted(reasons), "failures": failures})
