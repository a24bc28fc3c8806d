"""Cost of a call from a per-model price table (USD per million tokens).

The defaults are list prices at the time of writing and change often; users override or extend
them under `metrics.pricing` in the config. Model names are matched exactly first, then by the
longest configured prefix, so that dated snapshots (`gpt-4o-2024-08-06`) find their family
(`gpt-4o`) and `gpt-4o-mini` never falls back to `gpt-4o`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Protocol


@dataclass(frozen=True, slots=True)
class ModelPrice:
    input_per_million: float
    output_per_million: float


DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-4o": ModelPrice(2.50, 10.00),
    "gpt-4o-mini": ModelPrice(0.15, 0.60),
    "gpt-4.1": ModelPrice(2.00, 8.00),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40),
    "gpt-4-turbo": ModelPrice(10.00, 30.00),
    "gpt-3.5-turbo": ModelPrice(0.50, 1.50),
    "o3-mini": ModelPrice(1.10, 4.40),
    "o4-mini": ModelPrice(1.10, 4.40),
    "text-embedding-3-small": ModelPrice(0.02, 0.0),
    "text-embedding-3-large": ModelPrice(0.13, 0.0),
    # The built-in simulator's models, priced like the families they imitate.
    "sim-gpt-4o": ModelPrice(2.50, 10.00),
    "sim-gpt-4o-mini": ModelPrice(0.15, 0.60),
    "sim-gpt-3.5-turbo-instruct": ModelPrice(1.50, 2.00),
    "sim-text-embedding-3-small": ModelPrice(0.02, 0.0),
}


class PriceLike(Protocol):
    """A configured price (the config's `Price`), without importing the config here."""

    @property
    def input_per_million(self) -> float: ...

    @property
    def output_per_million(self) -> float: ...


class PriceTable:
    def __init__(self, overrides: Mapping[str, PriceLike] | None = None) -> None:
        prices = dict(DEFAULT_PRICES)
        for name, price in (overrides or {}).items():
            prices[name] = ModelPrice(float(price.input_per_million), float(price.output_per_million))
        self._prices = prices
        # Longest first, so the first prefix hit is the most specific family.
        self._prefixes = sorted(prices, key=len, reverse=True)
        self.lookup = lru_cache(maxsize=4096)(self._lookup)

    @property
    def models(self) -> tuple[str, ...]:
        """Every model name with a price (built-in and configured)."""
        return tuple(self._prices)

    def _lookup(self, model: str | None) -> ModelPrice | None:
        if not model:
            return None
        price = self._prices.get(model)
        if price is not None:
            return price
        for prefix in self._prefixes:
            if model.startswith(prefix):
                return self._prices[prefix]
        return None

    def cost(self, model: str | None, input_tokens: int | None, output_tokens: int | None) -> float | None:
        """USD for one call, or None when the model has no price (never guessed)."""
        price = self.lookup(model)
        if price is None:
            return None
        return ((input_tokens or 0) * price.input_per_million + (output_tokens or 0) * price.output_per_million) / 1e6
