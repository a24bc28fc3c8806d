"""What every check has in common, whatever computes it (rules, embeddings, a judge model).

A check is configured once (kind + validated params) and then says something about each sample
it applies to: a `CheckOutcome` (pass, fail, skip or error; a value in 0..1; details). This
module holds that shared plumbing: the `Check` protocol, the params base class, the outcome
constructors (one way to build an error outcome), and the sample accessors the content checks
use to skip what they must not judge. The registry of kinds is `llmwatch.scorers.checks.registry`.

Checks that judge the answer's content skip (rather than fail) samples whose upstream call
failed or that answered with tool calls only: those are measured by error rates and tool-call
metrics, and failing them here would double count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome

__all__ = [
    "Check",
    "CheckParams",
    "ConfiguredCheck",
    "NonEmptyStr",
    "answer_or_skip",
    "describe_params_error",
    "error_outcome",
    "every_sample",
    "failed",
    "passed",
    "run_check",
    "sample_reference",
    "skipped",
    "tool_call_count",
    "upstream_failed",
]

# Exception messages can be long (a whole answer quoted by a parser); a score keeps the start.
ERROR_MESSAGE_CHARS = 500


class Check(Protocol):
    """One configured check: `applies` selects the samples, `run` judges one of them."""

    name: str
    kind: str

    def applies(self, sample: Sample) -> bool: ...

    def run(self, sample: Sample) -> CheckOutcome: ...


@dataclass(frozen=True)
class ConfiguredCheck:
    """A `Check` made of a selector and a built check function (rules, a regress case's checks)."""

    name: str
    kind: str
    selector: Callable[[Sample], bool]
    fn: Callable[[Sample], CheckOutcome]

    def applies(self, sample: Sample) -> bool:
        return self.selector(sample)

    def run(self, sample: Sample) -> CheckOutcome:
        return self.fn(sample)


def every_sample(sample: Sample) -> bool:
    """The selector of a check that applies to every sample it is given."""
    return True


class CheckParams(BaseModel):
    """Base of every check kind's params model."""

    # strict: a YAML typo such as `max_latency_ms: "2s"` must be an error, not a coercion.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


NonEmptyStr = Annotated[str, Field(min_length=1)]


def describe_params_error(model: type[BaseModel], exc: ValidationError) -> str:
    """What is wrong with a check's params; an unknown field lists the fields the kind accepts."""
    return describe_validation_error(exc, allowed=[f.alias or name for name, f in model.model_fields.items()])


# --- outcomes --------------------------------------------------------------------------------------


def passed(**details: Any) -> CheckOutcome:
    return CheckOutcome("pass", 1.0, details)


def failed(**details: Any) -> CheckOutcome:
    return CheckOutcome("fail", 0.0, details)


def skipped(reason: str, **details: Any) -> CheckOutcome:
    return CheckOutcome("skip", None, {"reason": reason, **details})


def error_outcome(reason: str | BaseException, **details: Any) -> CheckOutcome:
    """The check could not reach a verdict: an exception it raised, or a reason it states.

    An exception is recorded by class name and (clipped) message, so scores group by cause;
    a stated reason goes under "error", with whatever details the caller adds.
    """
    if isinstance(reason, BaseException):
        return CheckOutcome(
            "error", None, {"exception": type(reason).__name__, "message": str(reason)[:ERROR_MESSAGE_CHARS], **details}
        )
    return CheckOutcome("error", None, {"error": reason, **details})


def run_check(fn: Callable[[Sample], CheckOutcome], sample: Sample) -> CheckOutcome:
    """Call a built check; a crash becomes an "error" outcome instead of stopping the scoring run."""
    try:
        outcome = fn(sample)
    except Exception as exc:  # a buggy check or an odd sample must not take the others down
        return error_outcome(exc)
    if not isinstance(outcome, CheckOutcome):
        return error_outcome(TypeError(f"check returned {type(outcome).__name__}, not CheckOutcome"))
    return outcome


# --- shared sample accessors -------------------------------------------------------------------


def upstream_failed(sample: Sample) -> bool:
    # status 0 is how the sidecar records "no HTTP response at all" (connect error, timeout).
    return sample.status == 0 or sample.status >= 400


def tool_call_count(response: Any) -> int:
    if not isinstance(response, dict):
        return 0
    choices = response.get("choices")
    if isinstance(choices, list):
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = first.get("message") or first.get("delta")
        if not isinstance(message, dict):
            return 0
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            return len(calls)
        return 1 if isinstance(message.get("function_call"), dict) else 0
    output = response.get("output")
    if isinstance(output, list):
        return sum(1 for item in output if isinstance(item, dict) and str(item.get("type", "")).endswith("_call"))
    return 0


def answer_or_skip(sample: Sample) -> str | CheckOutcome:
    """The answer text, or the skip outcome when there is no answer a content check may judge."""
    if upstream_failed(sample):
        return skipped("upstream_error", status=sample.status, error_type=sample.error_type)
    text = sample.answer_text()
    if not text and tool_call_count(sample.response):
        return skipped("tool_call")
    return text


def sample_reference(sample: Sample) -> tuple[Any, str] | None:
    """(the expected answer, where it was found) for checks that compare with one, or None."""
    if "reference" in sample.metadata:
        return sample.metadata["reference"], "sample.metadata"
    request = sample.request if isinstance(sample.request, dict) else {}
    request_metadata = request.get("metadata")
    if isinstance(request_metadata, dict) and "reference" in request_metadata:
        return request_metadata["reference"], "request.metadata"
    if "llmwatch_reference" in request:
        return request["llmwatch_reference"], "request.llmwatch_reference"
    return None
