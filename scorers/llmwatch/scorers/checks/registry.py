"""The one registry of check kinds: every `kind` a config or a regress suite may name.

Each family keeps its own table next to its code, where a kind is defined once:
`rules.RULE_CHECKS` (cheap per-sample functions) and `embeddings.EMBEDDING_CHECKS` (batched
through the embedding model). `CHECK_KINDS` is a live view over both, so the suite, regress and
start-up validation agree on which kinds exist and which family runs them, and a kind added to
a family table (a plugin, a test) is known everywhere at once. Importing the embedding table
costs no torch: the model loads only when an `Embedder` is built. The judge check is not a
configurable kind: `llmwatch regress --judge-url` adds it to every case.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel

from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome
from llmwatch.scorers.checks.base import ConfiguredCheck, every_sample
from llmwatch.scorers.checks.embeddings import EMBEDDING_CHECKS
from llmwatch.scorers.checks.rules import RULE_CHECKS, build_rule_check

__all__ = ["CHECK_KINDS", "CheckKind", "Family", "build_check", "known_kinds", "unknown_kind"]

Family = Literal["rule", "embedding"]


@dataclass(frozen=True)
class CheckKind:
    kind: str
    family: Family
    params_model: type[BaseModel]


class _CheckKinds(Mapping[str, CheckKind]):
    def _tables(self) -> tuple[tuple[Family, Mapping[str, Any]], ...]:
        return (("rule", RULE_CHECKS), ("embedding", EMBEDDING_CHECKS))

    def __getitem__(self, kind: str) -> CheckKind:
        for family, table in self._tables():
            entry = table.get(kind)
            if entry is not None:
                return CheckKind(kind, family, entry.params_model)
        raise KeyError(kind)

    def __iter__(self) -> Iterator[str]:
        for _, table in self._tables():
            yield from table

    def __len__(self) -> int:
        return sum(len(table) for _, table in self._tables())


CHECK_KINDS: Mapping[str, CheckKind] = _CheckKinds()


def known_kinds(family: Family | None = None) -> list[str]:
    return sorted(k for k, entry in CHECK_KINDS.items() if family is None or entry.family == family)


def unknown_kind(kind: str, family: Family | None = None) -> str:
    """The message for a kind nobody registered, listing the ones that would do."""
    return f"unknown check kind '{kind}'; known kinds: {', '.join(known_kinds(family))}"


def build_check(
    name: str, kind: str, params: dict[str, Any] | None, selector: Callable[[Sample], bool] = every_sample
) -> ConfiguredCheck:
    """A per-sample check of a rule kind, params validated; ValueError names the kind and the field.

    Embedding kinds are refused here: they run in batches through `EmbeddingScorer`.
    """
    entry = CHECK_KINDS.get(kind)
    if entry is None:
        raise ValueError(unknown_kind(kind))
    if entry.family != "rule":
        raise ValueError(
            f"check kind '{kind}' is an {entry.family} check, which runs in batches through the embedding model, not one sample at a time; per-sample kinds: {', '.join(known_kinds('rule'))}"
        )
    fn: Callable[[Sample], CheckOutcome] = build_rule_check(kind, params)
    return ConfiguredCheck(name, kind, selector, fn)
