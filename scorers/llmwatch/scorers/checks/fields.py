"""The `fields` check: a JSON answer against a reference object, field by field.

Extraction tasks ("return the invoice's number, date, total and line items as JSON") are judged by
how many fields came out right, not by the answer's wording. The reference is the check's
`reference` param (one object for every call), or per call the sample's `metadata.reference` (the
request's `metadata.reference`, or `llmwatch_reference`), as for `embedding_reference`; a JSON
string there is parsed. Each leaf of the reference (nested objects are walked, `a.b.c`; lists are
leaves) is compared with the answer's value at the same path after normalising both:

- numbers: `1234.5`, `"1,234.50"`, `"$1,234.50"` and `"1234.5"` are the same number (relative
  tolerance `number_tolerance`); a percentage keeps its `%` (`"12%"` is 12, not 0.12);
- dates: `2024-05-01`, `2024-05-01T09:30:00Z` (its date), `May 1, 2024`, `1 May 2024` and
  `2024/05/01` are the same day; day-first and month-first numeric dates (`01/05/2024`) are
  ambiguous and compared as text;
- text: case-insensitive (unless `case_sensitive`) with whitespace collapsed;
- lists: as sets (`lists: set`, the default) or in order (`ordered`), of normalised items.

The score's value is the share of fields that hit; it passes at `min_score` (all of them, by
default). Details name each field with 1 (hit) or 0 and list the missing and mismatched ones, never
their values. `llmwatch report` shows each field's hit rate per version.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime
from typing import Any, Literal

import orjson
from pydantic import Field, PrivateAttr, model_validator

from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome
from llmwatch.scorers.checks.base import CheckParams, answer_or_skip, failed, sample_reference, skipped

__all__ = ["FieldsParams", "check_fields", "flatten", "normalise"]

_MISSING = object()
_NUMBER_RE = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+")
_CURRENCY = "$€£¥"
_DATE_FORMATS = ("%B %d, %Y", "%b %d, %Y", "%d %B %Y", "%d %b %Y", "%Y/%m/%d", "%B %d %Y", "%b %d %Y")
_SPACE_RE = re.compile(r"\s+")
# Every date format read has a four-digit year: strptime is tried only on text that has one.
_YEAR_RE = re.compile(r"(?<!\d)(?:1[6-9]|2\d)\d\d(?!\d)")
_FENCE_RE = re.compile(r"^\s*(`{3,}|~{3,})[^\n]*\n(.*?)\n\s*\1\s*$", re.DOTALL)
# A score names at most this many fields: a reference with thousands of leaves stays bounded.
MAX_FIELDS = 200


class FieldsParams(CheckParams):
    # One reference object for every call; unset: each sample's own (metadata.reference).
    reference: dict[str, Any] | None = None
    # The dotted paths compared; unset: every leaf of the reference.
    fields: list[str] | None = Field(default=None, min_length=1)
    lists: Literal["set", "ordered"] = "set"
    case_sensitive: bool = False
    number_tolerance: float = Field(default=1e-9, ge=0, le=1)
    allow_fences: bool = True
    min_score: float = Field(default=1.0, ge=0, le=1)

    _paths: tuple[tuple[str, ...], ...] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _prepare(self) -> "FieldsParams":
        if self.fields is not None:
            if len(self.fields) > MAX_FIELDS:
                raise ValueError(f"at most {MAX_FIELDS} fields")
            self._paths = tuple(tuple(f.split(".")) for f in self.fields)
        return self


def flatten(obj: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths of the leaves of a nested object (an empty object is a leaf too)."""
    out: list[tuple[str, ...]] = []
    for key, value in obj.items():
        path = (*prefix, str(key))
        if isinstance(value, dict) and value:
            out.extend(flatten(value, path))
        else:
            out.append(path)
    return out


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _date(text: str) -> date | None:
    if len(text) < 8 or len(text) > 40 or _YEAR_RE.search(text) is None:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).date()
    except ValueError:
        pass
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def _number(text: str) -> float | None:
    bare = text.replace(" ", "").removesuffix("%")  # "12%" is 12: both sides are written alike
    sign = -1.0 if bare.startswith("-") else 1.0
    bare = bare.lstrip("+-")
    if bare[:1] and bare[0] in _CURRENCY:
        bare = bare[1:]
    if not _NUMBER_RE.fullmatch(bare):
        return None
    return sign * float(bare.replace(",", ""))


def normalise(value: Any, case_sensitive: bool = False) -> Any:
    """The comparable form of a value: ("n", float), ("d", date), ("s", text) or a container of them."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", float(value))
    if isinstance(value, str):
        text = _SPACE_RE.sub(" ", value.strip())
        number = _number(text)
        if number is not None:
            return ("n", number)
        day = _date(text)
        if day is not None:
            return ("d", day)
        return ("s", text if case_sensitive else text.casefold())
    if isinstance(value, list):
        return ("l", [normalise(v, case_sensitive) for v in value])
    if isinstance(value, dict):
        return ("o", {str(k): normalise(v, case_sensitive) for k, v in value.items()})
    return ("s", str(value))


def _same(a: Any, b: Any, params: FieldsParams) -> bool:
    kind_a, val_a = a
    kind_b, val_b = b
    if kind_a != kind_b:
        return False
    if kind_a == "n":
        return bool(math.isclose(val_a, val_b, rel_tol=params.number_tolerance, abs_tol=params.number_tolerance))
    if kind_a == "l":
        if params.lists == "ordered":
            return len(val_a) == len(val_b) and all(_same(x, y, params) for x, y in zip(val_a, val_b))
        # As sets: every item of each side has an equal item on the other.
        return all(any(_same(x, y, params) for y in val_b) for x in val_a) and all(
            any(_same(y, x, params) for x in val_a) for y in val_b
        )
    if kind_a == "o":
        return val_a.keys() == val_b.keys() and all(_same(val_a[k], val_b[k], params) for k in val_a)
    return bool(val_a == val_b)


def _reference(sample: Sample, params: FieldsParams) -> dict[str, Any] | CheckOutcome:
    if params.reference is not None:
        return params.reference
    found = sample_reference(sample)
    if found is None:
        return skipped("no_reference")
    reference, source = found
    if isinstance(reference, str):
        try:
            reference = orjson.loads(reference)
        except orjson.JSONDecodeError:
            return skipped("reference_not_json", source=source)
    if not isinstance(reference, dict) or not reference:
        return skipped("reference_not_object", source=source)
    return reference


def _answer(text: str, allow_fences: bool) -> Any:
    if allow_fences:
        fenced = _FENCE_RE.match(text)
        if fenced is not None:
            text = fenced.group(2)
    try:
        return orjson.loads(text.strip().lstrip("\ufeff") or b"null")
    except orjson.JSONDecodeError:
        return _MISSING


def check_fields(sample: Sample, params: FieldsParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    reference = _reference(sample, params)
    if isinstance(reference, CheckOutcome):
        return reference
    paths = params._paths if params._paths is not None else tuple(flatten(reference)[:MAX_FIELDS])
    answer = _answer(text, params.allow_fences)
    if not isinstance(answer, dict):
        return failed(reason="answer_not_json_object", fields={".".join(p): 0 for p in paths}, hits=0, total=len(paths))
    hits: dict[str, int] = {}
    missing, mismatched = [], []
    for path in paths:
        name = ".".join(path)
        expected, got = _at(reference, path), _at(answer, path)
        if expected is _MISSING:
            continue  # a configured field the reference lacks: nothing to hold the answer to
        if got is _MISSING:
            missing.append(name)
            hits[name] = 0
            continue
        hit = _same(normalise(expected, params.case_sensitive), normalise(got, params.case_sensitive), params)
        hits[name] = int(hit)
        if not hit:
            mismatched.append(name)
    if not hits:
        return skipped("no_fields")
    score = sum(hits.values()) / len(hits)
    details = {
        "fields": hits,
        "hits": sum(hits.values()),
        "total": len(hits),
        "missing": missing,
        "mismatched": mismatched,
    }
    return CheckOutcome("pass" if score >= params.min_score else "fail", score, details)
