"""Sampling: deterministic by request id, errors and slow calls always kept, overrides by route/model."""

from llmwatch.scorers.pipeline.sampler import Sampler, SamplingOverride, SamplingSection, hash_fraction


def test_same_request_id_gets_same_decision_across_sampler_instances():
    a, b = Sampler(SamplingSection(rate=0.3)), Sampler(SamplingSection(rate=0.3))
    ids = [f"req-{i}" for i in range(2000)]
    assert [a.decide(i, "/v1/chat/completions", "m", error=False, latency_ms=5) for i in ids] == [
        b.decide(i, "/v1/chat/completions", "m", error=False, latency_ms=5) for i in ids
    ]


def test_hash_fraction_is_stable_known_value():
    # Pinned so that a change of hash (which would reshuffle every replayed sample) is noticed.
    assert round(hash_fraction("req-1"), 9) == 0.016713433
    assert 0.0 <= hash_fraction("") < 1.0
    assert hash_fraction("req-1") != hash_fraction("req-2")


def test_rate_is_respected_over_many_ids():
    sampler = Sampler(SamplingSection(rate=0.1))
    kept = sum(
        sampler.decide(f"id-{i}", "/v1/chat/completions", None, error=False, latency_ms=1) is not None
        for i in range(20000)
    )
    # Binomial(20000, 0.1): sd ~ 42; a 5-sd band.
    assert 1790 <= kept <= 2210


def test_errors_are_always_kept():
    sampler = Sampler(SamplingSection(rate=0.0))
    assert sampler.decide("x", "/v1/chat/completions", "m", error=True, latency_ms=1) == "error"


def test_errors_follow_the_rate_when_keep_errors_is_off():
    sampler = Sampler(SamplingSection(rate=0.0, keep_errors=False))
    assert sampler.decide("x", "/v1/chat/completions", "m", error=True, latency_ms=1) is None


def test_slow_calls_are_always_kept():
    sampler = Sampler(SamplingSection(rate=0.0, slow_ms=1000))
    assert sampler.decide("x", "/v1/chat/completions", "m", error=False, latency_ms=999) is None
    assert sampler.decide("x", "/v1/chat/completions", "m", error=False, latency_ms=1000) == "slow"


def test_first_matching_override_wins():
    cfg = SamplingSection(
        rate=0.0,
        overrides=[
            SamplingOverride(route="/v1/embeddings", rate=0.0),
            SamplingOverride(model="gpt-4o*", rate=1.0),
        ],
    )
    sampler = Sampler(cfg)
    assert sampler.decide("x", "/v1/chat/completions", "gpt-4o-mini", error=False, latency_ms=1) == "rate"
    assert sampler.decide("x", "/v1/embeddings", "gpt-4o-mini", error=False, latency_ms=1) is None
    assert sampler.decide("x", "/v1/chat/completions", "llama-3", error=False, latency_ms=1) is None
