"""Fleet aggregation: each (sample, check) counts once across redelivering workers; drift sees every partition."""

from __future__ import annotations

import sys
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from helpers.agents import bound_port, recorded_servers  # noqa: E402
from synthetic import Behaviour, degradations, window  # noqa: E402

from llmwatch.agent.components import load_config  # noqa: E402
from llmwatch.agent.processes import kafka_aggregate as kafka_aggregator  # noqa: E402
from llmwatch.agent.processes.kafka_aggregate import Aggregator, run_aggregator  # noqa: E402
from llmwatch.collectors.exporters.kafka import create_topics  # noqa: E402
from llmwatch.core.metrics import Metrics  # noqa: E402
from llmwatch.scorers.drift.baseline import freeze, write_baseline  # noqa: E402


def baseline_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    return write_baseline(
        freeze(*window(rng, 2000, Behaviour(), prefix="base")[:2], None, model_version="A"),
        tmp_path / "baseline-A.json",
    )


def config(tmp_path: Path, **kafka):
    return load_config(
        None,
        overrides={
            "drift": {"baseline": str(baseline_file(tmp_path)), "interval_s": 0.5, "min_samples": 40, "window": 1000},
            "kafka": kafka or None,
            "metrics_listen": "127.0.0.1:0",
        },
        environ={},
    )


def counter(metrics: Metrics, name: str, **labels: str) -> float:
    return sum(
        s.value
        for f in metrics.registry.collect()
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_redelivered_scores_count_once_and_degraded_version_drifts(tmp_path, monkeypatch):
    monkeypatch.setattr(kafka_aggregator, "JOIN_DELAY_S", 0.0)
    metrics = Metrics()
    agg = Aggregator(config(tmp_path), metrics)
    rng = np.random.default_rng(9)
    for version, behaviour in (("A", Behaviour()), ("B", degradations()["latency +40%"])):
        samples, scores, _ = window(rng, 400, behaviour, version=version, prefix="cur")
        for s in samples:
            agg.add_sample(s)
        for score in scores:
            agg.add_score(score)
        for score in scores[:300]:  # a batch scored again after a worker died before committing
            agg.add_score(score)
    agg.flush()
    assert agg.refresh(now=time.monotonic() + 10) > 0
    refusal_scores = counter(metrics, "llmwatch_check_total", check="refusal")
    assert refusal_scores == sum(1 for s in agg.windows.contents()[1] if s.check == "refusal")
    assert counter(metrics, "llmwatch_kafka_consumed_total", outcome="duplicate_score") == 600
    detected = {
        (s.labels["model_version"], s.labels["signal"]): s.value
        for f in metrics.registry.collect()
        for s in f.samples
        if s.name == "llmwatch_drift_detected"
    }
    # Latency +40 % at the same answer length: +40 % per output token, beyond the 20 % margin.
    assert detected[("B", "perf:latency_per_token_ms")] == 1.0
    assert not any(v for (version, _), v in detected.items() if version == "A")


def test_the_fleet_aggregator_sets_the_evaluation_gauges_the_sidecar_sets(tmp_path, monkeypatch):
    """One aggregate stage: `llmwatch aggregate` exports the evaluation matrix from its windows, as the scorer child does."""
    from llmwatch.scorers.drift.baseline import load_baseline
    from llmwatch.scorers.evaluation.evaluate import build_report

    monkeypatch.setattr(kafka_aggregator, "JOIN_DELAY_S", 0.0)
    cfg = config(tmp_path)
    metrics = Metrics()
    agg = Aggregator(cfg, metrics)
    samples, scores, _ = window(np.random.default_rng(4), 200, Behaviour(), version="A", prefix="ev")
    for s in samples:
        agg.add_sample(s)
    for score in scores:
        agg.add_score(score)
    agg.flush()
    agg.refresh(now=time.monotonic() + 10)
    report = build_report(
        samples,
        scores,
        cfg.matrix,
        baseline=load_baseline(cfg.drift.baseline),
        drift_alpha=cfg.drift.alpha,
        drift_min_samples=cfg.drift.min_samples,
    )
    expected = {(c.category, c.model_version): c.mean_score for c in report.cells if c.mean_score is not None}
    assert expected, "the synthetic window fills at least one category"
    got = {
        (s.labels["category"], s.labels["model_version"]): s.value
        for f in metrics.registry.collect()
        for s in f.samples
        if s.name == "llmwatch_category_quality"
    }
    assert got == pytest.approx(expected)
    (row,) = [r for r in report.decision if r.model_version == "A"]
    assert row.decision_score is not None
    assert counter(metrics, "llmwatch_decision_score", model_version="A") == pytest.approx(row.decision_score)


def scrape(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(
        v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == val for k, val in labels.items())
    )


@pytest.mark.slow
def test_aggregator_reads_both_topics_from_a_real_broker(tmp_path, kafka_broker, monkeypatch):
    from kafka import KafkaProducer

    monkeypatch.setattr(kafka_aggregator, "JOIN_DELAY_S", 0.5)
    create_topics([kafka_broker.bootstrap], {"samples": 2, "scores": 2})
    cfg = config(
        tmp_path,
        enabled=True,
        bootstrap_servers=kafka_broker.bootstrap,
        samples_topic="samples",
        scores_topic="scores",
        group_id="g",
    )
    producer = KafkaProducer(bootstrap_servers=[kafka_broker.bootstrap], enable_idempotence=False)
    rng = np.random.default_rng(3)
    # Twice as slow: this test is about the aggregator converging on what it reads from a real
    # broker, so the degradation is far beyond the 20 % margin the drift tests test against
    # (+40 % on 300 samples is found in most windows, not all: seed 3's is not one of them).
    slower = replace(Behaviour(), latency_ms=Behaviour().latency_ms * 2, ttft_ms=Behaviour().ttft_ms * 2)
    samples, scores, _ = window(rng, 300, slower, version="B", prefix="k")
    for s in samples:
        producer.send("samples", s.to_json(), key=s.id.encode())
    for score in scores + scores[:100]:  # 100 redelivered
        producer.send("scores", score.to_json(), key=score.sample_id.encode())
    producer.flush(30)
    producer.close()

    servers = recorded_servers(monkeypatch, kafka_aggregator)  # it binds port 0 (config above)
    stop = threading.Event()
    thread = threading.Thread(target=run_aggregator, args=(cfg,), kwargs={"stop": stop}, daemon=True)
    thread.start()
    try:
        port = bound_port(servers, thread)
        deadline = time.monotonic() + 60
        while True:
            try:
                got = scrape(port)
            except OSError:
                got = {}
            if total(
                got, "llmwatch_drift_detected", model_version="B", signal="perf:latency_per_token_ms"
            ) == 1.0 and total(got, "llmwatch_check_total", check="refusal") == sum(
                s.check == "refusal" for s in scores
            ):
                break
            assert time.monotonic() < deadline, (
                f"aggregator did not converge: {sorted(k for k in got if k[0].startswith('llmwatch_'))[:20]}"
            )
            time.sleep(0.5)
        assert total(got, "llmwatch_kafka_consumed_total", outcome="duplicate_score") == 100
    finally:
        stop.set()
        thread.join(20)
