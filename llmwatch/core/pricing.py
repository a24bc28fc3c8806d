"""Cost of a call from a price table (USD per million tokens) that is data, not code.

The built-in table is `llmwatch/core/prices.json` (schema `llmwatch.prices/v1`): list prices dated
by its `as_of`, which change; a user's file of the same shape (`metrics.prices_file`, JSON or
YAML) replaces its rows model by model, and `metrics.pricing` in the config (input and output
rates, optionally the cached, cache-write and reasoning ones) wins over both. Model names are
matched exactly first, then by the longest prefix, so that dated snapshots (`gpt-4o-2024-08-06`)
find their family (`gpt-4o`) and `gpt-4o-mini` never falls back to `gpt-4o`.

A row prices each kind of token a call reports: input, cached input (cache reads), cache writes,
output and reasoning (billed as output unless the row says otherwise), and may have long-context
tiers: above a prompt size, every token of the call is priced at the tier's rates. Every cost
names the row it used (`PricedCall.row`, stored as the sample's `price_row`), e.g.
`builtin:gemini-2.5-pro>200000`. A model without a row has no cost, never a guess.
"""

from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.jsonio import check_schema, parse_document, read_document

__all__ = [
    "PRICES_SCHEMA",
    "ModelPrice",
    "PriceFile",
    "PriceLike",
    "PriceTable",
    "PricedCall",
    "TokenCounts",
    "builtin_prices",
    "read_price_file",
]

PRICES_SCHEMA = "llmwatch.prices/v1"


# --- the file ------------------------------------------------------------------------------------


class _Rates(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


class TierRow(_Rates):
    above_input_tokens: int = Field(gt=0)


class PriceRow(_Rates):
    reasoning: float | None = Field(default=None, ge=0)
    batch_discount: float = Field(default=0.0, ge=0, lt=1)
    tiers: list[TierRow] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tiers_ascend(self) -> "PriceRow":
        sizes = [t.above_input_tokens for t in self.tiers]
        if sizes != sorted(set(sizes)):
            raise ValueError("tiers must be listed by above_input_tokens, ascending, each size once")
        return self


class PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["llmwatch.prices/v1"] = Field(alias="schema")
    as_of: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    note: str = ""
    models: dict[str, PriceRow]


def _error(message: str) -> Exception:
    # ConfigError lives in config.py, which imports this module's callers; a ValueError subclass is
    # what both raise, and the config loader re-raises it as ConfigError with the same words.
    return ValueError(message)


def read_price_file(path: str | os.PathLike[str]) -> PriceFile:
    """A user's price file; ValueError naming the file and the field (or line and column)."""
    fmt: Literal["json", "yaml"] = "yaml" if str(path).endswith((".yaml", ".yml")) else "json"
    data = read_document(path, what="price file", error=_error, fmt=fmt)
    return _validate(data, f"price file {Path(path)}")


def _validate(data: Any, name: str) -> PriceFile:
    check_schema(data, PRICES_SCHEMA, name=name, kind="a price file", error=_error)
    try:
        return PriceFile.model_validate(data)
    except ValidationError as exc:
        raise _error(f"{name}: {describe_validation_error(exc)}") from None


@lru_cache(maxsize=1)
def builtin_prices() -> PriceFile:
    """The price file shipped in the package (its `as_of` dates it)."""
    raw = importlib.resources.files(__package__).joinpath("prices.json").read_bytes()
    return _validate(parse_document(raw, name="built-in prices.json", error=_error), "built-in prices.json")


# --- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tier:
    above_input_tokens: int
    input_per_million: float
    output_per_million: float
    cached_input_per_million: float | None = None
    cache_write_per_million: float | None = None


@dataclass(frozen=True, slots=True)
class ModelPrice:
    input_per_million: float
    output_per_million: float
    # None: that kind of token costs what plain input (or output, for reasoning) costs.
    cached_input_per_million: float | None = None
    cache_write_per_million: float | None = None
    reasoning_per_million: float | None = None
    batch_discount: float = 0.0
    tiers: tuple[Tier, ...] = ()
    # Where the row comes from and its name there: "builtin:gpt-4o", "file:gpt-4o", "config:gpt-4o".
    row: str = ""


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """What a call reported. `input` counts every prompt token, cached and cache-written ones
    included (the capture adds Anthropic's separately reported cache tokens to it)."""

    input: int | None = None
    output: int | None = None
    cached_input: int | None = None
    cache_write: int | None = None
    reasoning: int | None = None  # part of `output`


@dataclass(frozen=True, slots=True)
class PricedCall:
    usd: float
    row: str  # the row (and tier) used, e.g. "builtin:claude-sonnet-4>200000"


class PriceLike(Protocol):
    """A configured price (the config's `Price`), without importing the config here."""

    @property
    def input_per_million(self) -> float: ...

    @property
    def output_per_million(self) -> float: ...


def _from_row(row: PriceRow, name: str) -> ModelPrice:
    tiers = tuple(Tier(t.above_input_tokens, t.input, t.output, t.cached_input, t.cache_write) for t in row.tiers)
    return ModelPrice(
        row.input, row.output, row.cached_input, row.cache_write, row.reasoning, row.batch_discount, tiers, name
    )


def _from_config(price: PriceLike, name: str) -> ModelPrice:
    return ModelPrice(
        float(price.input_per_million),
        float(price.output_per_million),
        getattr(price, "cached_input_per_million", None),
        getattr(price, "cache_write_per_million", None),
        getattr(price, "reasoning_per_million", None),
        row=f"config:{name}",
    )


class PriceTable:
    def __init__(
        self, overrides: Mapping[str, PriceLike] | None = None, *, prices_file: PriceFile | None = None
    ) -> None:
        builtin = builtin_prices()
        self.as_of = builtin.as_of
        prices = {name: _from_row(row, f"builtin:{name}") for name, row in builtin.models.items()}
        if prices_file is not None:
            self.as_of = prices_file.as_of
            prices.update({name: _from_row(row, f"file:{name}") for name, row in prices_file.models.items()})
        for name, price in (overrides or {}).items():
            prices[name] = _from_config(price, name)
        self._prices = prices
        # Longest first, so the first prefix hit is the most specific family.
        self._prefixes = sorted(prices, key=len, reverse=True)
        self.lookup = lru_cache(maxsize=4096)(self._lookup)

    @property
    def models(self) -> tuple[str, ...]:
        """Every model name with a price (built-in, from the file and configured)."""
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

    def price(self, model: str | None, tokens: TokenCounts, *, batch: bool = False) -> PricedCall | None:
        """USD for one call and the row it was priced by, or None when the model has no price."""
        priced = self.price_of(
            model, tokens.input, tokens.output, tokens.cached_input, tokens.cache_write, tokens.reasoning, batch=batch
        )
        return None if priced is None else PricedCall(*priced)

    def price_of(
        self,
        model: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        cached_input: int | None = None,
        cache_write: int | None = None,
        reasoning: int | None = None,
        *,
        batch: bool = False,
    ) -> tuple[float, str] | None:
        """`price` of plain counts, as (usd, row): the proxy prices every call it sees, and the
        two frozen records (`TokenCounts`, `PricedCall`) cost more than the arithmetic there."""
        price = self.lookup(model)
        if price is None:
            return None
        total_in = input_tokens or 0
        rate_in, rate_out = price.input_per_million, price.output_per_million
        rate_cached, rate_write, row = price.cached_input_per_million, price.cache_write_per_million, price.row
        for tier in price.tiers:  # ascending: the last one the prompt is above wins
            if total_in > tier.above_input_tokens:
                rate_in, rate_out = tier.input_per_million, tier.output_per_million
                rate_cached, rate_write = tier.cached_input_per_million, tier.cache_write_per_million
                row = f"{price.row}>{tier.above_input_tokens}"
        cached = min(cached_input or 0, total_in)
        written = min(cache_write or 0, total_in - cached)
        output = output_tokens or 0
        reasoned = min(reasoning or 0, output)
        rate_reasoning = price.reasoning_per_million if price.reasoning_per_million is not None else rate_out
        usd = (
            (total_in - cached - written) * rate_in
            + cached * (rate_in if rate_cached is None else rate_cached)
            + written * (rate_in if rate_write is None else rate_write)
            + (output - reasoned) * rate_out
            + reasoned * rate_reasoning
        ) / 1e6
        if batch:
            usd *= 1.0 - price.batch_discount
        return usd, row

    def cost(self, model: str | None, input_tokens: int | None, output_tokens: int | None) -> float | None:
        """USD for one call of plain input and output tokens, or None when the model has no price."""
        priced = self.price(model, TokenCounts(input_tokens, output_tokens))
        return None if priced is None else priced.usd
