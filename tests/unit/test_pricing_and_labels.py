"""Cost from the price table, and bounded label cardinality."""

from llmwatch.core.config import Price
from llmwatch.core.metrics import OTHER, LabelCap
from llmwatch.core.pricing import PriceTable


def test_cost_uses_per_million_prices():
    table = PriceTable()
    assert table.cost("gpt-4o", 1_000_000, 0) == 2.50
    assert abs(table.cost("gpt-4o", 1000, 500) - (1000 * 2.5 + 500 * 10.0) / 1e6) < 1e-12


def test_dated_snapshots_find_their_family_and_mini_is_not_confused_with_its_parent():
    table = PriceTable()
    assert table.lookup("gpt-4o-2024-08-06").input_per_million == 2.50
    assert table.lookup("gpt-4o-mini-2024-07-18").input_per_million == 0.15


def test_unknown_model_has_no_cost_rather_than_a_guess():
    assert PriceTable().cost("my-finetune", 100, 100) is None


def test_config_prices_override_defaults():
    table = PriceTable({"gpt-4o": Price(input_per_million=1.0, output_per_million=1.0)})
    assert table.cost("gpt-4o", 1_000_000, 1_000_000) == 2.0


def test_label_cap_admits_first_n_then_other():
    cap = LabelCap(3)
    assert [cap(m) for m in ["a", "b", "c", "d", "a", "e"]] == ["a", "b", "c", OTHER, "a", OTHER]


def test_label_values_are_sanitised_and_truncated():
    cap = LabelCap(5)
    assert cap("model with spaces\n") == "model_with_spaces_"
    assert len(cap("x" * 500)) == 64
    assert cap(None) == "unknown"


def test_label_cap_memory_stays_bounded_under_random_names():
    cap = LabelCap(2)
    for i in range(10_000):
        cap(f"random-{i}")
    assert cap.admitted == 2
    assert len(cap._seen) <= 2 * 50


# --- prices as data (issue 27) --------------------------------------------------------------------


def test_the_built_in_prices_are_a_dated_file_and_every_cost_names_its_row():
    from llmwatch.core.pricing import TokenCounts, builtin_prices

    assert builtin_prices().as_of and "change" in builtin_prices().note
    priced = PriceTable().price("gpt-4o-2024-08-06", TokenCounts(1000, 500))
    assert priced is not None and priced.row == "builtin:gpt-4o"
    assert abs(priced.usd - (1000 * 2.5 + 500 * 10.0) / 1e6) < 1e-12


def test_a_newer_model_is_priced_by_its_own_row_not_by_an_older_family_that_prefixes_it():
    from llmwatch.core.pricing import TokenCounts

    # Longest prefix wins: without their own rows these would be billed as claude-opus-4 (15 / 75),
    # o3 (2 / 8) and gpt-5 (1.25 / 10), three to ten times off.
    for model, row, rate_in, rate_out in (
        ("claude-opus-4-5-20251101", "builtin:claude-opus-4-5", 5.0, 25.0),
        ("o3-pro-2025-06-10", "builtin:o3-pro", 20.0, 80.0),
        ("gpt-5.4-2026-03-05", "builtin:gpt-5.4", 2.5, 15.0),
        ("gpt-5-pro", "builtin:gpt-5-pro", 15.0, 120.0),
        ("claude-opus-4-20250514", "builtin:claude-opus-4", 15.0, 75.0),
    ):
        priced = PriceTable().price(model, TokenCounts(1_000_000, 1_000_000))
        assert priced is not None and priced.row == row, model
        assert abs(priced.usd - (rate_in + rate_out)) < 1e-9, model


def test_cached_input_tokens_are_priced_at_the_cached_rate():
    from llmwatch.core.pricing import TokenCounts

    # 10,000 prompt tokens of which 8,000 were read from the cache: gpt-4o's 1.25 instead of 2.50.
    priced = PriceTable().price("gpt-4o", TokenCounts(input=10_000, output=0, cached_input=8_000))
    assert priced is not None
    assert abs(priced.usd - (2_000 * 2.50 + 8_000 * 1.25) / 1e6) < 1e-12
    # Anthropic: cache reads at 0.30, cache writes at 3.75 (the input rate is 3.00).
    priced = PriceTable().price(
        "claude-3-5-sonnet-20241022", TokenCounts(1_000, 100, cached_input=600, cache_write=300)
    )
    assert priced is not None and priced.row == "builtin:claude-3-5-sonnet"
    assert abs(priced.usd - (100 * 3.00 + 600 * 0.30 + 300 * 3.75 + 100 * 15.00) / 1e6) < 1e-12


def test_a_long_context_call_above_a_tier_is_priced_at_the_tier():
    from llmwatch.core.pricing import TokenCounts

    table = PriceTable()
    below = table.price("gemini-2.5-pro", TokenCounts(200_000, 1_000))
    above = table.price("gemini-2.5-pro", TokenCounts(200_001, 1_000))
    assert below is not None and above is not None
    assert below.row == "builtin:gemini-2.5-pro" and above.row == "builtin:gemini-2.5-pro>200000"
    assert abs(below.usd - (200_000 * 1.25 + 1_000 * 10.0) / 1e6) < 1e-12
    # Every token of the call at the tier's rates, not only those above the threshold.
    assert abs(above.usd - (200_001 * 2.50 + 1_000 * 15.0) / 1e6) < 1e-12


def test_reasoning_tokens_are_output_unless_the_row_prices_them_and_batch_takes_the_discount():
    from llmwatch.core.pricing import TokenCounts

    table = PriceTable({"r1": Price(input_per_million=1.0, output_per_million=4.0, reasoning_per_million=2.0)})
    reasoned = table.price("o3-mini", TokenCounts(0, 1_000, reasoning=800))
    assert reasoned is not None and abs(reasoned.usd - 1_000 * 4.40 / 1e6) < 1e-12
    priced = table.price("r1", TokenCounts(0, 1_000, reasoning=800))
    assert priced is not None and priced.row == "config:r1"
    assert abs(priced.usd - (200 * 4.0 + 800 * 2.0) / 1e6) < 1e-12
    batch = PriceTable().price("gpt-4o", TokenCounts(1_000_000, 0), batch=True)
    assert batch is not None and batch.usd == 1.25


def test_a_users_price_file_replaces_rows_and_the_config_wins_over_it(tmp_path):
    import pytest

    from llmwatch.core.config import ConfigError, MetricsSection
    from llmwatch.core.pricing import TokenCounts

    path = tmp_path / "prices.yaml"
    path.write_text(
        "schema: llmwatch.prices/v1\nas_of: '2026-12-01'\nmodels:\n"
        "  gpt-4o: {input: 2.0, cached_input: 0.5, output: 8.0}\n  my-model: {input: 1.0, output: 1.0}\n"
    )
    table = MetricsSection(prices_file=str(path)).price_table()
    assert table.as_of == "2026-12-01"
    assert table.price("gpt-4o", TokenCounts(1_000_000, 0)).row == "file:gpt-4o"
    assert table.price("my-model", TokenCounts(1_000_000, 0)).usd == 1.0
    assert table.price("gpt-4o-mini", TokenCounts(1_000_000, 0)).row == "builtin:gpt-4o-mini"
    table = MetricsSection(
        prices_file=str(path), pricing={"my-model": Price(input_per_million=9.0, output_per_million=9.0)}
    ).price_table()
    assert table.price("my-model", TokenCounts(1_000_000, 0)).row == "config:my-model"
    # A bad file stops the start with its name and the field.
    path.write_text("schema: llmwatch.prices/v1\nas_of: '2026-12-01'\nmodels:\n  gpt-4o: {input: -1, output: 8.0}\n")
    with pytest.raises((ValueError, ConfigError)) as err:
        MetricsSection(prices_file=str(path))
    assert str(path) in str(err.value) and "input" in str(err.value)


def test_usage_details_read_openai_responses_and_anthropic_shapes():
    from llmwatch.core.wire import usage_details

    chat = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1024},
        "completion_tokens_details": {"reasoning_tokens": 256},
    }
    assert usage_details(chat) == (1024, None, 256, 0)
    responses = {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 7},
    }
    assert usage_details(responses) == (0, None, 7, 0)
    anthropic = {
        "input_tokens": 20,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
        "output_tokens": 5,
    }
    assert usage_details(anthropic) == (1000, 200, None, 1200)  # reported beside input_tokens: added by the capture
    litellm = {"prompt_tokens": 1220, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200}
    assert usage_details(litellm) == (1000, 200, None, 0)  # inside prompt_tokens already


def test_the_report_gives_cost_per_million_tokens_and_per_thousand_calls_with_the_rows_used():
    from datetime import datetime, timezone

    from llmwatch.core.records import Sample
    from llmwatch.scorers.evaluation.decision import cost_latency

    def s(i: int, cost: float | None, row: str | None) -> Sample:
        return Sample(
            id=f"s{i}",
            timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
            model="gpt-4o",
            model_version="A",
            status=200,
            latency_ms=10.0,
            usage={"input_tokens": 600, "output_tokens": 400},
            cost_usd=cost,
            price_row=row,
            request={},
            response={},
        )

    costs = cost_latency([s(0, 0.002, "builtin:gpt-4o"), s(1, 0.004, "file:gpt-4o"), s(2, None, None)])["A"]
    assert costs.priced == 2 and abs(costs.cost_per_1k - 3.0) < 1e-12
    assert abs(costs.cost_per_1m_tokens - 0.006 / 2_000 * 1e6) < 1e-9  # unpriced calls' tokens left out
    assert costs.price_rows == {"builtin:gpt-4o": 1, "file:gpt-4o": 1}
