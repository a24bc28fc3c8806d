"""`llmwatch report` over a window in bounded memory (issue 29): no Sample and no Score is kept.

`build_report` (evaluation/evaluate.py) takes lists of Samples and Scores: tens of KB of Python
objects per sample, 35 GB for a million. This module computes the same report from streams:

1. one pass over the samples keeps, per sample, a few typed columns (version, category, prompt
   hash, turn, conversation, cost) and the latency and TTFT values per version, and hashes each
   chat history once for the offline conversation linking (`history_digests`);
2. one pass over the scores (or the checks run now, batch by batch, on a second pass over the
   samples) keeps per sample id a tuple of shared compact entries (`offline.compact_score`: rule
   checks repeat a handful of combinations) and counts what is a count: the mostly-`error`
   tally, the per-check pass rates, the quality guard's passes and verdicts;
3. with `--baseline`, one more pass over the samples feeds each version's drift summary
   (`WindowSummary`, the bounded accumulator `drift` uses).

The statistics that need every sample's value (quantiles, the decision score's bootstrap, the
turn decay's cluster bootstrap, prompt groups) run over numpy arrays of those columns. Every
figure is the one `build_report` gives: the same values in the same order (sums in file order,
draws in the same order), so the report is the same; tests/unit/test_report_memory.py checks both.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import numpy as np

from llmwatch.core.jsonio import batches, read_records
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.errors import ErrorTally, mostly_errors_message
from llmwatch.scorers.checks.offline import Codes, ScoredEntry, compact_score
from llmwatch.scorers.evaluation.decision import (
    CostLatency,
    gaps_of_counts,
    intervals_of_cells,
    quantiles,
)
from llmwatch.scorers.evaluation.evaluate import EvaluationReport, assemble_report
from llmwatch.scorers.evaluation.matrix import (
    CategoryCell,
    build_categories,
    categorize,
    category_cell,
    overall_quality,
    request_messages,
    user_turns,
)
from llmwatch.scorers.evaluation.sensitivity import (
    Embed,
    PromptSensitivity,
    lexical_key,
    replace_widest,
    request_text,
    version_sensitivity,
)
from llmwatch.scorers.evaluation.stability import (
    ALL,
    MAX_TURN,
    StabilityCell,
    decay_slope_arrays,
    group_stability,
    prompt_hash,
    sampling_cells,
    turn_cell,
    version_cell,
)
from llmwatch.scorers.evaluation.turns import TurnDecay, decay_of, turn_bucket
from llmwatch.scorers.pipeline.conversations import ConversationTracker, HistoryDigests, history_digests
from llmwatch.scorers.stats.clustered import cluster_bootstrap_slope

__all__ = ["build_report_streamed"]

_PASS_FAIL = ("pass", "fail")
_BATCH = 256
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


class _Costs:
    """`decision.cost_latency` as the samples stream: sums in file order, latency values in arrays."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = defaultdict(int)
        self.cost_sum: dict[str, float] = defaultdict(float)
        self.priced: dict[str, int] = defaultdict(int)
        self.tokens: dict[str, int] = defaultdict(int)
        self.rows: dict[str, dict[str, int]] = defaultdict(dict)
        self.latency: dict[str, array] = defaultdict(lambda: array("d"))
        self.ttft: dict[str, array] = defaultdict(lambda: array("d"))

    def add(self, s: Sample, version: str) -> None:
        self.requests[version] += 1
        if s.cost_usd is not None:
            # `sum(costs)` adds in file order from 0: so does this.
            self.cost_sum[version] += s.cost_usd
            self.priced[version] += 1
            self.tokens[version] += (s.usage.input_tokens or 0) + (s.usage.output_tokens or 0)
            rows = self.rows[version]
            rows[s.price_row or "unrecorded"] = rows.get(s.price_row or "unrecorded", 0) + 1
        if 0 < s.status < 400:
            self.latency[version].append(s.latency_ms)
            if s.ttft_ms is not None:
                self.ttft[version].append(s.ttft_ms)

    def finish(self) -> dict[str, CostLatency]:
        out = {}
        for version in sorted(self.requests):
            n = self.priced[version]
            total = self.cost_sum[version] if n else 0.0
            per_request = total / n if n else None
            tokens = self.tokens[version]
            out[version] = CostLatency(
                model_version=version,
                requests=self.requests[version],
                priced=n,
                cost_per_request=per_request,
                cost_per_1k=per_request * 1000.0 if per_request is not None else None,
                latency_ms=quantiles(np.frombuffer(self.latency[version], dtype=float).tolist()),
                ttft_ms=quantiles(np.frombuffer(self.ttft[version], dtype=float).tolist()),
                cost_per_1m_tokens=total / tokens * 1e6 if n and tokens else None,
                price_rows=dict(sorted(self.rows[version].items())),
            )
        return out


def _prompt_key(request: Any) -> int:
    # 64 bits of the prompt hash: groups are told apart, never shown (a collision in 2**64 is moot).
    return int.from_bytes(bytes.fromhex(prompt_hash(request)[:16]), "big", signed=True)


class _Columns:
    """Per sample, typed columns only (tens of bytes a sample)."""

    def __init__(self) -> None:
        self.id_code = array("q")
        self.version = array("i")
        self.category = array("i")
        self.prompt = array("q")
        self.msg_turns = array("i")  # user turns when the request has a messages list, else -1
        self.chat = array("b")  # operation == "chat"
        self.turn = array("q")  # the sample's turn, or its user turns (at least 1)
        self.conversation = array("q")  # code of its conversation id; -1 none
        self.cost = array("d")  # NaN: unpriced
        self.time_us = array("q")
        self.route = array("i")


def build_report_streamed(
    cfg: Any,
    samples_path: str,
    scores_path: str | None,
    *,
    baseline: Any = None,
    drift_alpha: float = 0.05,
    drift_min_samples: int = 30,
    sensitivity_embed: Embed | None = None,
) -> EvaluationReport:
    """The report of `llmwatch report` from the files, as `build_report` over their lists.
    `sensitivity_embed`: the embedding function that clusters rephrasings (None: lexically)."""
    from llmwatch.scorers.checks.suite import build_suite, default_checks

    matrix = cfg.matrix
    # Categorised as the samples stream; the check names are checked against the scores after.
    categories = build_categories(matrix, None)
    ids = Codes()
    versions = Codes()
    cats = Codes()
    convs = Codes()
    routes = Codes()
    # Per distinct phrasing (version, route, prompt hash): what prompt sensitivity clusters it by,
    # its lexical key (a few dozen bytes), or its text when clustering by meaning.
    phrasings: dict[tuple[int, str, int], str] = {}
    col = _Columns()
    costs = _Costs()
    digests: dict[int, HistoryDigests] = {}  # sample index -> its history's digests, to link
    unlinked_chat = False
    n = 0
    for s in read_records(samples_path):
        version = s.model_version or "unknown"
        col.id_code.append(ids.code(s.id))
        col.version.append(versions.code(version))
        col.category.append(cats.code(categorize(s, categories, matrix.default_category)))
        request = s.request
        col.prompt.append(_prompt_key(request))
        col.msg_turns.append(
            user_turns(request) if isinstance(request, dict) and isinstance(request.get("messages"), list) else -1
        )
        col.chat.append(s.operation == "chat")
        col.turn.append(s.turn if s.turn is not None else max(1, user_turns(request)))
        col.conversation.append(convs.code(s.conversation_id) if s.conversation_id is not None else -1)
        col.cost.append(s.cost_usd if s.cost_usd is not None else math.nan)
        col.time_us.append(_micros(s))
        col.route.append(routes.code(s.route))
        _note_phrasing(phrasings, (col.version[-1], s.route, col.prompt[-1] & _U64), request, sensitivity_embed)
        costs.add(s, version)
        unlinked_chat = unlinked_chat or (s.conversation_id is None and s.operation == "chat")
        if s.conversation_id is None or s.turn is None:
            messages = request_messages(request)
            if messages:
                digests[n] = history_digests(messages, s.answer_text() or None)
        n += 1
    if n == 0:
        raise RecordError(f"{samples_path} holds no samples")
    configured = [
        c.name
        for c in (cfg.scoring.checks if cfg.scoring.checks is not None else default_checks(cfg.scoring.embeddings))
    ]
    # Per sample id: its scores, each a shared compact entry, in file order.
    scored: list[tuple[ScoredEntry, ...]] = [()] * len(ids.names)
    cache: dict[tuple, ScoredEntry] = {}
    tally = ErrorTally()
    seen_checks: set[str] = set()
    rates = _PassRates()

    def take(sc: Score, code: int) -> None:
        tally.add(sc)
        seen_checks.add(sc.check)
        rates.add(sc)
        scored[code] = scored[code] + (compact_score(sc, cache),)

    if scores_path is not None:
        for sc in read_records(scores_path, Score, prefix="scores"):
            code = ids.index.get(sc.sample_id)
            if code is not None:
                take(sc, code)
    else:
        suite = build_suite(cfg.scoring)
        for batch in _batches(samples_path):
            for result in suite.score(batch):
                take(result.score, ids.index[result.score.sample_id])
    ids.index.clear()  # the join is done: the ids are not needed any more
    build_categories(matrix, sorted(set(configured) | seen_checks))  # unknown check names: ConfigError
    shares = tally.shares()
    warnings = [mostly_errors_message(shares, samples=samples_path, scores=scores_path)] if shares else []

    # Links conversations as `link_samples` does: in time order, each history looked up.
    if unlinked_chat and digests:
        _link(col, convs, ids, digests)
    digests.clear()

    score, passed = _sample_scores(col, scored, cats.names, {c.name: c.checks for c in categories})
    cells = _quality_matrix(col, score, passed, versions.names, cats.names, categories)
    quality = overall_quality(cells)
    stability = _sampling_stability(col, score, versions.names, cats.names) + _turn_stability(
        col, score, versions.names, cats.names
    )
    if baseline is not None:
        stability += _version_stability(
            samples_path, scored, ids_of(col), versions.names, baseline, drift_alpha, drift_min_samples
        )
    return assemble_report(
        n_samples=n,
        versions=sorted({versions.names[v] for v in set(col.version)}),
        categories=categories,
        cells=cells,
        quality=quality,
        stability=stability,
        baseline=baseline,
        costs=costs.finish(),
        gaps=gaps_of_counts(rates.gap_counts, drift_alpha),
        intervals_of=lambda combined: intervals_of_cells(
            _cells_of(col, score, versions.names, cats.names),
            {c.name: c.weight for c in categories},
            combined,
            matrix.decision,
            drift_alpha,
        ),
        cfg=matrix,
        alpha=drift_alpha,
        warnings=warnings,
        checks=rates.finish(),
        turn_decay=_turn_decay(col, scored, versions.names),
        prompt_sensitivity=_prompt_sensitivity(
            samples_path, col, scored, score, versions.names, routes.names, phrasings, sensitivity_embed
        ),
    )


_U64 = (1 << 64) - 1


def _note_phrasing(
    phrasings: dict[tuple[int, str, int], str], key: tuple[int, str, int], request: Any, embed: Embed | None
) -> None:
    if key not in phrasings:  # once per distinct phrasing, not per sample
        text = request_text(request)
        phrasings[key] = text if embed is not None else lexical_key(text)


def _values_of(entries: tuple[ScoredEntry, ...]) -> dict[str, float]:
    """`turns.check_values` of one sample: check -> value of every verdict (the last one wins)."""
    out: dict[str, float] = {}
    for e in entries:
        if e.result in _PASS_FAIL:
            out[e.check] = e.value if e.value is not None else (1.0 if e.result == "pass" else 0.0)
    return out


def _prompt_sensitivity(
    samples_path: str,
    col: _Columns,
    scored: list[tuple[ScoredEntry, ...]],
    score: np.ndarray,
    versions: list[str],
    route_names: list[str],
    phrasings: dict[tuple[int, str, int], str],
    embed: Embed | None,
) -> list[PromptSensitivity]:
    """`sensitivity.prompt_sensitivity` over the columns: a phrasing's samples are indexes, and
    the texts of the widest clusters are read again from the file (only those few are kept)."""
    ver = np.frombuffer(col.version, dtype=np.int32)
    route = np.frombuffer(col.route, dtype=np.int32)
    prompt = np.frombuffer(col.prompt, dtype=np.int64).view(np.uint64)
    id_code = np.frombuffer(col.id_code, dtype=np.int64)
    found: list[tuple[PromptSensitivity, int, list[tuple[str, Any]]]] = []
    for vcode in sorted(set(ver.tolist()), key=lambda v: versions[v]):
        by_phrasing: dict[tuple[str, Any], list[int]] = defaultdict(list)
        for i in np.flatnonzero(ver == vcode).tolist():
            by_phrasing[(route_names[int(route[i])], int(prompt[i]))].append(i)

        def cluster_text(k: tuple[str, Any], v: int = vcode) -> str:
            return phrasings[(v, k[0], k[1])]

        figure, widest = version_sensitivity(
            versions[vcode],
            by_phrasing,
            cluster_text,
            lambda i: _values_of(scored[int(id_code[i])]),
            lambda i: None if math.isnan(score[i]) else float(score[i]),
            embed=embed,
            lexical=(lambda key: key) if embed is None else lexical_key,
        )
        del by_phrasing
        found.append((figure, vcode, widest))
    wanted = {(vcode, r, p) for _, vcode, widest in found for r, p in widest}
    texts: dict[tuple[int, str, int], str] = {}
    if embed is not None:
        texts = {k: phrasings[k] for k in wanted}
    elif wanted:
        codes = {name: i for i, name in enumerate(versions)}
        for s in read_records(samples_path):  # a second pass, for the few texts shown
            k = (codes.get(s.model_version or "unknown", -1), s.route, _prompt_key(s.request) & _U64)
            if k in wanted and k not in texts:
                texts[k] = request_text(s.request)
    return [
        replace_widest(figure, {(r, p): texts[(vcode, r, p)] for r, p in widest}, widest)
        for figure, vcode, widest in found
    ]


def ids_of(col: _Columns) -> np.ndarray:
    return np.frombuffer(col.id_code, dtype=np.int64)


def _micros(s: Sample) -> int:
    # Exact integer microseconds: the time order `link_samples` sorts by, ties kept in file order.
    return (s.timestamp - _EPOCH) // _MICROSECOND


def _batches(samples_path: str) -> Iterator[list[Sample]]:
    return batches(read_records(samples_path), _BATCH)


class _PassRates:
    """`evaluate.check_pass_rates` and the quality guard's counts, one score at a time."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], list[int]] = {}
        self.field_hits: dict[tuple[str, str], dict[str, list[int]]] = {}
        self.gap_counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])

    def add(self, score: Score) -> None:
        if score.result not in _PASS_FAIL:
            return
        version = score.model_version or "unknown"
        entry = self.counts.setdefault((version, score.check), [0, 0])
        entry[0] += 1
        entry[1] += score.result == "pass"
        gap = self.gap_counts[(score.check, version)]
        gap[0] += score.result == "pass"
        gap[1] += 1
        if score.kind == "fields" and isinstance(score.details.get("fields"), dict):
            per = self.field_hits.setdefault((version, score.check), {})
            for name, hit in score.details["fields"].items():
                cell = per.setdefault(str(name), [0, 0])
                cell[0] += 1
                cell[1] += bool(hit)

    def finish(self) -> dict[str, dict[str, dict[str, Any]]]:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for (version, check), (n, ok) in sorted(self.counts.items()):
            out.setdefault(version, {})[check] = {"n": n, "passed": ok, "pass_rate": ok / n}
            if (version, check) in self.field_hits:
                out[version][check]["field_hit_rates"] = {
                    name: hits / total for name, (total, hits) in sorted(self.field_hits[(version, check)].items())
                }
        return out


def _link(col: _Columns, convs: Codes, ids: Codes, digests: dict[int, HistoryDigests]) -> None:
    """`link_samples`: conversation ids for the samples written without one, in time order."""
    n = len(col.version)
    tracker = ConversationTracker(max_entries=max(16, 2 * n + 16), ttl_s=float("inf"))
    order = np.argsort(np.frombuffer(col.time_us, dtype=np.int64), kind="stable")
    for i in order.tolist():
        d = digests.get(i)
        if d is None:
            continue
        conversation, turn = tracker.observe_digests(d, now=col.time_us[i] / 1e6, call_id=ids.names[col.id_code[i]])
        if col.conversation[i] < 0:
            col.conversation[i] = convs.code(conversation)


def _sample_scores(
    col: _Columns, scored: list[tuple[ScoredEntry, ...]], cat_names: list[str], wanted: dict[str, tuple[str, ...]]
) -> tuple[np.ndarray, np.ndarray]:
    """`matrix.score_samples`: each sample's score (NaN: none of its category's checks judged it) and pass."""
    n = len(col.version)
    score = np.full(n, np.nan)
    passed = np.zeros(n, dtype=bool)
    for i in range(n):
        entries = scored[col.id_code[i]]
        if not entries:
            continue
        last: dict[str, ScoredEntry] = {}
        for e in entries:  # a later score of one check replaces an earlier one, in its place
            last[e.check] = e
        checks = wanted.get(cat_names[col.category[i]]) or ()
        values: list[float] = []
        failed = False
        for name, e in last.items():
            if checks and name not in checks:
                continue
            if e.result not in _PASS_FAIL:
                continue
            values.append(float(e.value) if e.value is not None else (1.0 if e.result == "pass" else 0.0))
            failed = failed or e.result == "fail"
        if values:
            score[i] = sum(values) / len(values)
            passed[i] = not failed
    return score, passed


def _seq_sum(values: np.ndarray) -> float:
    # Python's sum(), in order from 0 (cumsum adds left to right; np.sum does not).
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def _quality_matrix(
    col: _Columns, score: np.ndarray, passed: np.ndarray, versions: list[str], cat_names: list[str], categories: Any
) -> list[CategoryCell]:
    weight = {c.name: c.weight for c in categories}
    order = {c.name: i for i, c in enumerate(categories)}
    ver = np.frombuffer(col.version, dtype=np.int32)
    cat = np.frombuffer(col.category, dtype=np.int32)
    has = ~np.isnan(score)
    keys = sorted(
        {(cat_names[c], versions[v]) for c, v in set(zip(col.category, col.version))},
        key=lambda k: (order.get(k[0], len(order)), k[1]),
    )
    cells = []
    for category, version in keys:
        mask = (cat == cat_names.index(category)) & (ver == versions.index(version))
        scored_mask = mask & has
        values = score[scored_mask]
        k = int(passed[scored_mask].sum())
        cells.append(category_cell(category, version, weight, int(mask.sum()), k, values, _seq_sum(values)))
    return cells


def _sampling_stability(
    col: _Columns, score: np.ndarray, versions: list[str], cat_names: list[str]
) -> list[StabilityCell]:
    """`stability.sampling_stability`: prompt groups of the scored samples, in order of first sample."""
    idx = np.flatnonzero(~np.isnan(score))
    if not len(idx):
        return []
    ver = np.frombuffer(col.version, dtype=np.int32)[idx]
    cat = np.frombuffer(col.category, dtype=np.int32)[idx]
    prompt = np.frombuffer(col.prompt, dtype=np.int64)[idx]
    order = np.lexsort((prompt, cat, ver))  # stable: a group's samples stay in file order
    v, c, p = ver[order], cat[order], prompt[order]
    starts = np.flatnonzero(np.r_[True, (v[1:] != v[:-1]) | (c[1:] != c[:-1]) | (p[1:] != p[:-1])])
    ends = np.r_[starts[1:], len(order)]
    big = (ends - starts) >= 2
    starts, ends = starts[big], ends[big]
    first = order[starts]  # the file position of each group's first sample: the dict's order
    values = score[idx][order]
    by_key: dict[tuple[str, str], list[tuple[int, float, float]]] = defaultdict(list)
    for g in np.argsort(first, kind="stable").tolist():
        a, b = int(starts[g]), int(ends[g])
        _, var, stab = group_stability(values[a:b])
        version, category = versions[int(v[a])], cat_names[int(c[a])]
        by_key[(category, version)].append((b - a, var, stab))
        by_key[(ALL, version)].append((b - a, var, stab))
    return sampling_cells(by_key)


def _turn_stability(col: _Columns, score: np.ndarray, versions: list[str], cat_names: list[str]) -> list[StabilityCell]:
    turns = np.frombuffer(col.msg_turns, dtype=np.int32)
    keep = ~np.isnan(score) & (turns >= 0)
    ver = np.frombuffer(col.version, dtype=np.int32)
    cat = np.frombuffer(col.category, dtype=np.int32)
    keys = {(cat_names[c], versions[v]) for c, v in zip(cat[keep].tolist(), ver[keep].tolist())}
    keys |= {(ALL, v) for _, v in keys}
    cells = []
    for category, version in sorted(keys, key=lambda k: (k[1], k[0] == ALL, k[0])):
        mask = keep & (ver == versions.index(version))
        if category != ALL:
            mask &= cat == cat_names.index(category)
        # A version's figure over all categories is fitted within each category (decay_slope_arrays).
        fit = decay_slope_arrays(
            turns[mask].astype(float), score[mask], MAX_TURN, cat[mask] if category == ALL else None
        )
        if fit is not None:
            cells.append(turn_cell(category, version, fit))
    return cells


def _cells_of(
    col: _Columns, score: np.ndarray, versions: list[str], cat_names: list[str]
) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """{version: {category: (scores, costs)}}, in order of first sample, as `decision_intervals` groups."""
    ver = np.frombuffer(col.version, dtype=np.int32)
    cat = np.frombuffer(col.category, dtype=np.int32)
    cost = np.frombuffer(col.cost, dtype=float)
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    _, first_v = np.unique(ver, return_index=True)
    for fv in sorted(first_v.tolist()):
        vmask = ver == ver[fv]
        per: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        _, first_c = np.unique(np.where(vmask, cat, -1), return_index=True)
        for fc in sorted(first_c.tolist()):
            if not vmask[fc]:
                continue
            mask = vmask & (cat == cat[fc])
            per[cat_names[int(cat[fc])]] = (score[mask], cost[mask])
        out[versions[int(ver[fv])]] = per
    return out


def _version_stability(
    samples_path: str,
    scored: list[tuple[ScoredEntry, ...]],
    id_codes: np.ndarray,
    versions: list[str],
    baseline: Any,
    alpha: float,
    min_samples: int,
) -> list[StabilityCell]:
    """`stability.version_stability`: each version's drift summary, fed sample by sample."""
    from llmwatch.scorers.drift.compare import DriftSettings, compare
    from llmwatch.scorers.drift.features import WindowSummary

    summaries: dict[str, WindowSummary] = {}
    counts: dict[str, int] = defaultdict(int)
    for i, s in enumerate(read_records(samples_path)):
        version = s.model_version or "unknown"
        acc = summaries.get(version)
        if acc is None:
            acc = summaries[version] = WindowSummary()
        counts[version] += 1
        acc.add(s, {e.check: e for e in scored[int(id_codes[i])]})
    settings = DriftSettings(alpha=alpha, min_samples=min_samples)
    cells = []
    for version, acc in sorted(summaries.items()):
        report = compare(
            baseline.routes,
            acc.finish(),
            baseline_version=baseline.model_version,
            current_versions=[version],
            settings=settings,
        )
        cells.append(version_cell(version, report, baseline.model_version, counts[version]))
    return cells


def _turn_decay(col: _Columns, scored: list[tuple[ScoredEntry, ...]], versions: list[str]) -> list[TurnDecay]:
    """`turns.turn_decay` with `check_values(scores)`, over the columns."""
    chat = np.frombuffer(col.chat, dtype=np.int8).astype(bool)
    ver = np.frombuffer(col.version, dtype=np.int32)
    turn = np.frombuffer(col.turn, dtype=np.int64)
    conv = np.frombuffer(col.conversation, dtype=np.int64)
    id_code = np.frombuffer(col.id_code, dtype=np.int64)

    def values_of(code: int) -> dict[str, float]:
        return _values_of(scored[code])

    _, first_v = np.unique(np.where(chat, ver, -1), return_index=True)
    by_version: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]] = {}
    used: dict[str, list[str]] = {}
    for fv in sorted(first_v.tolist()):
        if not chat[fv]:
            continue
        version = versions[int(ver[fv])]
        idx = np.flatnonzero(chat & (ver == ver[fv]))
        per_turn: dict[str, set[str]] = defaultdict(set)
        for i in idx.tolist():
            per_turn[turn_bucket(int(turn[i]))].update(values_of(int(id_code[i])))
        sets = list(per_turn.values())
        common = set.intersection(*sets) if sets else set()
        used[version] = sorted(common)
        keep = array("q")
        ys = array("d")
        for i in idx.tolist():
            mine = [v for c, v in values_of(int(id_code[i])).items() if c in common]
            if mine:
                keep.append(i)
                ys.append(sum(mine) / len(mine))
        if not len(keep):
            continue
        k = np.frombuffer(keep, dtype=np.int64)
        # A sample with no conversation is a conversation of one (its id; negative codes).
        cluster = np.where(conv[k] >= 0, conv[k], -1 - id_code[k])
        by_version[version] = (cluster, turn[k], np.frombuffer(ys, dtype=float), [turn_bucket(int(t)) for t in turn[k]])
    out = []
    for version, (cluster, t, y, buckets) in sorted(by_version.items()):
        b = cluster_bootstrap_slope(cluster.tolist(), t.astype(float), y, bucket=buckets)
        within = t <= MAX_TURN
        fit = cluster_bootstrap_slope(cluster[within].tolist(), t[within].astype(float), y[within])
        out.append(decay_of(version, fit, b, len(y), used.get(version, [])))
    return out
