"""`llmwatch demo`: the whole agent on the embedded default, with nothing else to install.

It starts the built-in simulator as the upstream, the proxy in front of it, drives a realistic
mix of traffic through the proxy with the official `openai` client (chat, streaming chat, JSON
mode, legacy completions, embeddings, a few upstream errors), keeps samples and scores under the
data directory, serves `/metrics`, and ends with a summary. Ctrl-C ends it early, cleanly.

The traffic also shows the three stability figures (issue 26; demo_stability.py): a quarter of
the calls are turns of multi-turn conversations that resend their history, chat prompts come in
five rewordings of each request (simulator.stability.rephrase), every chat call carries a seed,
and the `consistency:` probe re-asks 15% of calls. The summary names, per version, the turn decay
slope, the consistency rate and the prompt sensitivity, each with its interval: version B decays
over turns, changes its answers when asked again and answers rewordings unevenly; A does not.

The run has three equal phases, as a model rollout would:
  1. version A serves; its samples are frozen into a baseline (`<data_dir>/baseline-A.json`),
  2. version A keeps serving and is compared with its own baseline (it must stay stable),
  3. the simulator switches to version B, subtly degraded, which the drift detector must flag.

Each run has its own data: the demo marks the data directory it writes (`.llmwatch-demo`) and
clears its own previous run from it at start; it refuses a non-empty directory it did not write.
Every wait says what it waits for and is bounded: it goes on while the scorer makes progress (a
busy machine scores slower, not never), gives up after STALL_S without a new score and after an
overall cap in any case, and says what it gave up on. The run exits 0 when the story was
shown (a baseline of A, a drift verdict for A and for B), 2 when it could not be (too little
scored data: a busy machine scores slower than the demo sends), saying what is missing and why.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Awaitable, Callable

import numpy as np
import openai
import structlog

from llmwatch.agent.apps.demo_stability import counted, stability_figures, stability_lines
from llmwatch.agent.apps.simulator.server import FAULT_HEADER, PROFILES, SimulatorHandle, start_simulator
from llmwatch.agent.apps.simulator.stability import rephrase
from llmwatch.agent.components import Config
from llmwatch.agent.processes.scoring import ScorerProcess
from llmwatch.agent.runtime import Agent
from llmwatch.agent.signals import run_until_stopped
from llmwatch.collectors.exporters.prometheus import split_host_port
from llmwatch.collectors.shadow.config import ShadowCandidate, ShadowSection
from llmwatch.collectors.shadow.consistency import ConsistencySection
from llmwatch.core.errors import LlmwatchError
from llmwatch.core.jsonio import atomic_writer, make_dirs
from llmwatch.scorers.drift.config import DriftSection
from llmwatch.scorers.drift.model import DriftSettings
from llmwatch.scorers.reports.text import pass_rate_table

log = structlog.get_logger(__name__)

PROMPTS = [
    "How long should I roast a whole chicken, and at what temperature?",
    "What is the difference between a list and a tuple in Python?",
    "Plan a three-day trip to Lisbon on a budget.",
    "How much of my salary should I put into an emergency fund?",
    "When is the best time to plant tomatoes in a temperate climate?",
    "Why does Jupiter have so many moons?",
    "Give me a 20-minute beginner workout I can do at home.",
    "What caused the fall of the Western Roman Empire?",
    "My order #4411 arrived damaged. What are my options?",
    "Write a SQL query that finds the top five customers by total revenue.",
    "How do rising ocean temperatures affect coral reefs?",
    "Recommend some jazz albums for someone new to the genre.",
    "My email is jane.doe@example.com and my card is 4111 1111 1111 1111; can you update my billing?",
]
JSON_PROMPTS = [
    "Return a JSON object summarising the nutritional benefits of lentils.",
    "Answer in JSON: what are three tips for learning Python quickly?",
    "Give a JSON object with the best season to visit Japan and why.",
]
FOLLOW_UPS = ["Can you say more?", "Why is that?", "What should I avoid?", "Any other tips?"]
CONVERSATION_TURNS = 4
PHRASINGS = 5  # simulator.stability.rephrase: as written, lower case, no final punctuation, capitals, word order
CHAT_MODELS = ("sim-gpt-4o-mini", "sim-gpt-4o")
MARKER = ".llmwatch-demo"  # in a data directory the demo wrote: its own to clear on the next run
# The waits for the scorer go on while it makes progress: on a loaded machine the embedding
# scorer falls behind the traffic (a fixed 60 s wait gave up with the scorer still scoring, and
# the run exited 2), but a scorer that scores nothing for STALL_S is stuck, and no wait is longer
# than its cap (the run's watchdog allows for both caps).
STALL_S = 45.0  # give up after this long without a new score (or drift reading)
SETTLE_S = 300.0  # cap of the wait for the scorer to catch up between phases
VERDICT_S = 300.0  # cap of the wait, after the traffic, for the drift verdicts of A and B
# The drift line's effect intervals (the online loops draw none unless drift.interval_draws says).
DEMO_INTERVAL_DRAWS = DriftSettings().interval_draws
MODEL_LOAD_S = 180.0  # longest wait for the scorer's model to load


class DemoDataError(LlmwatchError, ValueError):
    """The data directory holds data the demo did not write (exit 2)."""


def prepare_data_dir(path: Path) -> bool:
    """Make `path` the demo's own, empty; True if a previous demo run was cleared from it.

    A directory the demo wrote before (it holds `MARKER`) is emptied, so that this run's counts,
    drift and shadow pairs are its own (a second run once counted the first one's pairs). Any
    other non-empty directory is refused: it may be a real agent's data.
    """
    make_dirs(path)
    entries = list(path.iterdir())
    cleared = False
    if entries:
        if not (path / MARKER).is_file():
            raise DemoDataError(
                f"the data directory {path} (--data-dir) is not empty and was not written by `llmwatch demo`; "
                "pass --data-dir with a new or empty folder (the demo clears its own folder on every run)"
            )
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        cleared = True
    with atomic_writer(path / MARKER) as fh:  # private like every file llmwatch writes
        fh.write(b"written by `llmwatch demo`; cleared by its next run\n")
    return cleared


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    ttfts_ms: list[float] = field(default_factory=list)
    ok: int = 0
    errors: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def _free_or_default(address: str) -> str:
    """Keep the configured port when it is free; otherwise let the OS pick one (said in the summary)."""
    host, port = split_host_port(address)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return f"{host}:0"
    return address


async def _one_call(
    client: openai.AsyncOpenAI, rng: random.Random, tally: Tally, pool: list[list[dict[str, str]]]
) -> None:
    roll = rng.random()
    model = rng.choice(CHAT_MODELS)
    start = time.perf_counter()
    kind = "chat"
    # A seed per call, as careful clients send: the same call asked again gets the same answer from
    # a stable version, so the consistency probe's re-asks tell A from B.
    seed = rng.randrange(1_000_000)
    try:
        if roll < 0.25:
            kind = "conversation"
            await _conversation_turn(client, model, rng, seed, pool)
        elif roll < 0.40:
            await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": _phrased(rng)}], max_tokens=400, seed=seed
            )
        elif roll < 0.75:
            kind = "chat_stream"
            stream = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": _phrased(rng)}],
                stream=True,
                stream_options={"include_usage": True},
                seed=seed,
            )
            first = None
            async for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter()
            if first is not None:
                tally.ttfts_ms.append((first - start) * 1000.0)
        elif roll < 0.85:
            kind = "chat_json"
            await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": rng.choice(JSON_PROMPTS)}],
                response_format={"type": "json_object"},
                seed=seed,
            )
        elif roll < 0.92:
            kind = "completion"
            await client.completions.create(
                model="sim-gpt-3.5-turbo-instruct", prompt=rng.choice(PROMPTS), max_tokens=120
            )
        elif roll < 0.98:
            kind = "embedding"
            await client.embeddings.create(model="sim-text-embedding-3-small", input=rng.choice(PROMPTS))
        else:
            kind = "upstream_error"
            await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": rng.choice(PROMPTS)}],
                extra_headers={FAULT_HEADER: "status=503"},
            )
        tally.ok += 1
    except openai.APIError:
        tally.errors += 1
    tally.latencies_ms.append((time.perf_counter() - start) * 1000.0)
    tally.by_kind[kind] = tally.by_kind.get(kind, 0) + 1


def _phrased(rng: random.Random) -> str:
    """A prompt in one of its rewordings, as users word one request differently (the card-number
    prompt is left as written: it shows redaction)."""
    prompt = rng.choice(PROMPTS)
    return prompt if prompt == PROMPTS[-1] else rephrase(prompt, rng.randrange(PHRASINGS))


async def _conversation_turn(
    client: openai.AsyncOpenAI, model: str, rng: random.Random, seed: int, pool: list[list[dict[str, str]]]
) -> None:
    """One call of a chat that resends its history (no header: llmwatch follows it by itself): the
    next turn of an open conversation from `pool`, or the first of a new one. One call per arrival,
    so conversations do not add load; a conversation goes back to the pool until its last turn."""
    if pool and rng.random() < 0.75:
        messages = pool.pop(rng.randrange(len(pool)))
        messages.append({"role": "user", "content": FOLLOW_UPS[(len(messages) // 2 - 1) % len(FOLLOW_UPS)]})
    else:
        messages = [{"role": "user", "content": rng.choice(PROMPTS[:-1])}]
    reply = await client.chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=400,
        seed=seed,
    )
    if (len(messages) + 1) // 2 < CONVERSATION_TURNS:
        pool.append([*messages, {"role": "assistant", "content": reply.choices[0].message.content or ""}])


async def drive_traffic(
    base_url: str, *, duration: float, rate: float, concurrency: int, seed: int = 7, stop: asyncio.Event | None = None
) -> Tally:
    """Open-loop arrivals at `rate`/s (Poisson), at most `concurrency` in flight."""
    tally = Tally()
    rng = random.Random(seed)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-demo-not-a-real-key", max_retries=0, timeout=30.0)
    slots = asyncio.Semaphore(concurrency)
    tasks: set[asyncio.Task[None]] = set()
    pool: list[list[dict[str, str]]] = []  # open conversations, waiting for their next turn

    async def run_one() -> None:
        try:
            await _one_call(client, rng, tally, pool)
        finally:
            slots.release()

    deadline = time.perf_counter() + duration
    try:
        while time.perf_counter() < deadline and not (stop and stop.is_set()):
            await asyncio.sleep(rng.expovariate(rate))
            await slots.acquire()
            task = asyncio.create_task(run_one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=30.0)
    finally:
        for task in tasks:
            task.cancel()
        await client.close()
    return tally


def _metric_total(agent: Agent, name: str, **labels: str) -> float:
    total = 0.0
    for family in agent.metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def check_counts(agent: Agent) -> dict[tuple[str, str, str], float]:
    counts: dict[tuple[str, str, str], float] = {}
    for family in agent.metrics.registry.collect():
        for s in family.samples:
            if s.name == "llmwatch_check_total":
                key = (s.labels["check"], s.labels["model_version"], s.labels["result"])
                counts[key] = counts.get(key, 0.0) + s.value
    return counts


def _pct(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q):.0f} ms" if values else "n/a"


def summary(agent: Agent, tally: Tally, traffic_s: float, elapsed: float | None = None) -> str:
    """`traffic_s`: time spent sending traffic, for the request rate; `elapsed`: the whole run."""
    n = tally.ok + tally.errors
    tokens_in = _metric_total(agent, "gen_ai_client_token_usage_sum", gen_ai_token_type="input")
    tokens_out = _metric_total(agent, "gen_ai_client_token_usage_sum", gen_ai_token_type="output")
    cost = _metric_total(agent, "llmwatch_cost_usd_total")
    kept = _metric_total(agent, "llmwatch_samples_total")
    dropped = _metric_total(agent, "llmwatch_samples_dropped_total")
    written = _metric_total(agent, "llmwatch_samples_written_total", sink="files")
    mix = ", ".join(f"{k} {v}" for k, v in sorted(tally.by_kind.items()))
    lines = [
        "",
        "llmwatch demo summary",
        f"  requests         {n} in {traffic_s:.1f} s of traffic ({n / traffic_s if traffic_s else 0:.1f}/s), {counted(tally.errors, 'error')}",
        f"  mix              {mix}",
        f"  latency          p50 {_pct(tally.latencies_ms, 50)}, p95 {_pct(tally.latencies_ms, 95)}",
        f"  time to 1st tok  p50 {_pct(tally.ttfts_ms, 50)}, p95 {_pct(tally.ttfts_ms, 95)} (streamed calls)",
        f"  tokens           {tokens_in:.0f} input, {tokens_out:.0f} output",
        f"  cost             ${cost:.4f} (price table), ${cost / n * 1000 if n else 0:.4f} per 1k requests",
        f"  samples          {kept:.0f} kept, {written:.0f} written, {dropped:.0f} dropped",
        f"  samples folder   {agent.cfg.data_dir / 'samples'}",
    ]
    if agent.scorer is not None:
        scored = agent.recorder.recorded if agent.recorder else 0
        counts = check_counts(agent)
        lines.append(f"  scores           {counted(scored, 'check result')} in {agent.cfg.data_dir / 'scores'}")
        lines += check_table(counts)
        if any(result == "error" and check in judged_checks(counts) for check, _, result in counts):
            lines.append(error_legend(agent))
        lines.append(drift_summary(agent))
        lines.append(stability_summary(agent))
    if agent.shadow is not None:
        lines.append(shadow_summary(agent))
    lines.append(metrics_line(split_host_port(agent.cfg.metrics_listen)[0], agent.metrics_port))
    if elapsed is not None:
        lines.append(f"  run time         {elapsed:.1f} s (traffic, loading the model, waiting for scores)")
    lines.append("")
    return "\n".join(lines)


def metrics_line(host: str, port: int) -> str:
    """Where the metrics were: the summary is printed after the proxy stopped, so the address is
    no longer served; a reader who opens it needs to know how to get a live one."""
    return (
        f"  metrics          were at http://{host}:{port}/metrics while the demo ran (it has stopped); for live ones:\n"
        "                   `llmwatch simulate --port 8000 &` then `llmwatch proxy --upstream http://127.0.0.1:8000`,\n"
        "                   and `curl -s 127.0.0.1:9464/metrics | grep ^gen_ai_`"
    )


def judged_checks(counts: dict[tuple[str, str, str], float]) -> set[str]:
    """The checks that gave at least one verdict (pass or fail) on some version."""
    return {check for (check, _, result), n in counts.items() if result in ("pass", "fail") and n}


def check_table(counts: dict[tuple[str, str, str], float]) -> list[str]:
    """The pass-rate table, rows only for checks with a verdict; the others named under it.

    tool_call applies only to requests that send `tools`, which no demo call does: it gives no
    verdict, and its row showed "- (N err)", only the samples left unscored at stop (recorded as
    `error` for every check), which read as a broken check.
    """
    judged = judged_checks(counts)
    lines = [
        "  pass rate per check and model version:",
        pass_rate_table({k: v for k, v in counts.items() if k[0] in judged}),
        "    each cell: pass rate over the check's verdicts (pass + fail), and how many verdicts.",
    ]
    idle = sorted({check for check, _, _ in counts} - judged)
    if idle:
        lines.append(f"    no verdict, not applicable to this traffic: {', '.join(idle)}")
    return lines


def error_legend(agent: Agent) -> str:
    """What "(N err)" means, and why there are any on this run."""
    at_stop = _metric_total(agent, "llmwatch_samples_unscored_total", reason="shutdown")
    other = _metric_total(agent, "llmwatch_samples_unscored_total") - at_stop
    why = []
    if at_stop:
        why.append(
            f"{counted(at_stop, 'sample')} {'was' if at_stop == 1 else 'were'} still waiting for the scorer when the demo stopped "
            f"(it gives the scorer scoring.shutdown_timeout_s = {agent.cfg.scoring.shutdown_timeout_s:g} s, then records "
            "what is left as `error`: the machine scored slower than the demo sent)"
        )
    if other:
        why.append(
            f"{counted(other, 'sample')} {'was' if other == 1 else 'were'} lost to a scorer crash or timeout (see the log)"
        )
    if not why:
        why.append("a check raised or ran past scoring.check_timeout_s (see the log)")
    return (
        "    (N err): N checks that could not run, so no verdict and not in the pass rate; here " + "; ".join(why) + "."
    )


def scored_samples(agent: Agent) -> dict[str, int]:
    """Samples with a verdict per version: the most verdicts (pass + fail) of any one check."""
    per_check: dict[tuple[str, str], float] = {}
    for (check, version, result), n in check_counts(agent).items():
        if result in ("pass", "fail"):
            per_check[(check, version)] = per_check.get((check, version), 0.0) + n
    out: dict[str, int] = {}
    for (_, version), n in per_check.items():
        out[version] = max(out.get(version, 0), int(n))
    return out


def drift_versions(agent: Agent) -> set[str]:
    return {k[0] for k in agent.drift_state}


def drift_summary(agent: Agent) -> str:
    scored = scored_samples(agent)
    needed = agent.cfg.drift.min_samples
    if not agent.drift_state:
        return (
            "  drift            no comparison (needs a baseline of A and "
            f"{counted(needed, 'scored sample')} per version; scored: "
            + (", ".join(f"{v} {n}" for v, n in sorted(scored.items())) or "none")
            + ")"
        )
    lines = ["  drift against the baseline of version A (Holm-adjusted p < alpha and a material effect):"]
    for version in sorted(drift_versions(agent) | set(scored)):
        if version not in drift_versions(agent):
            lines.append(
                f"    version {version:<4} no comparison: {counted(scored.get(version, 0), 'sample')} scored, {needed} needed "
                "(the scorer did not catch up in time)"
            )
            continue
        readings = {k[2]: v for k, v in agent.drift_state.items() if k[0] == version}
        n = max(v[3] for v in readings.values())
        effects = {k[2]: e for k, e in agent.drift_effects.items() if k[0] == version}
        drifted = sorted((sig, v) for sig, v in readings.items() if v[2])
        # Each with its direction and effect (kind, value, 95 % interval): "DRIFT in
        # pass_rate:refusal (p=4.0e-04)" did not say worse or better, nor by how much.
        verdict = (
            "DRIFT in " + ", ".join(f"{sig} ({_moved(effects.get(sig, ('', '')))}p={v[1]:.1e})" for sig, v in drifted)
            if drifted
            else f"stable over {counted(len(readings), 'signal')}"
        )
        lines.append(f"    version {version:<4} n={n:<5} {verdict}")
    if any(v[2] for v in agent.drift_state.values()):
        data = agent.cfg.data_dir
        lines.append(
            "    effect: diff = current minus baseline, rel = relative change (+0.25 = 25 % higher), dist = distance "
            f"(no sign); [95 % interval]; the whole table: llmwatch drift --baseline {data}/baseline-A-*.json "
            f"--samples {data}/samples --scores {data}/scores --model-version B"
        )
    return "\n".join(lines)


def _moved(effect: tuple[str, str]) -> str:
    """`worse, diff pass rate -0.221 [-0.306, -0.099], ` from (direction, effect); empty parts left out."""
    return "".join(f"{part}, " for part in effect if part)


def _freeze_baseline(agent: Agent, scorer: ScorerProcess, version: str) -> str:
    """Freeze the scorer's window of `version` (its samples, scores and answer embeddings).

    The result is what `llmwatch baseline freeze` makes of the same samples, without loading the
    model a second time in this process.
    """
    path = agent.cfg.data_dir / f"baseline-{version}-{int(time.time())}.json"
    scorer.freeze_baseline(version, str(path))
    return str(path)


@dataclass(frozen=True)
class Waited:
    """How a wait ended: `done`, `stalled` (no progress for the stall time), `capped` or `stopped`."""

    outcome: str
    waited_s: float
    # Seconds since the progress value last changed, when the wait ended.
    idle_s: float


async def wait_while_progressing(
    done: Callable[[], bool],
    progress: Callable[[], object],
    *,
    stall_s: float,
    cap_s: float,
    stop: asyncio.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    poll_s: float = 0.2,
) -> Waited:
    """Poll until `done()`; keep going while `progress()` changes, at most `stall_s` without a change
    and `cap_s` in all; `stop` (Ctrl-C) ends it at once. The clock and sleep are injectable so the
    rule is tested without waiting."""
    started = changed = clock()
    seen = progress()
    while True:
        now = clock()
        if done():
            return Waited("done", now - started, now - changed)
        if stop is not None and stop.is_set():
            return Waited("stopped", now - started, now - changed)
        current = progress()
        if current != seen:
            seen, changed = current, now
        if now - changed >= stall_s:
            return Waited("stalled", now - started, now - changed)
        if now - started >= cap_s:
            return Waited("capped", now - started, now - changed)
        await sleep(poll_s)  # poll interval of a bounded wait


def _scoring_progress(agent: Agent) -> tuple[int, int]:
    """What moves while the scorer works: samples with a verdict, and samples left to score."""
    scorer = agent.scorer
    return sum(scored_samples(agent).values()), scorer.pending if scorer is not None else 0


def _left(agent: Agent) -> int:
    return agent.queue.depth() + (agent.scorer.pending if agent.scorer is not None else 0)


async def _settle(
    agent: Agent,
    timeout: float,
    out: IO[str] | None = None,
    stop: asyncio.Event | None = None,
    stall_s: float = STALL_S,
) -> bool:
    """Wait until queued samples are stored and scored, while the scorer makes progress (at most
    `stall_s` without a new score, `timeout` in all); say what it waits for, and if it gave up."""
    if out is not None and _left(agent):
        out.write(
            f"  waiting for the scorer to catch up ({counted(_left(agent), 'sample')} to score): as long as it scores, "
            f"at most {timeout:.0f} s, giving up after {stall_s:.0f} s without a new score...\n"
        )
        out.flush()
    waited = await wait_while_progressing(
        lambda: _left(agent) == 0,
        lambda: _scoring_progress(agent),
        stall_s=stall_s,
        cap_s=timeout,
        stop=stop,
    )
    if waited.outcome in ("done", "stopped"):
        return waited.outcome == "done"
    if out is not None:
        why = (
            f"no sample scored in the last {waited.idle_s:.0f} s"
            if waited.outcome == "stalled"
            else f"the scorer still scoring at the {timeout:.0f} s cap"
        )
        out.write(
            f"  gave up waiting after {waited.waited_s:.0f} s ({why}): {counted(_left(agent), 'sample')} not scored yet; going on\n"
        )
        out.flush()
    return False


async def _await_verdicts(
    agent: Agent,
    versions: tuple[str, ...],
    timeout: float,
    out: IO[str],
    stop: asyncio.Event,
    stall_s: float = STALL_S,
) -> dict[str, str]:
    """Wait for a drift reading of each version while the scorer makes progress (new scores or new
    readings; at most `timeout` in all); what is missing, and why, by version.

    Gives up early when the scorer is idle and a version has fewer scored samples than the drift
    needs: no amount of waiting brings those.
    """
    needed = agent.cfg.drift.min_samples
    interval = agent.cfg.drift.interval_s
    # A verdict comes one comparison after the last score: never give up before two intervals.
    stall_s = max(stall_s, 2 * interval + 5.0)
    out.write(
        f"  waiting for the drift verdicts of version {' and '.join(versions)} "
        f"(each needs {counted(needed, 'scored sample')}; compared every {interval:g} s): as long as the scorer "
        f"makes progress, at most {timeout:.0f} s, giving up after {stall_s:.0f} s without any...\n"
    )
    out.flush()

    def idle() -> bool:
        return agent.queue.depth() == 0 and agent.scorer is not None and agent.scorer.pending == 0

    def short(scored: dict[str, int]) -> list[str]:
        return [v for v in versions if v not in drift_versions(agent) and scored.get(v, 0) < needed]

    def settled() -> bool:
        # Every verdict in with nothing left to score, or idle with too few samples of a version.
        return idle() and (set(versions) <= drift_versions(agent) or bool(short(scored_samples(agent))))

    waited = await wait_while_progressing(
        settled, lambda: (_scoring_progress(agent), len(agent.drift_state)), stall_s=stall_s, cap_s=timeout, stop=stop
    )
    if waited.outcome == "done" and set(versions) <= drift_versions(agent):
        await asyncio.sleep(interval + 1.5)  # one more comparison over the last samples
        return {}
    scored = scored_samples(agent)
    missing: dict[str, str] = {}
    for v in versions:
        if v in drift_versions(agent):
            continue
        n = scored.get(v, 0)
        if idle() and n < needed:
            why = f"only {counted(n, 'sample')} of {v} {'was' if n == 1 else 'were'} scored and drift needs {needed}: too little traffic for that"
        elif waited.outcome == "stalled":
            why = (
                f"{counted(n, 'sample')} of {v} scored; nothing new in the last {waited.idle_s:.0f} s of "
                f"{waited.waited_s:.0f} s waiting: the scorer stopped making progress"
            )
        else:
            why = (
                f"{counted(n, 'sample')} of {v} scored after waiting {waited.waited_s:.0f} s, the cap: "
                "the scorer did not catch up in time (a busy machine scores slower than the demo sends)"
            )
        missing[v] = f"a drift verdict for version {v} ({why})"
    if missing:
        out.write("  gave up waiting for " + "; ".join(missing.values()) + "\n")
    elif agent.scorer is not None and agent.scorer.pending:
        out.write(
            f"  stopped waiting after {waited.waited_s:.0f} s with the verdicts in and "
            f"{counted(agent.scorer.pending, 'sample')} still unscored: they are recorded as `error` at stop, see (N err) below\n"
        )
    out.flush()
    return missing


def _shadow_demo(cfg: Config, candidate_url: str) -> ShadowSection:
    """The demo's shadow evaluation: a quarter of the calls mirrored to a second simulator serving B."""
    if cfg.shadow.enabled:
        return cfg.shadow  # the user's own candidates
    # Concurrency for the demo's rate at B's pace (about 2 s per answer), so that few mirrors are skipped.
    candidate = ShadowCandidate(
        name="candidate-B", upstream=candidate_url, rate=0.25, max_concurrency=64, timeout_s=30.0
    )
    return cfg.shadow.model_copy(update={"enabled": True, "candidates": [candidate]})


def _drift_demo(cfg: Config) -> DriftSection:
    """Short windows and refreshes, so that a demo of a minute shows a verdict; and the effect
    intervals that the online loops leave out by default, since the demo's drift line prints them."""
    draws = DEMO_INTERVAL_DRAWS if cfg.drift.interval_draws is None else cfg.drift.interval_draws
    return cfg.drift.model_copy(update={"interval_s": 3.0, "min_samples": 40, "window": 400, "interval_draws": draws})


def _consistency_demo(cfg: Config) -> ConsistencySection:
    """The consistency probe on for the demo (a share of calls re-asked of the simulator, which
    costs nothing), unless the user configured one."""
    if cfg.consistency.enabled:
        return cfg.consistency
    return cfg.consistency.model_copy(update={"enabled": True, "rate": 0.15, "max_requests_per_minute": 1200})


def stability_summary(agent: Agent) -> str:
    """The three stability figures per version, from the run's files (after the agent stopped)."""
    if agent.scorer is None:
        return "  stability        no figures (scoring is off)"
    try:
        figures = stability_figures(agent.cfg.data_dir, agent.cfg.matrix)
    except Exception as exc:  # the summary goes on without them rather than failing
        log.warning("demo_stability_failed", error=str(exc))
        return f"  stability        could not be computed ({type(exc).__name__}: {exc})"
    versions = sorted({d.model_version for d in figures.turn_decay} | {p.model_version for p in figures.sensitivity})
    return "\n".join(stability_lines(figures, versions))


def shadow_summary(agent: Agent) -> str:
    """The verdict of `llmwatch shadow report` over the pairs the demo wrote (its margins, its exit code)."""
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.pairs import Pair
    from llmwatch.scorers.evaluation.paired import by_candidate, compare

    folder = agent.cfg.data_dir / "pairs"
    if agent.shadow is None or not folder.is_dir() or not any(folder.glob("pairs-*.jsonl")):
        return "  shadow           no pairs written"
    lines = []
    s = agent.cfg.shadow
    for name, pairs in sorted(by_candidate(read_records(folder, Pair, prefix="pairs")).items()):
        r = compare(pairs, s.margins, alpha=s.alpha, power=s.power)
        if r.verdict == "worse":
            verdict = f"WORSE on {', '.join(r.worse_on)} (exit 1)"
        elif r.verdict == "not_worse":
            verdict = "not worse within the margins (exit 0)"
        else:
            verdict = (
                f"undecided, about {counted(r.needed, 'pair')} needed for the margins (exit 2)"
                if r.needed is not None
                else "undecided (exit 2)"
            )
        # Which versions were paired: in the B phase the primary serves B too, and those pairs
        # compare B with itself (the shadow report says so under its headline).
        against = ", ".join(f"{n} against {a}{' itself' if a == b else ''}" for a, b, n in r.versions)
        lines.append(
            f"  shadow           candidate {name}: {counted(len(pairs), 'pair')} with the primary ({against}); {verdict}"
        )
    lines.append(f"                   details: llmwatch shadow report --pairs {folder}")
    return "\n".join(lines)


async def run_demo(
    cfg: Config, *, duration: float, rate: float, concurrency: int, out: IO[str], sample_rate: float = 0.5
) -> int:
    sim = await start_simulator("127.0.0.1", 0, PROFILES["A"])
    # A candidate version for shadow evaluation: the same prompts mirrored to B, compared in pairs.
    candidate_sim = await start_simulator("127.0.0.1", 0, PROFILES["B"])
    cfg = cfg.model_copy(
        update={
            "shadow": _shadow_demo(cfg, candidate_sim.url),
            "upstream": sim.url,
            "listen": _free_or_default(cfg.listen),
            "metrics_listen": _free_or_default(cfg.metrics_listen),
            "sampling": cfg.sampling.model_copy(update={"rate": sample_rate}),
            "drift": _drift_demo(cfg),
            "consistency": _consistency_demo(cfg),
        }
    )
    started = time.perf_counter()
    try:
        cleared = prepare_data_dir(cfg.data_dir)
    except BaseException:
        await sim.close()
        await candidate_sim.close()
        raise
    agent = Agent(cfg)
    try:
        await agent.start()
    except BaseException:
        await agent.stop()
        await sim.close()
        await candidate_sim.close()
        raise
    host = split_host_port(cfg.listen)[0]
    # The traffic is `duration`; scoring adds the model's load and the waits between phases,
    # so the banner says so rather than promising a run of `duration` seconds.
    extra = (
        ", plus loading the embedding model and waiting for scores between phases" if agent.scorer is not None else ""
    )
    out.write(
        f"llmwatch demo: simulator {sim.url} <- proxy http://{host}:{agent.proxy_port} "
        f"(metrics http://{host}:{agent.metrics_port}/metrics); {duration:.0f} s of traffic in 3 phases{extra}; Ctrl-C to stop early\n"
    )
    if cleared:
        out.write(f"  cleared the previous demo run from {cfg.data_dir}: this run's figures are its own\n")
    out.flush()
    missing: list[str] = []  # the parts of the story this run could not show
    waited_for: dict[str, str] = {}  # drift verdicts the wait gave up on, by version
    # The watchdog: the traffic, the model load and each wait's cap, and a margin.
    watchdog_s = duration * 2 + MODEL_LOAD_S + 2 * SETTLE_S + VERDICT_S + 120.0
    base_url = f"http://{host}:{agent.proxy_port}/v1"
    tally = Tally()
    phase = duration / 3.0
    traffic_s = 0.0
    stopped_early = False
    elapsed = 0.0

    async def story(stop: asyncio.Event) -> None:
        nonlocal traffic_s, waited_for, stopped_early
        watchdog = asyncio.get_running_loop().call_later(watchdog_s, stop.set)
        try:
            traffic_s, waited_for = await _story(
                agent,
                sim,
                out,
                stop,
                base_url,
                phase=phase,
                rate=rate,
                concurrency=concurrency,
                tally=tally,
                missing=missing,
            )
        finally:
            stopped_early = stop.is_set()  # Ctrl-C, SIGTERM or the watchdog
            watchdog.cancel()

    async def cleanup() -> None:
        nonlocal elapsed
        elapsed = time.perf_counter() - started
        await agent.stop()
        await sim.close()
        await candidate_sim.close()

    # The signals are held until the cleanup is done, as in `llmwatch proxy`: a second SIGTERM
    # lets the stop finish, a second Ctrl-C gives it up (exit 130).
    await run_until_stopped(story, cleanup)
    out.write(summary(agent, tally, traffic_s, elapsed))
    # The scorer's last round, at stop, can still bring a verdict the wait gave up on: the summary
    # above shows it, so it is not missing.
    missing += [why for v, why in waited_for.items() if v not in drift_versions(agent)]
    if stopped_early and not missing:
        missing.append("the whole run (stopped early)")
    if missing:
        out.write(
            f"demo incomplete (exit 2): could not show {'; '.join(missing)}. Run it again with more traffic "
            "or on a quieter machine, e.g. `llmwatch demo --duration 90`\n"
        )
    out.flush()
    return 2 if missing else 0


async def _story(
    agent: Agent,
    sim: SimulatorHandle,
    out: IO[str],
    stop: asyncio.Event,
    base_url: str,
    *,
    phase: float,
    rate: float,
    concurrency: int,
    tally: Tally,
    missing: list[str],
) -> tuple[float, dict[str, str]]:
    """The three phases of traffic and the waits between them, until done or `stop`: (seconds of
    traffic, the drift verdicts the wait gave up on by version). `tally` and `missing` are filled in."""
    traffic_s = 0.0
    waited_for: dict[str, str] = {}
    if agent.scorer is not None:
        # Traffic sent before the model is loaded would only queue up for the scorer.
        out.write("  loading the embedding model in the scorer process (10-40 s the first time)...\n")
        out.flush()
        loading = time.perf_counter()
        await _wait_ready(agent.scorer, stop, timeout=MODEL_LOAD_S)
        if not stop.is_set():
            out.write(f"  model ready after {time.perf_counter() - loading:.0f} s\n")
    for name in ("A (baseline)", "A (after freeze)", "B"):
        if stop.is_set():
            break
        if name == "A (after freeze)" and agent.scorer is not None:
            await _settle(agent, SETTLE_S, out, stop)
            await _freeze_step(agent, agent.scorer, out, missing)
        if name == "B":
            sim.set_profile(PROFILES["B"])
        out.write(f"  phase {name}: {phase:.0f} s\n")
        out.flush()
        phase_started = time.perf_counter()
        part = await drive_traffic(base_url, duration=phase, rate=rate, concurrency=concurrency, stop=stop)
        traffic_s += time.perf_counter() - phase_started
        _merge(tally, part)
    if agent.scorer is not None and not stop.is_set():
        await _settle(agent, SETTLE_S, out, stop)
        if not missing:
            waited_for = await _await_verdicts(agent, ("A", "B"), VERDICT_S, out, stop)
    return traffic_s, waited_for


async def _freeze_step(agent: Agent, scorer: ScorerProcess, out: IO[str], missing: list[str]) -> None:
    """Freeze A's baseline and load it in the scorer; on failure say so and note it as missing."""
    try:
        path = await asyncio.to_thread(_freeze_baseline, agent, scorer, "A")
    except Exception as exc:  # the demo goes on without drift rather than failing
        log.warning("demo_baseline_failed", error=str(exc))
        out.write(f"  could not freeze a baseline of version A ({exc}): no drift verdicts on this run\n")
        missing.append(f"a baseline of version A ({exc})")
        return
    scorer.load_baseline(path)
    out.write(f"  froze baseline of version A -> {path}\n")


async def _wait_ready(scorer: ScorerProcess, stop: asyncio.Event, timeout: float) -> None:
    """Until the scorer process has loaded its model, Ctrl-C, or `timeout` (bounded poll)."""
    deadline = time.perf_counter() + timeout
    while not scorer.ready.is_set() and not stop.is_set() and time.perf_counter() < deadline:
        await asyncio.sleep(0.2)


def _merge(total: Tally, part: Tally) -> None:
    total.latencies_ms += part.latencies_ms
    total.ttfts_ms += part.ttfts_ms
    total.ok += part.ok
    total.errors += part.errors
    for kind, n in part.by_kind.items():
        total.by_kind[kind] = total.by_kind.get(kind, 0) + n
