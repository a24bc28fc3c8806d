"""Acceptance harness for issue 14 on real model outputs, through the real `llmwatch` command line.

Converts per-model outputs (AlpacaEval `model_outputs.json`, or the JSONL format of
bench/drift_real.py) into llmwatch sample files, scores each model once (`llmwatch score`), then
for every scenario writes a baseline window and a current window and runs, as subprocesses,

    llmwatch baseline freeze --samples base.jsonl --scores S --model-version V --out baseline.json
    llmwatch drift --baseline baseline.json --samples current.jsonl --scores S --format json

and checks what issue 14's acceptance asks:

* mix shift: one model, baseline mostly selfinstruct + helpful_base prompts, current mostly koala +
  oasst + vicuna (disjoint prompts, 80/20 each way): exit other than 1 and
  `families.inputs.verdict == "shifted"`;
* version pairs: OLD's answers as baseline, NEW's on the same prompts as current: exit 1;
* A/A: random halves of one model's prompts: exit 0 (the rate over `--splits` splits).

It prints a table (scenario, models, exit, family verdicts, signals that fired, n) and, when an
Evidently environment is given (`--evidently-python`, default `.bench/evidently-venv/bin/python`
if present), Evidently's data-drift preset on the same behaviour columns of the same windows
(output tokens, answer length, each check's pass flag and score), run by bench/evidently_drift.py.

    git clone https://github.com/tatsu-lab/alpaca_eval
    python bench/drift_real_cli.py --alpaca-eval alpaca_eval/results --splits 20

`--category source` tags each sample with its prompt source (`metadata.category`, as the
`x-llmwatch-category` header would); the default `none` sends untagged traffic, so llmwatch must
find comparable prompts itself (matched prompts, prompt clusters). `--llmwatch` runs another build
of the CLI (e.g. another worktree's `.venv/bin/llmwatch`). The data is read where it lies; the
converted files go to a temporary folder (`--work` to keep them) and never into the repository.
Exit status: 0 when every acceptance check held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drift_real import load, load_alpaca_eval, to_sample  # noqa: E402

# Successor versions with a behaviour change on the same prompts (AlpacaEval's own names).
PAIRS = (
    "gpt4_0613:gpt4_0613_verbose",
    "gpt4_0613:gpt4_0613_concise",
    "Mixtral-8x7B-Instruct-v0.1:Mixtral-8x7B-Instruct-v0.1_concise",
    "Mixtral-8x7B-Instruct-v0.1:Mixtral-8x7B-Instruct-v0.1_verbose",
    "gpt-3.5-turbo-0613:gpt-3.5-turbo-1106",
    "Mistral-7B-Instruct-v0.2:Mistral-7B-Instruct-v0.3",
    "claude-2:claude-2.1",
    "vicuna-7b-v1.3:vicuna-7b-v1.5",
    "alpaca-7b:alpaca-7b_verbose",
)
AA_MODELS = ("gpt4_0613", "claude-2", "Mixtral-8x7B-Instruct-v0.1", "vicuna-7b-v1.3")
GROUP_1 = ("selfinstruct", "helpful_base")
GROUP_2 = ("koala", "oasst", "vicuna")
HERE = Path(__file__).resolve().parent


class Cli:
    def __init__(self, command: list[str], embeddings: bool, timeout_s: float) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.env = {
            **os.environ,
            "LLMWATCH_SCORING__EMBEDDINGS": "true" if embeddings else "false",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, *args: str, expect: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
        started = time.monotonic()
        proc = subprocess.run(
            [*self.command, *args], capture_output=True, text=True, env=self.env, timeout=self.timeout_s
        )
        self.calls += 1
        self.seconds += time.monotonic() - started
        if proc.returncode not in expect:
            raise SystemExit(f"llmwatch {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        return proc


def write_jsonl(path: Path, rows: list[bytes]) -> Path:
    path.write_bytes(b"".join(r + b"\n" for r in rows))
    return path


class Model:
    """One model's outputs as llmwatch samples, scored once by `llmwatch score`."""

    def __init__(
        self, name: str, records: list[dict[str, Any]], work: Path, cli: Cli, category: str, reuse: bool = False
    ) -> None:
        self.name = name
        self.dir = work / "models" / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lines: dict[str, bytes] = {}  # prompt_id -> sample line
        self.source: dict[str, str] = {}
        self.sample_id: dict[str, str] = {}
        for i, rec in enumerate(records):
            s = to_sample(rec, i)
            if category == "none":
                s.metadata = {}  # untagged traffic: no category, no source hint
            self.lines[rec["prompt_id"]] = orjson.dumps(s.model_dump(mode="json", by_alias=True))
            self.source[rec["prompt_id"]] = str(rec.get("source"))
            self.sample_id[rec["prompt_id"]] = s.id
        self.samples = self.dir / "samples.jsonl"
        self.scores = self.dir / "scores.jsonl"
        body = b"".join(r + b"\n" for r in self.lines.values())
        # Scoring (with embeddings, minutes per model) is done once: a kept --work folder with the
        # very same samples and their scores is reused; anything else is scored afresh.
        if not (reuse and self.scores.exists() and self.samples.exists() and self.samples.read_bytes() == body):
            self.samples.write_bytes(body)
            self.scores.unlink(missing_ok=True)
            cli("score", "--in", str(self.samples), "--out", str(self.scores))
        self.features = self._features()

    def _features(self) -> dict[str, dict[str, float]]:
        """The behaviour columns given to Evidently, per prompt_id."""
        by_sample: dict[str, dict[str, float]] = collections.defaultdict(dict)
        for line in self.scores.read_bytes().splitlines():
            sc = orjson.loads(line)
            row = by_sample[sc["sample_id"]]
            if sc["result"] in ("pass", "fail"):
                row[f"pass:{sc['check']}"] = 1.0 if sc["result"] == "pass" else 0.0
            if sc.get("value") is not None and sc["kind"] != "rule":
                row[f"score:{sc['check']}"] = float(sc["value"])
        out = {}
        for pid, line in self.lines.items():
            s = orjson.loads(line)
            answer = s["response"]["choices"][0]["message"]["content"]
            out[pid] = {
                "output_tokens": float(s["usage"]["output_tokens"]),
                "answer_chars": float(len(answer)),
                **by_sample.get(self.sample_id[pid], {}),
            }
        return out

    def prompts(self) -> list[str]:
        return list(self.lines)


def run_case(
    cli: Cli,
    work: Path,
    name: str,
    old: Model,
    base: list[str],
    new: Model,
    cur: list[str],
    baseline: Path | None = None,
) -> dict[str, Any]:
    """Freeze OLD on the `base` prompts (unless a frozen baseline is given), then drift NEW on the `cur` prompts."""
    case = work / "cases" / name
    case.mkdir(parents=True, exist_ok=True)
    if baseline is None:
        baseline = case / "baseline.json"
        baseline.unlink(missing_ok=True)
        cli(
            "baseline",
            "freeze",
            "--samples",
            str(write_jsonl(case / "base.jsonl", [old.lines[p] for p in base])),
            "--scores",
            str(old.scores),
            "--model-version",
            old.name,
            "--out",
            str(baseline),
        )
    proc = cli(
        "drift",
        "--baseline",
        str(baseline),
        "--samples",
        str(write_jsonl(case / "current.jsonl", [new.lines[p] for p in cur])),
        "--scores",
        str(new.scores),
        "--format",
        "json",
        expect=(0, 1, 2),
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(
            f"{name}: drift printed no JSON (exit {proc.returncode}):\n{proc.stdout[-1000:]}\n{proc.stderr[-1000:]}"
        ) from None
    fams = report.get("families", {})
    fired = [
        f"{s['name']}{' in ' + s['stratum'] if s.get('stratum') else ''}"
        for s in report.get("signals", [])
        if s.get("verdict") in ("drift", "shifted")
    ]
    return {
        "name": name,
        "exit": proc.returncode,
        "families": {f: fams.get(f, {}).get("verdict", "?") for f in ("inputs", "behaviour", "performance")},
        "comparison": fams.get("behaviour", {}).get("comparison"),
        "fired": fired,
        "n": (len(base), len(cur)),
        "baseline": baseline,
    }


def evidently_job(name: str, old: Model, base: list[str], new: Model, cur: list[str]) -> dict[str, Any]:
    cols = sorted(set().union(*(old.features[p].keys() for p in base), *(new.features[p].keys() for p in cur)))
    row = lambda feats: {c: feats.get(c) for c in cols}  # noqa: E731
    return {
        "name": name,
        "reference": [row(old.features[p]) for p in base],
        "current": [row(new.features[p]) for p in cur],
    }


def run_evidently(python: str | None, jobs: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, Any]]]:
    if not python or not jobs:
        return "not run", {}
    proc = subprocess.run(
        [python, str(HERE / "evidently_drift.py")],
        input=json.dumps({"jobs": jobs}),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        print(f"Evidently failed (exit {proc.returncode}): {proc.stderr[-1500:]}", file=sys.stderr)
        return "failed", {}
    out = json.loads(proc.stdout)
    return out["version"], {r["name"]: r for r in out["results"]}


def ev_text(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    return f"{'DRIFT' if r['dataset_drift'] else 'no drift'} ({r['drifted']}/{r['columns']} cols: {', '.join(r['drifted_columns']) or '-'})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, nargs="?", help="JSONL outputs (bench/drift_real.py's format)")
    ap.add_argument("--alpaca-eval", type=Path, help="AlpacaEval results/ folder (or a folder of <model>.json)")
    ap.add_argument(
        "--aa", default=",".join(AA_MODELS), help="models for the A/A and mix-shift scenarios (comma-separated)"
    )
    ap.add_argument(
        "--pair",
        action="append",
        help=f"OLD:NEW on the same prompts (repeatable; default {len(PAIRS)} AlpacaEval pairs)",
    )
    ap.add_argument("--splits", type=int, default=20, help="random A/A splits per model")
    ap.add_argument("--needed", default="50,100,200,400", help="current-window sizes for samples needed ('' to skip)")
    ap.add_argument("--needed-repeats", type=int, default=5)
    ap.add_argument("--mix", type=float, default=0.8, help="share of the window's own prompt group in the mix shift")
    ap.add_argument(
        "--category",
        choices=("none", "source"),
        default="none",
        help="tag samples with their prompt source as category",
    )
    ap.add_argument(
        "--embeddings", action="store_true", help="score with the embedding checks (slow on a small machine)"
    )
    ap.add_argument("--llmwatch", help="the llmwatch command (default: this Python's `-m llmwatch.agent.cli`)")
    ap.add_argument("--evidently-python", default=str(HERE.parent / ".bench/evidently-venv/bin/python"))
    ap.add_argument("--work", type=Path, help="keep converted files here (default: a temporary folder, removed)")
    ap.add_argument(
        "--reuse-scores",
        action="store_true",
        help="keep scores already in --work for unchanged samples (scored by whichever llmwatch wrote them)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per llmwatch command")
    args = ap.parse_args(argv)
    if (args.directory is None) == (args.alpaca_eval is None):
        ap.error("give either a directory of JSONL outputs or --alpaca-eval DIR")
    pairs = args.pair if args.pair is not None else list(PAIRS)
    aa_models = [m for m in args.aa.split(",") if m]
    wanted = set(aa_models) | {m for spec in pairs for m in spec.split(":")}
    records = load_alpaca_eval(args.alpaca_eval, wanted) if args.alpaca_eval else load(args.directory, wanted)
    by_model: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        by_model[r["model"]].append(r)
    missing = sorted(wanted - set(by_model))
    if missing:
        raise SystemExit(f"no outputs for {', '.join(missing)}")
    command = args.llmwatch.split() if args.llmwatch else [sys.executable, "-m", "llmwatch.agent.cli"]
    cli = Cli(command, args.embeddings, args.timeout)
    evidently_python = args.evidently_python if Path(args.evidently_python).exists() else None
    work = args.work or Path(tempfile.mkdtemp(prefix="llmwatch-realdata-"))
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    try:
        version = cli("--version").stdout.strip()
        models = {m: Model(m, by_model[m], work, cli, args.category, args.reuse_scores) for m in sorted(wanted)}
        rows: list[dict[str, Any]] = []
        jobs: list[dict[str, Any]] = []

        # Mix shift: disjoint prompts, each window mostly one group of prompt sources.
        for m in aa_models:
            model = models[m]
            g1 = [p for p in model.prompts() if model.source[p] in GROUP_1]
            g2 = [p for p in model.prompts() if model.source[p] in GROUP_2]
            rng.shuffle(g1)
            rng.shuffle(g2)
            # base = k_main of group 1 + k_other of group 2, current the other way round: each group
            # gives k_main + k_other prompts, so the smaller group bounds the window.
            n = min(len(g1), len(g2))
            k_main = int(n * args.mix)
            k_other = n - k_main
            base = g1[:k_main] + g2[:k_other]
            cur = g2[k_other : k_other + k_main] + g1[k_main : k_main + k_other]
            name = f"mix-{m}"
            r = run_case(cli, work, name, model, base, model, cur)
            r.update(scenario="mix shift", models=m, ok=r["exit"] != 1 and r["families"]["inputs"] == "shifted")
            rows.append(r)
            jobs.append(evidently_job(name, model, base, model, cur))

        # Version pairs on the same prompts, then samples needed on subsampled current windows.
        needed_sizes = [int(x) for x in args.needed.split(",") if x]
        needed: dict[str, str] = {}
        for spec in pairs:
            old, _, new = spec.partition(":")
            common = [p for p in models[old].prompts() if p in models[new].lines]
            name = f"pair-{old}-{new}"
            r = run_case(cli, work, name, models[old], common, models[new], common)
            r.update(scenario="version pair", models=f"{old} -> {new}", ok=r["exit"] == 1)
            rows.append(r)
            jobs.append(evidently_job(name, models[old], common, models[new], common))
            hits_by_n = {}
            for n in needed_sizes:
                if n >= len(common):
                    break
                hits = 0
                for j in range(args.needed_repeats):
                    sub = [str(x) for x in rng.choice(common, n, replace=False)]
                    sub_name = f"{name}-n{n}-{j}"
                    hits += (
                        run_case(cli, work, sub_name, models[old], common, models[new], sub, baseline=r["baseline"])[
                            "exit"
                        ]
                        == 1
                    )
                    jobs.append(evidently_job(sub_name, models[old], common, models[new], sub))
                hits_by_n[n] = hits
            needed[name] = next(
                (str(n) for n, h in hits_by_n.items() if h >= 0.8 * args.needed_repeats),
                f">{max(hits_by_n)}" if hits_by_n else "not run",
            )
            r["hits_by_n"] = hits_by_n

        # A/A: random halves of one model's prompts.
        aa: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for m in aa_models:
            model = models[m]
            for j in range(args.splits):
                mask = rng.random(len(model.prompts())) < 0.5
                base = [p for p, b in zip(model.prompts(), mask) if b]
                cur = [p for p, b in zip(model.prompts(), mask) if not b]
                name = f"aa-{m}-{j}"
                aa[m].append(run_case(cli, work, name, model, base, model, cur))
                jobs.append(evidently_job(name, model, base, model, cur))

        ev_version, ev = run_evidently(evidently_python, jobs)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)

    all_ok = True
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"## {stamp}: {version} ({' '.join(command)}), embeddings {'on' if args.embeddings else 'off'}, category {args.category}, "
        f"seed {args.seed}; Evidently {ev_version}; {cli.calls} CLI calls, {time.monotonic() - started:.0f} s\n"
    )
    print(
        "| scenario | model(s) | exit | inputs / behaviour / performance | behaviour compared on | llmwatch signals that fired | n base/cur | check | Evidently DataDriftPreset |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        all_ok &= r["ok"]
        extra = (
            f"; needed {needed.get(r['name'], '-')} (exit-1 hits/{args.needed_repeats} by n: {r.get('hits_by_n')})"
            if r.get("hits_by_n")
            else ""
        )
        ev_extra = ""
        if r.get("hits_by_n") and ev:
            ev_hits = {
                n: sum(
                    ev.get(f"{r['name']}-n{n}-{j}", {}).get("dataset_drift", False) for j in range(args.needed_repeats)
                )
                for n in r.get("hits_by_n", {})
            }
            ev_need = next(
                (str(n) for n, h in ev_hits.items() if h >= 0.8 * args.needed_repeats),
                ">" + str(max(ev_hits)) if ev_hits else "-",
            )
            ev_extra = f"; needed {ev_need} ({ev_hits})"
        print(
            f"| {r['scenario']} | {r['models']} | {r['exit']} | {' / '.join(r['families'].values())} | {r['comparison']} | {', '.join(r['fired']) or '-'} | "
            f"{r['n'][0]}/{r['n'][1]} | {'ok' if r['ok'] else 'FAIL'}{extra} | {ev_text(ev.get(r['name']))}{ev_extra} |"
        )
    for m, results in aa.items():
        exits = collections.Counter(r["exit"] for r in results)
        fired = collections.Counter(f for r in results if r["exit"] == 1 for f in r["fired"])
        ok = exits[0] == len(results)
        all_ok &= ok
        ev_alarms = sum(ev.get(r["name"], {}).get("dataset_drift", False) for r in results)
        ev_any = sum(bool(ev.get(r["name"], {}).get("drifted")) for r in results)
        print(
            f"| A/A ({len(results)} random halves) | {m} | exit 0: {exits[0]}, 1: {exits[1]}, 2: {exits[2]} | "
            f"inputs shifted in {sum(r['families']['inputs'] == 'shifted' for r in results)} | - | {dict(fired) or '-'} | ~{results[0]['n'][0]}/{results[0]['n'][1]} | "
            f"{'ok' if ok else 'FAIL'}: false alarms {exits[1]}/{len(results)} | "
            + (
                f"dataset drift {ev_alarms}/{len(results)}, any column drifted {ev_any}/{len(results)} |"
                if ev
                else "- |"
            )
        )
    print(f"\nacceptance: {'all checks held' if all_ok else 'some checks FAILED'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
