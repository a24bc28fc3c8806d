"""Pages per 30 days: the fixed-window drift test, looked at every 30 s, against the drift pager.

For each scenario a stream of scored samples is drawn (with replacement) from a pool of records
and fed, at `--rate` samples per second, to

* **fixed window**: the online test before issue 28 emulated at its settings: every
  `drift.interval_s` (30 s) the last `drift.window` (2,000) samples against the baseline, alpha
  0.05 with Holm over the signals, the material minimums, and an alert only after 10 minutes of
  consecutive detections (the old `for: 10m`); a page is a rising edge of that alert. The tests
  are the unstratified versions of the families' (two-proportion z for pass rates, the rank-sum
  z against the baseline's values for answer length, the p50/p95 margin with a one-sided
  exceedance test for time per token): the real `compare` takes ~0.1-1 s a look, and a month is
  86,400 looks per run. The traffic here has one stratum, where the stratified tests reduce to these.
* **pager**: the signals of scorers/llmwatch/scorers/drift/pager.py (`watched_signals`, the same
  outcome functions and null rates, built from a baseline frozen with `freeze`), and the same
  e-detector (`sr_log_values`, equal to the online one: tests/unit/test_sequential_stats.py),
  reset after each alarm, its level from `drift.false_pages_per_30d` at `--rate`, and the same
  page rule (an alarm within RESOLVE_AFTER x the longest delay of the page before is no new page).
* **Evidently** (issue 28 item 3; `--evidently`, on when `.bench/evidently-venv` exists): what a
  team running Evidently on a schedule gets. Every simulated hour, Evidently's DataDriftPreset
  with its defaults (bench/evidently_drift.py) on the last hour's samples (`--evidently-window`)
  against the baseline's records, over the same columns the fixed window reads (each check's fail
  flag, output tokens, time per output token); a page per rising edge of its dataset drift (half
  the columns drifted). Its reports take ~0.5 s each here, so it sees only the first
  `--evidently-days` (1) of each stable run and of each regression after its onset; all hourly
  reports of a scenario go to one subprocess (Evidently's import takes seconds).

Pools:

* **real**: the AlpacaEval outputs in ../shared/real-outputs (five models, 805 prompts; read with
  bench/drift_real.py's loader, never copied), scored with the default rule checks. They carry no
  timings: each answer is given a time per output token drawn from a lognormal (median 20 ms,
  sigma 0.3) and a TTFT (median 300 ms), the same for every model unless a scenario slows it.
  Stable (A/A): the baseline is frozen from a random half of one model's prompts and the stream
  is drawn from the other half, so the baseline's own sampling error is in the test, as in
  production. Regressions: the successor version (gpt-3.5-turbo-0301 -> 0613, Mistral v0.2 ->
  v0.3) on the other half; 5 more points of refusals (answers replaced by a refusal); tokens 30 %
  slower. Each regression starts after `--pre-days` of stable traffic.
* **simulated**: bench/synthetic.py's generator of scored traffic (check pass rates, lognormal
  lengths and latencies) with its degradations (not the HTTP simulator, which cannot serve a
  month of traffic in minutes).

    .venv/bin/python bench/pager.py                   # default: a few minutes on 2 cores
    .venv/bin/python bench/pager.py --runs 10 --rate 1
    .venv/bin/python bench/pager.py --no-evidently    # without the Evidently column (~2 min)

Prints a Markdown table: false pages per 30 days of a stable version (mean over runs), and for each
regression the samples from its onset to the first page (median over runs; "-" none within the
horizon).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llmwatch.core.records import Sample  # noqa: E402
from llmwatch.core.scores import Score  # noqa: E402
from llmwatch.scorers.drift.baseline import freeze  # noqa: E402
from llmwatch.scorers.drift.pager import RESOLVE_AFTER, PagerSettings, watched_signals  # noqa: E402
from llmwatch.scorers.drift.rows import per_token_latency  # noqa: E402
from llmwatch.scorers.stats.sequential import detector_threshold, sr_log_values  # noqa: E402

DAY = 86_400.0
REFUSAL = "I'm sorry, but I can't help with that request."


@dataclass
class Pool:
    """Scored records a stream is drawn from, with every value both methods read, per record."""

    samples: list[Sample]
    scores: dict[str, list[Score]]


@dataclass(frozen=True)
class Settings:
    rate: float = 0.1  # samples per second reaching the scorer
    interval_s: float = 30.0
    window: int = 2000
    min_samples: int = 50
    alpha: float = 0.05
    for_looks: int = 20  # 10 minutes of 30 s looks
    pager: PagerSettings = PagerSettings()


# --------------------------------------------------------------------------------------- pools


def real_pool(model: str, records: list[dict], rng: np.random.Generator, *, slower: float = 1.0) -> Pool:
    from drift_real import to_sample

    from llmwatch.scorers.checks.config import ScoringSection
    from llmwatch.scorers.checks.suite import build_suite

    samples = []
    for i, rec in enumerate(r for r in records if r["model"] == model):
        s = to_sample(rec, i)
        tokens = s.usage.output_tokens or 1
        tpot = float(rng.lognormal(math.log(20.0), 0.3)) * slower
        ttft = float(rng.lognormal(math.log(300.0), 0.3))
        samples.append(s.model_copy(update={"latency_ms": ttft + tpot * max(tokens - 1, 1), "ttft_ms": ttft}))
    suite = build_suite(ScoringSection(embeddings=False))
    scores: dict[str, list[Score]] = {}
    for result in suite.score(samples):
        scores.setdefault(result.score.sample_id, []).append(result.score)
    return Pool(samples, scores)


def with_refusals(pool: Pool, share: float, rng: np.random.Generator) -> Pool:
    """`share` more of the answers replaced by a refusal (rescored, so the checks see them)."""
    from llmwatch.scorers.checks.config import ScoringSection
    from llmwatch.scorers.checks.suite import build_suite

    out = []
    for s in pool.samples:
        if rng.random() < share:
            # Same speed per token: only the answer changes.
            tpot = per_token_latency(s.latency_ms, s.ttft_ms, s.usage.output_tokens) or 20.0
            s = s.model_copy(
                update={
                    "id": s.id + "-r",
                    "response": {"choices": [{"message": {"role": "assistant", "content": REFUSAL}}]},
                    "usage": s.usage.model_copy(update={"output_tokens": 12}),
                    "latency_ms": (s.ttft_ms or 0.0) + tpot * 11,
                }
            )
        out.append(s)
    scores: dict[str, list[Score]] = {}
    for result in build_suite(ScoringSection(embeddings=False)).score(out):
        scores.setdefault(result.score.sample_id, []).append(result.score)
    return Pool(out, scores)


def synthetic_pool(behaviour, n: int, rng: np.random.Generator, prefix: str) -> Pool:
    from synthetic import window

    samples, scores, _ = window(rng, n, behaviour, prefix=prefix)
    by_id: dict[str, list[Score]] = {}
    for sc in scores:
        by_id.setdefault(sc.sample_id, []).append(sc)
    return Pool(samples, by_id)


def split(pool: Pool, rng: np.random.Generator) -> tuple[Pool, Pool]:
    mask = rng.random(len(pool.samples)) < 0.5
    a = [s for s, m in zip(pool.samples, mask) if m]
    b = [s for s, m in zip(pool.samples, mask) if not m]
    return Pool(a, pool.scores), Pool(b, pool.scores)


def by_prompt(pool: Pool, keep: set[str]) -> Pool:
    return Pool([s for s in pool.samples if s.metadata.get("prompt_id") in keep], pool.scores)


# ----------------------------------------------------------------------------- per-record values


@dataclass
class Table:
    """Per record of a pool: each pager signal's outcome (-1: none) and the fixed window's values."""

    pager: dict[str, np.ndarray]
    fails: dict[str, np.ndarray]  # check -> 1 fail, 0 pass, -1 not scored
    tokens: np.ndarray  # NaN: none
    tpot: np.ndarray


def table(pool: Pool, signals) -> Table:
    pager = {}
    for sig in signals:
        out = []
        for s in pool.samples:
            y = sig.outcome(s, {sc.check: sc for sc in pool.scores.get(s.id, [])})
            out.append(-1 if y is None else y)
        pager[sig.name] = np.asarray(out, dtype=np.int8)
    checks = sorted({n.split(":", 1)[1] for n in pager if n.startswith("pass_rate:")})
    fails = {}
    for c in checks:
        col = []
        for s in pool.samples:
            sc = next((x for x in pool.scores.get(s.id, []) if x.check == c), None)
            col.append(-1 if sc is None or sc.result not in ("pass", "fail") else int(sc.result == "fail"))
        fails[c] = np.asarray(col, dtype=np.int8)
    tokens = np.asarray(
        [
            float(s.usage.output_tokens) if s.usage.output_tokens is not None and s.status < 400 else np.nan
            for s in pool.samples
        ]
    )
    tp = [
        per_token_latency(s.latency_ms, s.ttft_ms, s.usage.output_tokens) if s.status < 400 else None
        for s in pool.samples
    ]
    return Table(pager, fails, tokens, np.asarray([np.nan if v is None else v for v in tp]))


# ------------------------------------------------------------------------------------- methods


def pager_pages(stream: Table, idx: np.ndarray, threshold: float, stop_after: int | None = None) -> list[int]:
    """Sample positions of the pager's pages: e-detector alarms (reset after each) that start a page,
    i.e. not within RESOLVE_AFTER x the longest delay of the page before. With `stop_after`, each
    signal is followed only to its first alarm at or after that position (a regression's first page)."""
    log_c = math.log(threshold)
    pages = []
    for name, col in stream.pager.items():
        ys = col[idx]
        valid = np.flatnonzero(ys >= 0)
        y = ys[valid].astype(float)
        start, last, longest = 0, None, 0
        while start < y.size:
            hits = np.flatnonzero(sr_log_values(y[start:], Q[name]) >= log_c)
            if not hits.size:
                break
            at = start + int(hits[0])
            delay = int(hits[0]) + 1
            if last is None or at - last > RESOLVE_AFTER * max(longest, 1):
                pages.append(int(valid[at]))
                longest = delay
            else:
                longest = max(longest, delay)
            last, start = at, at + 1
            if stop_after is not None and valid[at] >= stop_after:
                break
    return sorted(pages)


Q: dict[str, float] = {}


def rolling(values: np.ndarray, valid: np.ndarray, ends: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum of `values` and count of `valid` over the `width` samples before each of `ends`."""
    cv = np.concatenate([[0.0], np.cumsum(np.where(valid, values, 0.0))])
    cn = np.concatenate([[0], np.cumsum(valid)])
    lo = np.maximum(ends - width, 0)
    return cv[ends] - cv[lo], cn[ends] - cn[lo]


def fixed_pages(stream: Table, idx: np.ndarray, base: Table, settings: Settings, pm: PagerSettings) -> list[int]:
    """Sample positions where the fixed-window alert (after its `for:`) starts firing."""
    step = max(int(round(settings.interval_s * settings.rate)), 1)
    ends = np.arange(step, len(idx) + 1, step)
    pvals, decided = [], []
    for c, col in stream.fails.items():
        b = base.fails[c]
        k0, n0 = float((b == 1).sum()), float((b >= 0).sum())
        y = col[idx]
        k, n = rolling((y == 1).astype(float), y >= 0, ends, settings.window)
        p1, p0 = k / np.maximum(n, 1), k0 / n0
        pool = (k + k0) / np.maximum(n + n0, 1)
        se = np.sqrt(np.maximum(pool * (1 - pool) * (1 / np.maximum(n, 1) + 1 / n0), 1e-12))
        pvals.append(2 * stats.norm.sf(np.abs(p1 - p0) / se))
        decided.append((np.abs(p1 - p0) >= pm.min_pass_rate_change) & (n >= settings.min_samples))
    # Answer length: rank-sum z against the baseline's values; material when the window's median
    # moved by more than min_relative_change.
    bt = np.sort(base.tokens[~np.isnan(base.tokens)])
    x = stream.tokens[idx]
    ok = ~np.isnan(x)
    xs = np.where(ok, x, 0.0)
    u = (np.searchsorted(bt, xs, "left") + np.searchsorted(bt, xs, "right")) / (2 * len(bt))
    su, n = rolling(u, ok, ends, settings.window)
    mean_u = su / np.maximum(n, 1)
    z = (mean_u - 0.5) / np.sqrt((n + len(bt) + 1) / (12 * np.maximum(n, 1) * len(bt)))
    med = float(np.median(bt))
    above, _ = rolling((xs > med * (1 + pm.min_relative_change)).astype(float), ok, ends, settings.window)
    below, _ = rolling((xs < med * (1 - pm.min_relative_change)).astype(float), ok, ends, settings.window)
    pvals.append(2 * stats.norm.sf(np.abs(z)))
    decided.append(((above > n / 2) | (below > n / 2)) & (n >= settings.min_samples))
    # Time per token: p50 and p95 beyond the margin, and slower by the rank-sum test.
    bp = np.sort(base.tpot[~np.isnan(base.tpot)])
    x = stream.tpot[idx]
    ok = ~np.isnan(x)
    xs = np.where(ok, x, 0.0)
    u = (np.searchsorted(bp, xs, "left") + np.searchsorted(bp, xs, "right")) / (2 * len(bp))
    su, n = rolling(u, ok, ends, settings.window)
    z = (su / np.maximum(n, 1) - 0.5) / np.sqrt((n + len(bp) + 1) / (12 * np.maximum(n, 1) * len(bp)))
    for p in (0.5, 0.95):
        q = float(np.quantile(bp, p))
        over, _ = rolling((xs > q * (1 + pm.performance_margin)).astype(float), ok, ends, settings.window)
        pvals.append(stats.norm.sf(z))
        decided.append((over > (1 - p) * n) & (n >= settings.min_samples))
    # Holm over the signals at each look.
    P = np.vstack(pvals)  # (signals, looks)
    m = P.shape[0]
    order = np.argsort(P, axis=0)
    sorted_p = np.take_along_axis(P, order, axis=0)
    adj = np.maximum.accumulate(sorted_p * (m - np.arange(m))[:, None], axis=0).clip(max=1.0)
    adjusted = np.empty_like(adj)
    np.put_along_axis(adjusted, order, adj, axis=0)
    drift = ((adjusted < settings.alpha) & np.vstack(decided)).any(axis=0)
    # for: 10m -> the alert fires at the for_looks-th consecutive detection; a page per rising edge.
    run = np.zeros(drift.size, dtype=int)
    count = 0
    for i, d in enumerate(drift):
        count = count + 1 if d else 0
        run[i] = count
    firing = run >= settings.for_looks
    starts = np.flatnonzero(firing & ~np.concatenate([[False], firing[:-1]]))
    return [int(ends[i]) - 1 for i in starts]


# ------------------------------------------------------------------------------------ Evidently

EVIDENTLY_PYTHON = Path(__file__).resolve().parent.parent / ".bench" / "evidently-venv" / "bin" / "python"


def evidently_rows(t: Table, idx: np.ndarray) -> list[dict[str, float | None]]:
    """The columns a team would hand Evidently, per sample: each check's fail flag (1 fail, 0 pass,
    none when not scored), output tokens and time per output token (none on errors)."""
    cols: dict[str, np.ndarray] = {f"fail:{c}": np.where(v[idx] >= 0, v[idx], np.nan) for c, v in t.fails.items()}
    cols["output_tokens"] = t.tokens[idx]
    cols["ms_per_token"] = t.tpot[idx]
    names = list(cols)
    matrix = np.column_stack([cols[n].astype(float) for n in names])
    return [{n: (None if math.isnan(v) else float(v)) for n, v in zip(names, row)} for row in matrix.tolist()]


@dataclass
class EvidentlyRun:
    """One run's hourly Evidently jobs: the stream positions where each hour ends, and the jobs."""

    ends: np.ndarray
    reference: list[dict[str, float | None]]
    jobs: list[dict[str, Any]]


def evidently_run(
    stream: Table, idx: np.ndarray, base: Table, settings: Settings, window: int, start: int = 0
) -> EvidentlyRun:
    """Every simulated hour from stream position `start`, the last `window` samples against the
    reference (the baseline's records)."""
    step = max(int(round(3600 * settings.rate)), 1)
    ends = np.arange(start + step, len(idx) + 1, step)
    rows = evidently_rows(stream, idx)
    jobs = [{"name": str(int(e)), "current": rows[max(int(e) - window, 0) : int(e)]} for e in ends]
    return EvidentlyRun(ends, evidently_rows(base, np.arange(base.tokens.size)), jobs)


def evidently_pages(runs: list[EvidentlyRun], python: Path) -> tuple[str, list[list[int]]]:
    """All runs' hourly reports in one subprocess (Evidently's import takes seconds). A page is a
    rising edge of Evidently's dataset drift: consecutive drifted hours are one page, as an alert
    on `dataset_drift` would fire once and stay firing. Returns Evidently's version and, per run,
    the stream positions of its pages."""
    jobs, references = [], {}
    for i, r in enumerate(runs):
        references[f"r{i}"] = r.reference
        jobs += [{**j, "name": f"r{i}:{j['name']}", "reference": f"r{i}"} for j in r.jobs]
    proc = subprocess.run(
        [str(python), str(Path(__file__).resolve().parent / "evidently_drift.py")],
        input=json.dumps({"references": references, "jobs": jobs}),
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench/evidently_drift.py failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    out = json.loads(proc.stdout)
    drift = {r["name"]: bool(r["dataset_drift"]) for r in out["results"]}
    pages = []
    for i, r in enumerate(runs):
        flags = [drift[f"r{i}:{j['name']}"] for j in r.jobs]
        pages.append([int(r.ends[k]) - 1 for k, d in enumerate(flags) if d and (k == 0 or not flags[k - 1])])
    return str(out["version"]), pages


# ------------------------------------------------------------------------------------ scenarios


def run_case(
    base_pool: Pool,
    stable: Pool,
    regressed: Pool | None,
    settings: Settings,
    rng: np.random.Generator,
    days: float,
    evidently: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """Pages of each method on one stream. With `evidently` (days, window), also the hourly
    Evidently jobs over a stable stream's first `days`, or a regression's first `days` after its
    onset (its reports take ~0.5 s each on this machine: a month of hours per run is too slow)."""
    baseline = freeze(
        base_pool.samples,
        [sc for s in base_pool.samples for sc in base_pool.scores.get(s.id, [])],
        None,
        model_version="base",
    )
    signals = watched_signals(baseline, settings.pager)
    Q.clear()
    Q.update({s.name: s.q for s in signals})
    threshold = detector_threshold(
        settings.pager.false_pages_per_30d, settings.pager.samples_per_s * 30 * DAY, len(signals)
    )
    base_t = table(base_pool, signals)
    st = table(stable, signals)
    n = int(days * DAY * settings.rate)
    if regressed is None:
        idx = rng.integers(0, len(stable.samples), n)
        got: dict[str, Any] = {
            "pager": pager_pages(st, idx, threshold),
            "fixed": fixed_pages(st, idx, base_t, settings, settings.pager),
        }
        if evidently is not None:
            ev_n = int(evidently[0] * DAY * settings.rate)
            got["evidently"] = evidently_run(st, idx[:ev_n], base_t, settings, evidently[1])
        return got
    rt = table(regressed, signals)
    joined = Table(
        {k: np.concatenate([st.pager[k], rt.pager[k]]) for k in st.pager},
        {k: np.concatenate([st.fails[k], rt.fails[k]]) for k in st.fails},
        np.concatenate([st.tokens, rt.tokens]),
        np.concatenate([st.tpot, rt.tpot]),
    )
    pre = int(PRE_DAYS * DAY * settings.rate)
    idx = np.concatenate(
        [rng.integers(0, len(stable.samples), pre), len(stable.samples) + rng.integers(0, len(regressed.samples), n)]
    )
    out: dict[str, Any] = {"pre": pre}
    if evidently is not None:
        ev_n = int(evidently[0] * DAY * settings.rate)
        out["evidently"] = evidently_run(joined, idx[: pre + ev_n], base_t, settings, evidently[1], start=pre)
    for name, pages in (
        ("pager", pager_pages(joined, idx, threshold, stop_after=pre)),
        ("fixed", fixed_pages(joined, idx, base_t, settings, settings.pager)),
    ):
        after = [p - pre for p in pages if p >= pre]
        out[name] = after[:1]
        out[name + "_before"] = [p for p in pages if p < pre]
    return out


PRE_DAYS = 1.0


def fmt_rate(pages: list[int], runs: int, days: float) -> str:
    return f"{pages_total(pages) / runs * 30 / days:.2f}"


def pages_total(pages: list[int]) -> int:
    return len(pages)


class Bench:
    """The table's rows, one scenario at a time."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.settings = Settings(rate=args.rate, pager=PagerSettings(samples_per_s=args.rate))
        self.rng = np.random.default_rng(args.seed)
        self.rows: list[str] = []
        # One hour of samples unless told otherwise: what an hourly job over the last hour sees.
        self.ev_window = args.evidently_window or max(int(round(3600 * args.rate)), 1)
        self.ev: tuple[float, int] | None = (args.evidently_days, self.ev_window) if args.evidently else None
        self.ev_version = ""

    def _evidently(self, runs: list[EvidentlyRun]) -> list[list[int]]:
        version, pages = evidently_pages(runs, self.args.evidently_python)
        self.ev_version = version
        return pages

    def stable(self, label: str, make: Callable[[], tuple[Pool, Pool]]) -> None:
        args, got = self.args, {"pager": [], "fixed": []}
        ev_runs: list[EvidentlyRun] = []
        for _ in range(args.runs):
            base, cur = make()
            r = run_case(base, cur, None, self.settings, self.rng, args.days, self.ev)
            for k in got:
                got[k] += r[k]
            if self.ev is not None:
                ev_runs.append(r["evidently"])
        ev = "not run"
        if self.ev is not None:
            days = min(args.evidently_days, args.days)
            ev = fmt_rate([p for pages in self._evidently(ev_runs) for p in pages], args.runs, days)
        self._row(
            f"| {label} | stable | {fmt_rate(got['fixed'], args.runs, args.days)} | {ev} | {fmt_rate(got['pager'], args.runs, args.days)} |"
        )

    def regression(self, label: str, make: Callable[[], tuple[Pool, Pool, Pool]]) -> None:
        got: dict[str, list[float]] = {"pager": [], "fixed": [], "evidently": []}
        early = {"pager": 0, "fixed": 0, "evidently": 0}
        ev_runs: list[EvidentlyRun] = []
        pres: list[int] = []
        for _ in range(self.args.runs):
            base, cur, bad = make()
            r = run_case(base, cur, bad, self.settings, self.rng, self.args.horizon_days, self.ev)
            for k in ("pager", "fixed"):
                got[k].append(r[k][0] if r[k] else math.inf)
                early[k] += len(r[k + "_before"])
            if self.ev is not None:
                ev_runs.append(r["evidently"])
                pres.append(r["pre"])
        if self.ev is not None:
            for pre, pages in zip(pres, self._evidently(ev_runs)):
                after = [p - pre for p in pages if p >= pre]
                got["evidently"].append(after[0] if after else math.inf)
                early["evidently"] += len(pages) - len(after)

        def cell(k: str) -> str:
            if not got[k]:
                return "not run"
            med = float(np.median(got[k]))
            runs = ", ".join(f"{v:,.0f}" if math.isfinite(v) else "-" for v in sorted(got[k]))
            text = (f"{med:,.0f}" if math.isfinite(med) else "-") + f" (runs: {runs})"
            return text + (f"; {early[k]} false before onset" if early[k] else "")

        self._row(f"| {label} | regression | {cell('fixed')} | {cell('evidently')} | {cell('pager')} |")

    def _row(self, row: str) -> None:
        self.rows.append(row)
        print(row, file=sys.stderr, flush=True)

    def real(self, folder: Path) -> None:
        from drift_real import load_alpaca_eval

        records = load_alpaca_eval(folder)
        prompts = sorted({r["prompt_id"] for r in records})
        pools: dict[str, Pool] = {}
        rng = self.rng

        def pool(model: str, slower: float = 1.0) -> Pool:
            key = f"{model}@{slower}"
            if key not in pools:
                seed = int.from_bytes(key.encode()[:8].ljust(8, b"\0"), "little") % 2**32
                pools[key] = real_pool(model, records, np.random.default_rng(seed), slower=slower)
            return pools[key]

        def halves() -> tuple[set[str], set[str]]:
            mask = rng.random(len(prompts)) < 0.5
            return {p for p, m in zip(prompts, mask) if m}, {p for p, m in zip(prompts, mask) if not m}

        def aa(model: str) -> tuple[Pool, Pool]:
            a, b = halves()
            return by_prompt(pool(model), a), by_prompt(pool(model), b)

        def successor(old: str, new: str, slower: float = 1.0) -> tuple[Pool, Pool, Pool]:
            a, b = halves()
            return by_prompt(pool(old), a), by_prompt(pool(old), b), by_prompt(pool(new, slower), b)

        def refusals() -> tuple[Pool, Pool, Pool]:
            base, cur, _ = successor("gpt4_0314", "gpt4_0314")
            return base, cur, with_refusals(cur, 0.05, rng)

        for model in ("gpt4_0314", "gpt-3.5-turbo-0613", "Mistral-7B-Instruct-v0.3"):
            self.stable(
                f"real: {model}, A/A (baseline one half of the prompts, traffic the other)", lambda m=model: aa(m)
            )
        for old, new in (
            ("gpt-3.5-turbo-0301", "gpt-3.5-turbo-0613"),
            ("Mistral-7B-Instruct-v0.2", "Mistral-7B-Instruct-v0.3"),
        ):
            self.regression(f"real: {old} -> {new}", lambda o=old, n=new: successor(o, n))
        self.regression("real: gpt4_0314, 5 points more refusals", refusals)
        self.regression("real: gpt4_0314, tokens 30 % slower", lambda: successor("gpt4_0314", "gpt4_0314", 1.3))

    def simulated(self) -> None:
        from synthetic import Behaviour, degradations

        base_b, rng = Behaviour(), self.rng
        self.stable(
            "simulated: A/A (bench/synthetic.py)",
            lambda: (synthetic_pool(base_b, 2000, rng, "b"), synthetic_pool(base_b, 4000, rng, "c")),
        )
        for label, worse in degradations(base_b).items():
            if label in ("10% of answers off-topic", "refusals +10% (relative)"):
                continue  # embedding-only, and below every material minimum
            self.regression(
                f"simulated: {label}",
                lambda worse=worse: (
                    synthetic_pool(base_b, 2000, rng, "b"),
                    synthetic_pool(base_b, 4000, rng, "c"),
                    synthetic_pool(worse, 4000, rng, "d"),
                ),
            )


def main(argv: list[str] | None = None) -> int:
    global PRE_DAYS
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=2, help="stable runs per model and repeats per regression")
    ap.add_argument("--days", type=float, default=30.0, help="simulated days of a stable run")
    ap.add_argument("--horizon-days", type=float, default=3.0, help="days after a regression's onset watched")
    ap.add_argument("--pre-days", type=float, default=1.0, help="stable days before a regression starts")
    ap.add_argument(
        "--rate", type=float, default=0.1, help="scored samples per second (default 0.1: 10 %% of 1 call/s)"
    )
    ap.add_argument("--real", help="folder of the AlpacaEval outputs (default ../shared/real-outputs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--evidently",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run Evidently's DataDriftPreset every simulated hour (default: on when its venv exists)",
    )
    ap.add_argument("--evidently-python", type=Path, default=EVIDENTLY_PYTHON, help="python of Evidently's venv")
    ap.add_argument(
        "--evidently-days",
        type=float,
        default=1.0,
        help="days of each stable run (pages scaled to 30 days), and of each regression after its onset, "
        "given to Evidently: its reports take ~0.5 s each",
    )
    ap.add_argument(
        "--evidently-window", type=int, default=0, help="samples per Evidently report (default: one hour's worth)"
    )
    args = ap.parse_args(argv)
    ev_note = ""
    if args.evidently is None:
        args.evidently = args.evidently_python.exists()
        if not args.evidently:
            ev_note = (
                f"Evidently not run: {args.evidently_python} not found (python -m venv .bench/evidently-venv && "
                '.bench/evidently-venv/bin/pip install evidently "pandas<3")'
            )
    elif args.evidently and not args.evidently_python.exists():
        print(f"--evidently: {args.evidently_python} not found; see bench/evidently_drift.py", file=sys.stderr)
        return 2
    if ev_note:
        print(ev_note, file=sys.stderr)
    PRE_DAYS = args.pre_days
    started = time.monotonic()
    bench = Bench(args)
    from drift_real import shared_dir

    found = shared_dir()
    real = Path(args.real) if args.real else (found / "real-outputs" if found else Path("../shared/real-outputs"))
    if real.is_dir():
        bench.real(real)
    else:
        print(f"{real}: not found; the real-output rows are left out", file=sys.stderr)
    bench.simulated()
    ev_text = (
        f"Evidently {bench.ev_version} DataDriftPreset (defaults) every simulated hour on the last "
        f"{bench.ev_window:,} samples against the baseline's records, a page per rising edge of dataset drift; "
        f"it is given each stable run's first {min(args.evidently_days, args.days):g} days and each "
        f"regression's first {min(args.evidently_days, args.horizon_days):g} days after the onset (no hours before it)"
        if args.evidently
        else ev_note or "Evidently not run (--no-evidently)"
    )
    print(
        f"\n{args.runs} runs each; stable runs {args.days:g} days, regressions watched {args.horizon_days:g} days after "
        f"{args.pre_days:g} stable days; {args.rate:g} scored samples/s; pager: {bench.settings.pager.false_pages_per_30d:g} "
        f"false page per 30 days budget at that rate; {ev_text}; {time.monotonic() - started:.0f} s\n"
    )
    print(
        "| scenario | kind | fixed window, every 30 s, for: 10m | Evidently DataDriftPreset, hourly | pager (e-detector) |"
    )
    print("|---|---|---|---|---|")
    print("\n".join(bench.rows))
    print(
        "\nstable: false pages per 30 days (mean over runs). regression: scored samples from the onset to the first page, median "
        "over runs, and each run's ('-': no page within the horizon); pages in the stable days before the onset are false pages."
    )
    if args.evidently:
        print(
            f"Evidently: stable rows from each run's first {min(args.evidently_days, args.days):g} days, scaled to 30; "
            f"regressions watched {min(args.evidently_days, args.horizon_days):g} days from the onset (the hours before "
            "it not given); its pages fall at the end of an hour (359, 719, ... samples after the onset at 0.1/s)."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
