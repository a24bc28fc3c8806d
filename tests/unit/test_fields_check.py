"""The `fields` check (issue 27): a JSON answer against a reference object, field by field, after
normalising numbers, dates, case and whitespace; lists as sets or in order."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson
import pytest

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.registry import build_check
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.evaluate import build_report, format_text

INVOICE = {
    "number": "INV-0042",
    "date": "2024-05-01",
    "total": 1234.5,
    "customer": {"name": "Ada Lovelace", "country": "GB"},
    "items": ["paper", "ink"],
}


def sample(answer: Any, reference: Any = None, version: str = "A", id_: str = "s1") -> Sample:
    text = answer if isinstance(answer, str) else orjson.dumps(answer).decode()
    return Sample(
        id=id_,
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="gpt-4o",
        model_version=version,
        status=200,
        latency_ms=1.0,
        request={"model": "gpt-4o", "messages": [{"role": "user", "content": "Extract the invoice."}]},
        response={"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]},
        metadata={} if reference is None else {"reference": reference},
    )


def check(**params: Any):
    return build_check("fields", "fields", params)


def test_an_answer_written_differently_but_meaning_the_same_hits_every_field():
    answer = {
        "number": "  inv-0042 ",
        "date": "May 1, 2024",
        "total": "$1,234.50",
        "customer": {"name": "ada   LOVELACE", "country": "gb"},
        "items": ["Ink", "Paper"],
    }
    out = check().run(sample(answer, INVOICE))
    assert out.result == "pass" and out.value == 1.0
    assert out.details["fields"] == {
        "number": 1,
        "date": 1,
        "total": 1,
        "customer.name": 1,
        "customer.country": 1,
        "items": 1,
    }


def test_wrong_and_missing_fields_are_named_and_the_value_is_the_hit_rate():
    answer = {
        "number": "INV-0042",
        "date": "2024-05-02",
        "total": 1234.5,
        "customer": {"name": "Ada Lovelace"},
        "items": ["paper", "ink"],
    }
    out = check().run(sample(f"```json\n{orjson.dumps(answer).decode()}\n```", INVOICE))
    assert out.result == "fail" and out.value == pytest.approx(4 / 6)
    assert out.details["mismatched"] == ["date"] and out.details["missing"] == ["customer.country"]
    # Names only: a score never carries the values it compared.
    assert "2024-05-02" not in orjson.dumps(out.details).decode()
    assert check(min_score=0.6).run(sample(answer, INVOICE)).result == "pass"


def test_lists_as_sets_or_in_order_and_case_when_asked():
    answer = {**INVOICE, "items": ["ink", "paper"]}
    assert check().run(sample(answer, INVOICE)).details["fields"]["items"] == 1
    assert check(lists="ordered").run(sample(answer, INVOICE)).details["fields"]["items"] == 0
    shouting = {**INVOICE, "number": "inv-0042"}
    assert check(case_sensitive=True).run(sample(shouting, INVOICE)).details["mismatched"] == ["number"]


def test_configured_fields_and_an_inline_reference():
    out = check(reference=INVOICE, fields=["total", "customer.country"]).run(
        sample({"total": "1234.5", "customer": {"country": "GB"}})
    )
    assert out.result == "pass" and out.details["fields"] == {"total": 1, "customer.country": 1}


def test_what_cannot_be_judged_is_skipped_and_an_answer_that_is_no_object_fails():
    assert check().run(sample(INVOICE)).details["reason"] == "no_reference"
    assert check().run(sample(INVOICE, "not json")).details["reason"] == "reference_not_json"
    out = check().run(sample("The total is 1234.5", orjson.dumps(INVOICE).decode()))  # a JSON string reference is read
    assert out.result == "fail" and out.value == 0.0 and out.details["reason"] == "answer_not_json_object"


def test_the_report_shows_each_fields_hit_rate_per_version():
    samples, scores = [], []
    answers = [("A", INVOICE), ("A", INVOICE), ("B", INVOICE), ("B", {**INVOICE, "date": "2024-06-01"})]
    for i, (version, answer) in enumerate(answers):
        s = sample(answer, INVOICE, version=version, id_=f"s{i}")
        samples.append(s)
        scores.append(Score.from_outcome(s, check().run(s), check="invoice_fields", kind="fields"))
    report = build_report(samples, scores, MatrixSection())
    assert report.checks["B"]["invoice_fields"]["field_hit_rates"]["date"] == 0.5
    assert report.checks["A"]["invoice_fields"]["field_hit_rates"]["date"] == 1.0
    line = next(x for x in format_text(report).splitlines() if x.strip().startswith(".date"))
    assert "100.0%" in line and "50.0%" in line
