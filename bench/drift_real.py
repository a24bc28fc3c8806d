"""Drift families on real per-model outputs: A/A false alarms, version pairs, a pure mix shift, samples needed.

Input: a directory of JSON Lines files (any names, `*.jsonl`), one record per (prompt, model):

    {"prompt_id": "q-0017", "prompt": "How do I ...?", "model": "vendor-model-2024-05",
     "output": "You can ...", "source": "helpful_base", "category": "how-to"}

`prompt_id`, `prompt`, `model` and `output` are required; `source` (where the prompt came from,
used for the mix-shift scenario) and `category` (the stratum; defaults to `source`, then
"uncategorized") are optional, as are `output_tokens`, `input_tokens`, `latency_ms` and `ttft_ms`
when the export has them (tokens otherwise estimated as characters / 4; performance is judged
only when latencies are given). Every model should answer the same prompt set.

AlpacaEval outputs are read directly (no conversion step): one `model_outputs.json` per model,
a list of {instruction, output, generator, dataset} records on the same 805 prompts (instruction ->
prompt, the model's folder or file name -> model, dataset -> source, a hash of the instruction ->
prompt_id). Either the
repository's `results/` folder (`results/<model>/model_outputs.json`) or a folder of
`<model>.json` files; `--models` keeps only the named ones (scoring all 200+ takes long):

    git clone https://github.com/tatsu-lab/alpaca_eval
    python bench/drift_real.py --alpaca-eval alpaca_eval/results --models gpt4_0613,gpt4_0613_verbose \
        --pair gpt4_0613:gpt4_0613_verbose

A directory given positionally is read the same way when it holds no `*.jsonl` but such `.json`
lists. (The AlpacaEval data is Apache-2.0; it is read from where you cloned it, never copied here.)

Scenarios, each through the same `compare` as `llmwatch drift` (exit code semantics: 1 = a
behaviour or performance family drifts):

* A/A: for each model, `--splits` random halves of its prompts (baseline half vs current half);
  the share of splits with exit 1 is the false-alarm rate (target: at most alpha).
* version pairs (`--pair OLD:NEW`, repeatable): OLD on every prompt as baseline, NEW on the same
  prompts as current (matched prompts); detected or not, and which signals.
* mix shift: for each model, the prompts of two `source` groups; baseline mostly group 1, current
  mostly group 2. Behaviour should stay quiet (exit 0 or 2) while `inputs` reads `shifted`.
* samples needed (`--pair`): the smallest current window (subsampled) detected in 80 % of repeats.

Checks are the default rule checks (no embedding model is loaded unless `--embeddings`).
The comparison with Evidently's data-drift preset is in `bench/drift_real_cli.py` (Evidently in
its own venv, `.bench/evidently-venv`, not a dependency of llmwatch).

    python bench/drift_real.py outputs/ --splits 100 --pair vendor-2024-05:vendor-2024-08

`bench/drift_real_cli.py` runs the same scenarios through the real `llmwatch` command line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import sys
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from llmwatch.core.records import Sample, Usage
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.suite import build_suite
from llmwatch.scorers.drift.compare import DriftSettings, compare
from llmwatch.scorers.drift.features import summarize

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path | None:
    """`../shared` beside the repository (where CI puts it), or beside the main checkout when this
    is a git worktree (its `.git` file names the main checkout's `.git/worktrees/<name>`); None if absent."""
    candidates = [ROOT.parent / "shared"]
    git = ROOT / ".git"
    if git.is_file():
        text = git.read_text().strip()
        if text.startswith("gitdir:"):
            common = Path(text.split(":", 1)[1].strip()).resolve().parents[1]  # <main>/.git
            candidates.append(common.parent.parent / "shared")
    return next((c for c in candidates if (c / "real-outputs").is_dir()), None)


REQUIRED = ("prompt_id", "prompt", "model", "output")


def load(directory: Path, models: set[str] | None = None) -> list[dict[str, Any]]:
    """Records of the JSONL format above, or of AlpacaEval files when the directory holds those."""
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        if alpaca_eval_files(directory):
            return load_alpaca_eval(directory, models)
        raise SystemExit(
            f"{directory}: no *.jsonl files and no AlpacaEval model_outputs (see the formats in bench/drift_real.py)"
        )
    records = []
    for path in files:
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{number}: not JSON ({exc})") from None
            missing = [k for k in REQUIRED if not isinstance(rec.get(k), str)]
            if missing:
                raise SystemExit(
                    f"{path}:{number}: field(s) {', '.join(missing)} missing or not text; each line needs prompt_id, prompt, model, output"
                )
            if models is None or rec["model"] in models:
                records.append(rec)
    return records


def alpaca_eval_files(directory: Path) -> dict[str, Path]:
    """Model name (folder or file stem) -> its outputs file: `results/<model>/model_outputs.json`, or `<model>.json`."""
    found = {p.parent.name: p for p in sorted(directory.glob("*/model_outputs.json"))}
    for p in sorted(directory.glob("*.json")):
        found.setdefault(p.stem, p)
    # The shared copy (../shared/real-outputs): `<model>.model_outputs.json.gz`, byte for byte gzipped.
    for p in sorted(directory.glob("*.json.gz")):
        found.setdefault(p.name.removesuffix(".json.gz").removesuffix(".model_outputs"), p)
    return found


def prompt_id(instruction: str) -> str:
    # The same instruction is the same prompt in every model's file (the files are not all in one order).
    return "ae-" + hashlib.sha256(instruction.encode()).hexdigest()[:12]


def load_alpaca_eval(directory: Path, models: set[str] | None = None) -> list[dict[str, Any]]:
    files = alpaca_eval_files(directory)
    if models is not None:
        unknown = sorted(models - set(files))
        if unknown:
            raise SystemExit(
                f"{directory}: no outputs for {', '.join(unknown)} (expected <model>/model_outputs.json or <model>.json)"
            )
        files = {m: p for m, p in files.items() if m in models}
    records = []
    for name, path in files.items():
        try:
            raw = path.read_bytes()
            data = orjson.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        except orjson.JSONDecodeError as exc:
            raise SystemExit(f"{path}: not JSON ({exc})") from None
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            if models is None:
                continue  # another JSON file in the folder (a leaderboard, annotations): not outputs
            raise SystemExit(
                f"{path}: not a list of records; AlpacaEval model_outputs.json is [{{instruction, output, generator, dataset}}, ...]"
            )
        for number, r in enumerate(data):
            if not (isinstance(r.get("instruction"), str) and isinstance(r.get("output"), str)):
                if models is None and number == 0:
                    break  # not a model_outputs file
                raise SystemExit(
                    f"{path}: record {number}: fields instruction and output must be text (an AlpacaEval model_outputs.json record)"
                )
            records.append(
                {
                    "prompt_id": prompt_id(r["instruction"]),
                    "prompt": r["instruction"],
                    "output": r["output"],
                    # The folder/file name, not `generator`: a few files name the generator differently.
                    "model": name,
                    "generator": r.get("generator"),
                    "source": r.get("dataset"),
                }
            )
    if not records:
        raise SystemExit(f"{directory}: no AlpacaEval model outputs found")
    return records


def to_sample(rec: dict[str, Any], i: int) -> Sample:
    out_tokens = rec.get("output_tokens") or max(1, len(rec["output"]) // 4)
    in_tokens = rec.get("input_tokens") or max(1, len(rec["prompt"]) // 4)
    category = rec.get("category") or rec.get("source") or "uncategorized"
    sid = hashlib.sha256(f"{rec['model']}\x00{rec['prompt_id']}".encode()).hexdigest()[:24]
    latency = rec.get("latency_ms")
    return Sample(
        id=sid,
        timestamp=T0 + timedelta(seconds=i),
        model=rec["model"],
        model_version=rec["model"],
        status=200,
        latency_ms=float(latency) if latency is not None else 0.0,
        ttft_ms=rec.get("ttft_ms"),
        usage=Usage(input_tokens=int(in_tokens), output_tokens=int(out_tokens)),
        finish_reason="stop",
        request={"model": rec["model"], "messages": [{"role": "user", "content": rec["prompt"]}]},
        response={"choices": [{"message": {"role": "assistant", "content": rec["output"]}, "finish_reason": "stop"}]},
        metadata={"category": str(category), "prompt_id": rec["prompt_id"], "source": rec.get("source")},
    )


class World:
    def __init__(self, records: list[dict[str, Any]], embeddings: bool) -> None:
        self.samples = [to_sample(r, i) for i, r in enumerate(records)]
        self.has_latency = all(r.get("latency_ms") is not None for r in records)
        suite = build_suite(ScoringSection(embeddings=embeddings))
        self.scores = defaultdict(list)
        for result in suite.score(self.samples):
            self.scores[result.score.sample_id].append(result.score)
        self.by_model: dict[str, list[Sample]] = defaultdict(list)
        for s in self.samples:
            self.by_model[s.model or "?"].append(s)

    def report(self, base: list[Sample], cur: list[Sample], settings: DriftSettings):
        fams = ("behaviour", "performance") if self.has_latency else ("behaviour",)
        settings = DriftSettings(**{**settings.__dict__, "fail_on": fams})
        summary = lambda items: summarize(items, [sc for s in items for sc in self.scores[s.id]], None)  # noqa: E731
        return compare(
            summary(base), summary(cur), baseline_version="base", current_versions=["cur"], settings=settings
        )


def aa(world: World, splits: int, settings: DriftSettings, rng: np.random.Generator) -> list[str]:
    rows = []
    for model, items in sorted(world.by_model.items()):
        alarms = 0
        for _ in range(splits):
            mask = rng.random(len(items)) < 0.5
            r = world.report([s for s, m in zip(items, mask) if m], [s for s, m in zip(items, mask) if not m], settings)
            alarms += r.exit_code == 1
        rows.append(f"| A/A {model} | {splits} splits | false alarms {alarms}/{splits} = {alarms / splits:.1%} |")
    return rows


def pairs(world: World, specs: list[str], settings: DriftSettings, rng: np.random.Generator) -> list[str]:
    rows = []
    for spec in specs:
        old, _, new = spec.partition(":")
        if old not in world.by_model or new not in world.by_model:
            raise SystemExit(f"--pair {spec}: models present are {', '.join(sorted(world.by_model))}")
        r = world.report(world.by_model[old], world.by_model[new], settings)
        drifted = (
            ", ".join(f"{s.name}{' in ' + s.stratum if s.stratum else ''}" for s in r.signals if s.verdict == "drift")
            or "-"
        )
        needed = "-"
        for n in (50, 100, 200, 400, 800):
            if n > len(world.by_model[new]):
                break
            hits = sum(
                world.report(
                    world.by_model[old], list(rng.choice(world.by_model[new], n, replace=False)), settings
                ).exit_code
                == 1
                for _ in range(10)
            )
            if hits >= 8:
                needed = str(n)
                break
        rows.append(
            f"| {old} -> {new} | exit {r.exit_code}, behaviour {r.families['behaviour']['verdict']} ({r.families['behaviour'].get('comparison')}) | {drifted} | samples needed (80 % of 10) {needed} |"
        )
    return rows


def mix_shift(world: World, settings: DriftSettings, rng: np.random.Generator) -> list[str]:
    rows = []
    for model, items in sorted(world.by_model.items()):
        groups: dict[str, list[Sample]] = defaultdict(list)
        for s in items:
            groups[str(s.metadata.get("source"))].append(s)
        if len(groups) < 2:
            rows.append(f"| mix shift {model} | not run: needs `source` with two values |")
            continue
        g1, g2 = sorted(groups.values(), key=len, reverse=True)[:2]
        rng.shuffle(g1)
        rng.shuffle(g2)
        n = min(len(g1), len(g2)) // 2
        base = g1[: int(n * 0.8)] + g2[: int(n * 0.2)]
        cur = g1[int(n * 0.8) : int(n * 0.8) + int(n * 0.2)] + g2[int(n * 0.2) : int(n * 0.2) + int(n * 0.8)]
        r = world.report(base, cur, settings)
        rows.append(
            f"| mix shift {model} | exit {r.exit_code}, inputs {r.families['inputs']['verdict']}, behaviour {r.families['behaviour']['verdict']} | "
            + (", ".join(s.name for s in r.signals if s.verdict in ("drift", "shifted")) or "-")
            + " |"
        )
    return rows


def evidently_note() -> str:
    return "Evidently data-drift preset: see bench/drift_real_cli.py (runs it on the same windows from its own venv)."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, nargs="?", help="JSONL outputs (format above), or AlpacaEval files")
    ap.add_argument("--alpaca-eval", type=Path, help="AlpacaEval results/ folder (or a folder of <model>.json)")
    ap.add_argument("--models", help="comma-separated model names to load (default: every model found)")
    ap.add_argument("--splits", type=int, default=100)
    ap.add_argument("--pair", action="append", default=[], help="OLD:NEW model names, the same prompts")
    ap.add_argument("--embeddings", action="store_true", help="score with the embedding checks (loads the model)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if (args.directory is None) == (args.alpaca_eval is None):
        ap.error("give either a directory of JSONL outputs or --alpaca-eval DIR")
    models = set(args.models.split(",")) if args.models else None
    if models is not None:
        models |= {m for spec in args.pair for m in spec.split(":")}
    records = load_alpaca_eval(args.alpaca_eval, models) if args.alpaca_eval else load(args.directory, models)
    world = World(records, args.embeddings)
    settings = DriftSettings()
    rng = np.random.default_rng(args.seed)
    print(
        f"{len(world.samples)} outputs of {len(world.by_model)} models; performance {'judged' if world.has_latency else 'not judged (no latencies)'}"
    )
    print("| scenario | result | signals | |\n|---|---|---|---|")
    for row in (
        aa(world, args.splits, settings, rng) + mix_shift(world, settings, rng) + pairs(world, args.pair, settings, rng)
    ):
        print(row)
    print(evidently_note())
    return 0


if __name__ == "__main__":
    sys.exit(main())
