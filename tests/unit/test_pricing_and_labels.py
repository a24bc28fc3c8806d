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
