"""`llmwatch aggregate` holds bounded state whatever the topics carry: scores that never meet their
sample (it left the join before they came, or never comes) are forgotten oldest first, counted;
the join is bounded in records and in bytes, each kind dropped counted under its own outcome;
check names read from the scores topic pass a label cap that the names llmwatch knows stay out of."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.samples import chat_sample, rule_score
from structlog.testing import capture_logs

from llmwatch.agent.components import load_config
from llmwatch.agent.processes import kafka_aggregate
from llmwatch.agent.processes.kafka_aggregate import Aggregator
from llmwatch.collectors.exporters.kafka import KafkaMetrics
from llmwatch.core.metrics import Metrics
from llmwatch.scorers.drift.baseline import freeze, write_baseline


def test_scores_that_never_meet_their_sample_are_bounded_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_aggregate, "MAX_PENDING", 100)
    metrics = Metrics()
    agg = Aggregator(load_config(None, environ={}), metrics)
    # Late scores: their samples were joined (without them) before they came.
    for i in range(50):
        agg.add_sample(chat_sample(id=f"early{i}"), now=0.0)
    assert agg.flush(now=kafka_aggregate.JOIN_DELAY_S + 1) == 50
    for i in range(50):
        assert agg.add_score(rule_score(f"early{i}"))
    # Scores of samples that never come (lost to the samples topic's retention, a join overflow).
    for i in range(1000):
        assert agg.add_score(rule_score(f"never{i}"))
    assert len(agg.scores) <= 100, "held scores are bounded"
    dropped = metrics.group(KafkaMetrics).kafka_consumed.labels(outcome="join_overflow_score")._value.get()
    assert dropped == 1050 - 100
    # The newest are the ones kept: a sample that arrives now still meets its scores. (Checked before
    # the join too: after it the score is gone either way, joined or dropped on arrival.)
    assert "never999" in agg.scores and "early0" not in agg.scores, "the oldest are forgotten first"
    agg.add_sample(chat_sample(id="never999"), now=100.0)
    agg.flush(now=100.0 + kafka_aggregate.JOIN_DELAY_S + 1)
    assert "never999" not in agg.scores


def test_scores_held_for_one_sample_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound above counts samples waiting for their scores, not scores: a producer writing
    # scores of one sample id under ever new check names (each passes the dedupe) grew that one
    # sample's list without bound.
    monkeypatch.setattr(kafka_aggregate, "MAX_PENDING", 100)
    metrics = Metrics()
    agg = Aggregator(load_config(None, environ={}), metrics)
    for i in range(5000):
        assert agg.add_score(rule_score("one").model_copy(update={"check": f"made-up-{i}"}))
    held = sum(len(scores) for scores in agg.scores.values())
    assert held <= 100 * kafka_aggregate.SCORES_PER_SAMPLE, "held scores are bounded, not only their samples"
    dropped = metrics.group(KafkaMetrics).kafka_consumed.labels(outcome="join_overflow_score")._value.get()
    assert dropped == 5000 - held
    # The count stays right through the join: the scores a sample takes leave the bound.
    agg.add_sample(chat_sample(id="one"), now=0.0)
    agg.flush(now=kafka_aggregate.JOIN_DELAY_S + 1)
    assert agg.held_scores == 0 and not agg.scores


def consumed(metrics: Metrics, outcome: str) -> float:
    return float(metrics.group(KafkaMetrics).kafka_consumed.labels(outcome=outcome)._value.get())


def test_big_samples_are_bounded_by_bytes_not_only_by_count() -> None:
    # A sample is up to capture.max_body_bytes twice over: 100,000 pending samples of 1 MB each
    # held ~100 GB. Here 40 samples of ~1 MB against a 4 MiB bound (the count bound is far away).
    cfg = load_config(None, overrides={"kafka": {"aggregate_join_max_bytes": 4 * 1024 * 1024}}, environ={})
    metrics = Metrics()
    agg = Aggregator(cfg, metrics)
    with capture_logs() as logs:
        for i in range(40):
            value = chat_sample(id=f"big{i}", answer="SECRET-ANSWER " + "x" * 1_000_000).to_json()
            agg.add_record(SimpleNamespace(topic="t.samples", partition=0, offset=i, value=value), is_score=False)
    held = sum(len(sample.to_json()) for _, sample, _ in agg.pending.values())
    assert held <= 4 * 1024 * 1024 and agg.pending_bytes == held, "the join holds at most its bytes"
    assert 1 <= len(agg.pending) <= 4 and "big39" in agg.pending, "the newest are kept"
    assert consumed(metrics, "join_overflow_sample") == 40 - len(agg.pending)
    assert consumed(metrics, "join_overflow_score") == 0, "samples are not counted as scores"
    lines = [e for e in logs if e["event"] == "join_overflow"]
    assert len(lines) == 1, "one line per 10 s, not one per dropped sample"
    assert lines[0]["outcome"] == "join_overflow_sample" and lines[0]["max_bytes"] == 4 * 1024 * 1024
    assert "SECRET" not in str(lines) and "big" not in str(lines), "counts, never a record or its id"
    # The bytes leave the bound with the samples the join takes.
    waiting = len(agg.pending)
    assert agg.flush(now=time.monotonic() + kafka_aggregate.JOIN_DELAY_S + 1) == waiting
    assert not agg.pending and agg.pending_bytes == 0


def test_big_scores_are_bounded_by_bytes_not_only_by_count() -> None:
    # A score record names its own details: 1,000,000 held scores of 1 MB each, unbounded in bytes.
    cfg = load_config(None, overrides={"kafka": {"aggregate_join_max_bytes": 2 * 1024 * 1024}}, environ={})
    metrics = Metrics()
    agg = Aggregator(cfg, metrics)
    for i in range(30):
        big = rule_score(f"lonely{i}").model_copy(update={"details": {"text": "y" * 200_000}})
        agg.add_record(SimpleNamespace(topic="t.scores", partition=0, offset=i, value=big.to_json()), is_score=True)
    held = sum(len(s.to_json()) for scores in agg.scores.values() for s in scores)
    assert held <= 2 * 1024 * 1024 and agg.held_score_bytes == held
    assert consumed(metrics, "join_overflow_score") == 30 - agg.held_scores > 0
    assert consumed(metrics, "join_overflow_sample") == 0, "scores are not counted as samples"
    last = agg.held_scores
    agg.add_sample(chat_sample(id="lonely29"), now=0.0)
    agg.flush(now=kafka_aggregate.JOIN_DELAY_S + 1)
    assert agg.held_scores == last - 1 and agg.held_score_bytes == held - len(
        rule_score("lonely29").model_copy(update={"details": {"text": "y" * 200_000}}).to_json()
    )


def test_check_names_from_the_scores_topic_cannot_grow_the_series_past_the_cap() -> None:
    # The aggregator labels llmwatch_check_total by the check a score record names: a producer
    # writing made-up check names made one series each, without bound.
    from llmwatch.collectors.exporters.scores import MAX_CHECK_LABELS

    metrics = Metrics()
    agg = Aggregator(load_config(None, environ={}), metrics)
    agg.add_score(rule_score("s-real"))
    for i in range(MAX_CHECK_LABELS * 3):
        agg.add_score(rule_score(f"s{i}").model_copy(update={"check": f"made-up-{i}"}))
    checks = {
        s.labels["check"]
        for family in metrics.registry.collect()
        if family.name == "llmwatch_check"
        for s in family.samples
    }
    assert "min_length" in checks, "a check seen before the cap keeps its label"
    assert len(checks) <= MAX_CHECK_LABELS + 1 and "other" in checks


def test_made_up_check_names_arriving_first_cannot_push_known_checks_into_other() -> None:
    # The cap admitted names first come, first served: a producer writing 200 made-up check names
    # before the workers' first scores left every real check labelled `other` for the process's life.
    from llmwatch.collectors.exporters.scores import MAX_CHECK_LABELS

    cfg = load_config(
        None,
        overrides={"scoring": {"checks": [{"name": "short_answers", "kind": "length", "params": {"max_chars": 50}}]}},
        environ={},
    )
    metrics = Metrics()
    agg = Aggregator(cfg, metrics)
    for i in range(MAX_CHECK_LABELS * 3):
        agg.add_score(rule_score(f"s{i}").model_copy(update={"check": f"made-up-{i}"}))
    # A built-in suite check, a registered kind, the configured check, a judge criterion, the probe.
    real = ["refusal", "input_truncated", "short_answers", "judge:helpfulness", "consistency"]
    for check in real:
        agg.add_score(rule_score(f"real-{check}").model_copy(update={"check": check}))
    checks = {
        s.labels["check"]
        for family in metrics.registry.collect()
        if family.name == "llmwatch_check"
        for s in family.samples
    }
    assert set(real) <= checks, f"known checks keep their label: {sorted(set(real) - checks)}"
    made_up = {c for c in checks if c.startswith("made-up-")}
    assert len(made_up) == MAX_CHECK_LABELS and "other" in checks, "unknown names are still capped"
    # A known name that never comes makes no series: the allow-list costs nothing until it is used.
    assert "pii_leak" not in checks


def test_a_record_that_is_not_a_sample_or_a_score_is_counted_and_logged_by_place() -> None:
    metrics = Metrics()
    agg = Aggregator(load_config(None, environ={}), metrics)
    poison = [b"not json", b"[1, 2]", None, b'{"id": "x", "request": "' + b"s" * 1_000_000 + b'"}']
    with capture_logs() as logs:
        for offset, value in enumerate(poison):
            agg.add_record(SimpleNamespace(topic="t.samples", partition=0, offset=offset, value=value), is_score=False)
        agg.add_record(SimpleNamespace(topic="t.scores", partition=1, offset=7, value=b"{}"), is_score=True)
        agg.add_record(
            SimpleNamespace(topic="t.samples", partition=0, offset=4, value=chat_sample().to_json()), is_score=False
        )
    assert metrics.group(KafkaMetrics).kafka_consumed.labels(outcome="invalid")._value.get() == 5
    lines = [e for e in logs if e["event"] == "invalid_record"]
    assert [(e["topic"], e["partition"], e["offset"]) for e in lines] == [("t.samples", 0, i) for i in range(4)] + [
        ("t.scores", 1, 7)
    ]
    assert all(len(str(e)) < 1000 for e in lines), "a log line names the record, it does not carry it"
    assert len(agg.pending) == 1, "the valid sample after them is taken"


def test_a_record_that_fails_validation_is_logged_without_its_values() -> None:
    # pydantic's message quotes the input (`input_value={'id': 'x', 'request': '...'}`): the log
    # line carried the record's prompt, or a key in it, though it says where and why only.
    agg = Aggregator(load_config(None, environ={}), Metrics())
    records = [b'{"id": "x", "request": "Bearer sk-SECRET-1"}', b'{"sample_id": "sk-SECRET-2"}']
    with capture_logs() as logs:
        for offset, value in enumerate(records):
            agg.add_record(SimpleNamespace(topic="t", partition=0, offset=offset, value=value), is_score=offset == 1)
    lines = [e for e in logs if e["event"] == "invalid_record"]
    assert len(lines) == 2
    assert all("SECRET" not in str(e) for e in lines), lines
    assert "timestamp" in lines[0]["error"] and "check" in lines[1]["error"], "the fields at fault are named"


def test_operation_names_from_the_samples_topic_cannot_grow_the_drift_series(tmp_path: Path) -> None:
    # The drift gauges are labelled by the operation a sample names; from the topic that is any
    # string: 10,000 characters with a newline, or a new one in every record.
    rng = np.random.default_rng(3)
    base = [chat_sample(id=f"b{i}", latency_ms=float(rng.normal(100, 10))) for i in range(200)]
    path = write_baseline(freeze(base, [], None, model_version="A"), tmp_path / "baseline.json")
    cfg = load_config(
        None, overrides={"drift": {"baseline": str(path), "interval_s": 1, "min_samples": 20}}, environ={}
    )
    metrics = Metrics()
    agg = Aggregator(cfg, metrics)
    for round_ in range(3):
        for i in range(40):
            operation = "x" * 10_000 + "\n" if i == 0 else f"made-up-{round_}-{i}"
            sample = chat_sample(id=f"c{round_}-{i}", model_version="A", latency_ms=100.0, operation=operation)
            agg.add_record(
                SimpleNamespace(topic="t.samples", partition=0, offset=i, value=sample.to_json()), is_score=False
            )
        agg.flush(now=time.monotonic() + kafka_aggregate.JOIN_DELAY_S + 1)
        assert agg.refresh(now=time.monotonic() + 10 * (round_ + 1)) > 0
    operations = {
        s.labels["gen_ai_operation_name"]
        for family in metrics.registry.collect()
        if family.name.startswith("llmwatch_drift")
        for s in family.samples
        if "gen_ai_operation_name" in s.labels
    }
    assert operations == {"other"}


def test_model_versions_past_the_label_cap_share_one_drift_window() -> None:
    # A drift window per model_version the samples topic names: 2,000 made-up versions held 2,000
    # windows (about 7 kB a sample, for ever) behind gauges that all read `other`.
    metrics = Metrics(max_versions=5)
    agg = Aggregator(load_config(None, environ={}), metrics)
    for i in range(2000):
        agg.add_sample(chat_sample(id=f"s{i}", model_version=f"v{i}"), now=0.0)
    assert agg.flush(now=kafka_aggregate.JOIN_DELAY_S + 1) == 2000, "every sample is still taken"
    windows = agg.windows.by_version()
    assert sorted(windows) == ["other", "v0", "v1", "v2", "v3", "v4"]
    assert len(windows["other"]) == 1995
