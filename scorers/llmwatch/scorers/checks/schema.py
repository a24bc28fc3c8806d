"""JSON Schemas compiled once, checked many times: the json_schema and tool_call checks share them.

`compile_schema` checks the schema (Draft 2020-12) and builds its validator; `CompiledSchema.errors`
says what is wrong with a document, at most `max_errors` items, messages clipped so that a score
never carries a whole answer.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Sized

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

__all__ = ["CompiledSchema", "compile_schema"]

# jsonschema costs ~15 us per object validated, too slow for every sample. Schemas that only use
# the keywords below (typical structured-output schemas) are also compiled into plain closures
# that answer valid/invalid; jsonschema still decides, and explains, every answer they reject.
_QUICK_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_QUICK_KEYWORDS = _QUICK_ANNOTATIONS | {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
}
_QUICK_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: _is_number(v),
    # Draft 2020-12 counts 1.0 as an integer.
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
}


_QUICK_SIZES: dict[str, tuple[type[Sized], Callable[[int, Any], bool]]] = {
    "minProperties": (dict, operator.ge),
    "maxProperties": (dict, operator.le),
    "minItems": (list, operator.ge),
    "maxItems": (list, operator.le),
    "minLength": (str, operator.ge),
    "maxLength": (str, operator.le),
}
_QUICK_LIMITS = {
    "minimum": operator.ge,
    "maximum": operator.le,
    "exclusiveMinimum": operator.gt,
    "exclusiveMaximum": operator.lt,
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _one_of(allowed: frozenset[str]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and v in allowed


def _size_test(container: type[Sized], holds: Callable[[int, Any], bool], bound: Any) -> Callable[[Any], bool]:
    return lambda v: not isinstance(v, container) or holds(len(v), bound)


def _limit_test(holds: Callable[[Any, Any], bool], bound: Any) -> Callable[[Any], bool]:
    return lambda v: not _is_number(v) or holds(v, bound)


def _compile_quick(schema: Any, formats_checked: bool) -> Callable[[Any], bool] | None:  # noqa: C901
    """A predicate equivalent to the schema, or None when the schema uses anything else."""
    if isinstance(schema, bool):
        return (lambda v: True) if schema else (lambda v: False)
    if not isinstance(schema, dict):
        return None
    keys = schema.keys() - _QUICK_KEYWORDS
    if keys and (formats_checked or keys != {"format"}):
        return None
    tests: list[Callable[[Any], bool]] = []
    if "type" in schema:
        names = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        fns = [_QUICK_TYPES[name] for name in names]
        tests.append(fns[0] if len(fns) == 1 else (lambda v: any(f(v) for f in fns)))
    for keyword in ("enum", "const"):
        if keyword in schema:
            options = schema["enum"] if keyword == "enum" else [schema["const"]]
            # jsonschema's equality has its own rules for numbers, bools and containers; strings are plain.
            if not all(isinstance(o, str) for o in options):
                return None
            allowed = frozenset(options)
            tests.append(_one_of(allowed))
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        props: dict[str, Callable[[Any], bool]] = {}
        for name, sub in schema.get("properties", {}).items():
            fn = _compile_quick(sub, formats_checked)
            if fn is None:
                return None
            props[name] = fn
        extra = _compile_quick(schema.get("additionalProperties", True), formats_checked)
        if extra is None:
            return None
        required = tuple(schema.get("required", ()))

        def object_ok(v: Any) -> bool:
            # Plain loops: generator expressions cost more than the checks they would run.
            if not isinstance(v, dict):
                return True
            for name in required:
                if name not in v:
                    return False
            for key, item in v.items():
                if not props.get(key, extra)(item):
                    return False
            return True

        tests.append(object_ok)
    if "items" in schema:
        item_fn = _compile_quick(schema["items"], formats_checked)
        if item_fn is None:
            return None
        tests.append(lambda v: not isinstance(v, list) or all(map(item_fn, v)))
    for keyword, (container, holds) in _QUICK_SIZES.items():
        if keyword in schema:
            tests.append(_size_test(container, holds, schema[keyword]))
    if "pattern" in schema:
        try:
            rx = re.compile(schema["pattern"])
        except re.error:
            return None  # ECMA-262 syntax Python lacks: leave it to jsonschema
        tests.append(lambda v: not isinstance(v, str) or rx.search(v) is not None)
    for keyword, holds in _QUICK_LIMITS.items():
        if keyword in schema:
            tests.append(_limit_test(holds, schema[keyword]))
    if not tests:
        return lambda v: True
    if len(tests) == 1:
        return tests[0]

    def all_ok(v: Any) -> bool:
        for test in tests:
            if not test(v):
                return False
        return True

    return all_ok


@dataclass(frozen=True)
class CompiledSchema:
    validator: Draft202012Validator
    quick: Callable[[Any], bool] | None

    def errors(self, doc: Any, max_errors: int) -> tuple[list[dict[str, str]], bool]:
        """(errors, more): at most `max_errors` of them, and whether there were more."""
        if self.quick is not None and self.quick(doc):
            return [], False
        found = list(islice(self.validator.iter_errors(doc), max_errors + 1))
        errors = [
            # Messages quote the offending value; cap them so a score never carries a whole answer.
            {"path": err.json_path, "keyword": str(err.validator), "message": err.message[:200]}
            for err in found[:max_errors]
        ]
        return errors, len(found) > max_errors


def compile_schema(schema: Any, check_formats: bool, where: str = "schema") -> CompiledSchema:
    """The schema's validator; ValueError naming `where` when it is no Draft 2020-12 schema."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(
            f"{where} is not a valid Draft 2020-12 JSON Schema: {exc.message} (at {exc.json_path})"
        ) from None
    checker = Draft202012Validator.FORMAT_CHECKER if check_formats else None
    return CompiledSchema(Draft202012Validator(schema, format_checker=checker), _compile_quick(schema, check_formats))
