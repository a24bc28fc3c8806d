"""`llmwatch suite build|add|show` on samples the real proxy captured from the simulator, scored by
the sidecar's own scorer process (rule checks), and read back from the files it wrote."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from pathlib import Path

import openai
import orjson
import pytest

from llmwatch.agent.apps.simulator.server import PROFILES, SimProfile, start_simulator
from llmwatch.agent.cli.main import main
from llmwatch.agent.components import load_config
from llmwatch.agent.runtime import Agent
from llmwatch.core.jsonio import read_records
from llmwatch.core.scores import Score
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.matrix import build_categories
from llmwatch.scorers.evaluation.regress import load_suite
from llmwatch.scorers.evaluation.suite_build import gather, manifest_path, normalise, placeholder_share

SIZE = 24
FAILURE_QUOTA = 0.25
# Largest-remainder apportionment is off by at most one case per category (1/SIZE), and a
# category short of candidates hands seats on: two cases' worth is the stated tolerance.
MIX_TOLERANCE = 2 / SIZE

RECIPES = [
    "pasta dinner with garlic",
    "vegetable soup",
    "chocolate cake",
    "banana bread",
    "chicken curry",
    "pancakes for breakfast",
    "lentil stew",
    "tomato salad",
    "apple pie",
    "fried rice",
    "roast potatoes",
    "mushroom risotto",
    "fish tacos",
    "bean chili",
]
ERRORS = [
    ("KeyError", "Python"),
    ("TypeError", "JavaScript"),
    ("segfault", "C"),
    ("deadlock", "SQL"),
    ("IndexError", "Python"),
    ("NullPointerException", "Java"),
    ("import error", "Python"),
    ("race condition", "Go"),
]
MESSAGES = [
    "my bread dough never rises in the oven",
    "the train to Paris was cancelled twice",
    "my laptop battery drains overnight",
    "our team missed the sprint deadline",
    "the hotel lost our reservation",
    "my tomato plants have yellow leaves",
]
TRIPS = ["a weekend in Rome", "a week in Japan", "three days in Lisbon", "a cycling trip in the Alps"]


def traffic() -> list[dict]:
    """Requests (chat bodies plus an optional `fault`) for every category of the default matrix."""
    reqs: list[dict] = []
    for i, dish in enumerate(RECIPES):
        # Each recipe asked twice (another case and a "please"): near-duplicates that must collapse.
        reqs.append({"messages": [{"role": "user", "content": f"Give me a simple recipe for a {dish}."}]})
        reqs.append({"messages": [{"role": "user", "content": f"give me a simple recipe for a {dish} please"}]})
        if i % 4 == 0:  # truncated answers: known failures
            reqs.append(
                {
                    "messages": [
                        {
                            "role": "user",
                            "content": f"Write a long shopping list and method for a {dish} for {i + 2} guests.",
                        }
                    ],
                    "max_tokens": 3,
                }
            )
    for err, lang in ERRORS:
        reqs.append({"messages": [{"role": "user", "content": f"How do I fix a {err} in my {lang} code?"}]})
        reqs.append({"messages": [{"role": "user", "content": f"How do I fix a {err} in my {lang} code???"}]})
    reqs.append(
        {"messages": [{"role": "user", "content": "How do I fix a KeyError in my Python code?"}], "fault": "status=503"}
    )
    reqs.append(
        {"messages": [{"role": "user", "content": "Why does my Python function return None?"}], "fault": "status=500"}
    )
    for text in MESSAGES:
        reqs.append(
            {
                "messages": [{"role": "user", "content": f"Classify this message by topic: {text}"}],
                "response_format": {"type": "json_object"},
            }
        )
    for trip in TRIPS:
        reqs.append(
            {
                "messages": [
                    {"role": "user", "content": f"I want to plan {trip}"},
                    {"role": "assistant", "content": "Sure, when do you go?"},
                    {"role": "user", "content": "Next month, what should I book first?"},
                ]
            }
        )
    # Edges: a model a small share of traffic uses, and prompts in other scripts.
    for dish in ("a cheese omelette", "a plum cake"):
        reqs.append(
            {"model": "sim-gpt-4o", "messages": [{"role": "user", "content": f"How do I cook {dish} for two?"}]}
        )
    for text in ("Как испечь домашний хлеб без дрожжей?", "パンを焼くのに何分かかりますか？教えてください。"):
        reqs.append({"messages": [{"role": "user", "content": text}]})
    # Prompts that are mostly personal data: after redaction only placeholders are left.
    for who in (
        "jane.doe@mailbox.org +44 20 7946 0958",
        "sam.lee@postbox.net 4111 1111 1111 1111",
        "kim@inbox.eu +1 415 555 0132",
        "mail ola.berg@postbox.net or call +44 20 7946 0123",
    ):
        reqs.append({"messages": [{"role": "user", "content": who}]})
    return reqs


async def capture(data_dir: Path, profile: SimProfile, reqs: list[dict]) -> None:
    sim = await start_simulator("127.0.0.1", 0, profile, seed=3)
    overrides = {
        "upstream": sim.url,
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "data_dir": str(data_dir),
        "sampling": {"rate": 1.0},
        "scoring": {"enabled": True, "embeddings": False},
    }
    agent = Agent(load_config(None, overrides=overrides, environ={}))
    await agent.start()
    try:
        client = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{agent.proxy_port}/v1", api_key="sk-test", max_retries=0
        )
        for body in reqs:
            body = dict(body)
            fault = body.pop("fault", None)
            try:
                body.setdefault("model", "sim-gpt-4o-mini")
                await client.chat.completions.create(
                    extra_headers={"x-llmwatch-sim-fault": fault} if fault else None, **body
                )
            except openai.APIStatusError:
                pass
        deadline = asyncio.get_running_loop().time() + 60
        while agent.pipeline.processed < len(reqs) or agent.recorder.recorded < len(reqs):
            assert asyncio.get_running_loop().time() < deadline, (
                "the sidecar did not capture and score every request in time"
            )
            await asyncio.sleep(0.05)
        await client.close()
    finally:
        await agent.stop()
        await sim.close()


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("suite") / "data"
    asyncio.run(capture(data, SimProfile(latency_scale=0.0, refusal_rate=0.0, truncation_rate=0.0), traffic()))
    return data


def build(samples: Path, scores: Path, out: Path, *options: str) -> int:
    """`llmwatch suite build --samples SAMPLES --scores SCORES --out OUT OPTIONS`, in process: its exit code."""
    return main(["suite", "build", "--samples", str(samples), "--scores", str(scores), "--out", str(out), *options])


def add(suite: Path, samples: Path, scores: Path, *options: str) -> int:
    """`llmwatch suite add --suite SUITE --samples SAMPLES --scores SCORES OPTIONS`, in process: its exit code."""
    return main(["suite", "add", "--suite", str(suite), "--samples", str(samples), "--scores", str(scores), *options])


@pytest.fixture(scope="module")
def built(captured: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / "suite.jsonl"
    code = build(
        captured / "samples",
        captured / "scores",
        out,
        *("--size", str(SIZE), "--failure-quota", str(FAILURE_QUOTA), "--edge-quota", "0.1", "--seed", "5"),
        *("--similarity", "text"),
    )
    assert code == 0
    return out


def test_the_suite_is_what_regress_reads_and_its_category_mix_follows_live_traffic(built: Path, captured: Path):
    suite = load_suite(built)
    manifest = orjson.loads(manifest_path(built).read_bytes())
    assert len(suite.cases) == SIZE
    assert manifest["checksum"] == suite.checksum and manifest["version"] == 1
    samples = list(read_records(captured / "samples"))
    live = manifest["category_mix"]
    assert set(live) == {"instruction_following", "code", "extraction", "multi_turn_dialogue"}
    mix = Counter(c.category for c in suite.cases)
    for category, shares in live.items():
        assert abs(mix[category] / SIZE - shares["traffic"]) <= MIX_TOLERANCE, (category, mix, live)
    # The traffic share is of the usable samples (the placeholder-only ones are out).
    assert manifest["counts"]["samples"] == len(samples)


def test_known_failures_fill_their_quota_and_carry_their_failure_mode(built: Path):
    manifest = orjson.loads(manifest_path(built).read_bytes())
    failures = {cid: e for cid, e in manifest["cases"].items() if e["source"] == "failure"}
    assert len(failures) == round(SIZE * FAILURE_QUOTA)
    modes = Counter(m for e in failures.values() for m in e["failure_modes"])
    assert modes["truncated"] >= 1 and modes["errored"] >= 1
    assert all(e["failure_modes"] for e in failures.values())


def test_near_duplicate_prompts_collapse_into_one_case_that_lists_every_sample(built: Path, captured: Path):
    suite = load_suite(built)
    manifest = orjson.loads(manifest_path(built).read_bytes())
    prompts = [
        normalise(c.input if isinstance(c.input, str) else " ".join(m.content for m in c.input)) for c in suite.cases
    ]
    # "Give me a simple recipe for a X." and "give me a simple recipe for a X please" never both.
    stems = [p.removesuffix(" please") for p in prompts]
    assert len(stems) == len(set(stems))
    assert manifest["counts"]["near_duplicates_collapsed"] >= len(RECIPES) + len(ERRORS)
    recipes = [c.id for c, p in zip(suite.cases, prompts) if p.startswith("give me a simple recipe for")]
    assert recipes
    for cid in recipes:  # each asked twice: one case, both samples listed
        entry = manifest["cases"][cid]
        assert len(entry["sample_ids"]) == 2 and entry["model_versions"] == ["A"]
        assert entry["first_seen"] < entry["last_seen"]


def test_edge_cases_fill_their_quota_and_say_what_makes_them_unusual(built: Path, captured: Path):
    manifest = orjson.loads(manifest_path(built).read_bytes())
    edges = [e for e in manifest["cases"].values() if e["source"] == "edge"]
    assert len(edges) == round(SIZE * 0.1)
    assert all(e["edge_reasons"] and not e["failure_modes"] for e in edges)
    # What is recognised as an edge, on the captured samples themselves.
    material = gather(
        read_records(captured / "samples"),
        read_records(captured / "scores", Score, prefix="scores"),
        build_categories(MatrixSection()),
    )
    reasons = {c.text: c.edge_reasons for c in material.candidates}
    assert "other_language" in reasons["Как испечь домашний хлеб без дрожжей?"]
    assert "other_language" in reasons["パンを焼くのに何分かかりますか？教えてください。"]
    assert "rare_model" in reasons["How do I cook a plum cake for two?"]
    assert not any("rare_model" in r for t, r in reasons.items() if t.startswith("Give me a simple recipe"))


def test_no_case_is_made_of_placeholders_and_the_left_out_prompts_are_counted(built: Path, captured: Path):
    suite = load_suite(built)
    raw = [s for s in read_records(captured / "samples") if "[EMAIL]" in s.prompt_text()]
    assert len(raw) == 4, "the sidecar redacted the personal data before it was stored"
    manifest = orjson.loads(manifest_path(built).read_bytes())
    assert manifest["counts"]["placeholder_only"] == 4
    for case in suite.cases:
        text = case.input if isinstance(case.input, str) else " ".join(str(m.content) for m in case.input)
        assert placeholder_share(text) <= 0.5
        assert "@" not in text


def test_mostly_placeholders_means_by_words_or_by_characters():
    assert placeholder_share("mail [EMAIL] or call [PHONE]") > 0.5
    assert placeholder_share("[EMAIL] [PHONE] thanks") > 0.5
    assert placeholder_share("Please email [EMAIL] about the refund for order 5") < 0.5
    assert placeholder_share("Give me a simple recipe for a pasta dinner.") == 0.0


def test_cases_carry_the_checks_that_applied_a_reference_when_one_passed_and_a_rubric(built: Path):
    suite = load_suite(built)
    by_id = {c.id: c for c in suite.cases}
    extraction = [c for c in suite.cases if c.category == "extraction"]
    assert extraction and all({"json_valid", "refusal"} <= {k.name for k in c.checks} for c in extraction)
    assert all(c.params.get("response_format") == {"type": "json_object"} for c in extraction)
    assert all(c.rubric for c in suite.cases)
    passing = [c for c in suite.cases if c.reference]
    assert passing, "typical cases that passed every check carry that answer as the reference"
    manifest = orjson.loads(manifest_path(built).read_bytes())
    for cid, entry in manifest["cases"].items():
        if "errored" in entry["failure_modes"] and len(entry["sample_ids"]) == 1:
            assert by_id[cid].reference is None


def test_show_counts_by_category_failure_mode_and_source(built: Path, capsys):
    assert main(["suite", "show", str(built), "--format", "json"]) == 0
    info = orjson.loads(capsys.readouterr().out)
    assert info["cases"] == SIZE and sum(info["by_category"].values()) == SIZE
    assert info["by_source"]["failure"] == round(SIZE * FAILURE_QUOTA)
    assert info["by_failure_mode"]["truncated"] >= 1
    assert main(["suite", "show", str(built)]) == 0
    text = capsys.readouterr().out
    assert (
        "by category:" in text
        and "by failure mode:" in text
        and "left out when built: 4 mostly-placeholder prompts" in text
    )


def test_add_appends_new_failures_and_keeps_every_old_line_byte_identical(built: Path, tmp_path: Path, capsys):
    suite = tmp_path / "suite.jsonl"
    suite.write_bytes(built.read_bytes())
    manifest_path(suite).write_bytes(manifest_path(built).read_bytes())
    before = suite.read_bytes()
    old = load_suite(suite)
    # New production traffic: answers cut short on new prompts (known failures), and a prompt the suite has.
    data = tmp_path / "later"
    new = [
        {
            "messages": [{"role": "user", "content": f"Classify this message by topic: {t}"}],
            "response_format": {"type": "json_object"},
            "max_tokens": 3,
        }
        for t in ("my cat ignores the new food", "the printer jams on every page", "our flight to Oslo was overbooked")
    ]
    new += [{"messages": [{"role": "user", "content": "Give me a simple recipe for a pasta dinner with garlic."}]}]
    asyncio.run(capture(data, SimProfile(latency_scale=0.0, refusal_rate=0.0, truncation_rate=0.0), new))
    assert add(suite, data / "samples", data / "scores", "--failed-only", "--similarity", "text") == 0
    after = suite.read_bytes()
    assert after.startswith(before)
    grown = load_suite(suite)
    added = [c for c in grown.cases if c.id not in {o.id for o in old.cases}]
    assert len(added) == 3 and all(c.category == "extraction" for c in added)
    assert grown.checksum != old.checksum
    manifest = orjson.loads(manifest_path(suite).read_bytes())
    assert manifest["version"] == 2 and manifest["checksum"] == grown.checksum
    assert manifest["history"][-1]["added"] == [c.id for c in added]
    assert all("truncated" in manifest["cases"][c.id]["failure_modes"] for c in added)
    assert "added 3 case(s)" in capsys.readouterr().out
    # Nothing new the second time: the file is left as it is.
    assert add(suite, data / "samples", data / "scores", "--failed-only", "--similarity", "text") == 0
    assert suite.read_bytes() == after


def test_bad_options_and_missing_material_exit_2_with_a_message(built: Path, tmp_path: Path, captured: Path, capsys):
    code = build(
        captured / "samples",
        captured / "scores",
        tmp_path / "s.jsonl",
        *("--failure-quota", "0.8", "--edge-quota", "0.5", "--similarity", "text"),
    )
    assert code == 2 and "--failure-quota" in capsys.readouterr().err
    code = build(tmp_path / "nope", captured / "scores", tmp_path / "s.jsonl")
    assert code == 2 and "--samples" in capsys.readouterr().err
    code = build(captured / "samples", captured / "scores", tmp_path, "--similarity", "text")
    err = capsys.readouterr().err
    assert code == 2 and f"--out {tmp_path} is a directory" in err
    assert add(tmp_path / "none.jsonl", captured / "samples", captured / "scores") == 2


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory) -> Path:
    """The same prompts answered by version A, then by the regressed version B, in one data dir."""
    data = tmp_path_factory.mktemp("versions") / "data"
    reqs = [{"messages": [{"role": "user", "content": f"Give me a simple recipe for {r}."}]} for r in RECIPES[:8]]
    asyncio.run(capture(data, SimProfile(latency_scale=0.0, refusal_rate=0.0, truncation_rate=0.0), reqs))
    asyncio.run(capture(data, dataclasses.replace(PROFILES["B"], latency_scale=0.0), reqs))
    return data


def test_model_version_builds_the_suite_from_that_version_alone(two_versions: Path, tmp_path: Path):
    # A platform team freezes its suite from the version it trusts: cases, failure modes and
    # reference answers all come from version A's calls, even with B's in the same data dir.
    samples = list(read_records(two_versions / "samples"))
    assert {s.model_version for s in samples} == {"A", "B"}
    answers_a = {s.id: s for s in samples if s.model_version == "A"}
    out = tmp_path / "suite-a.jsonl"
    assert (
        build(two_versions / "samples", two_versions / "scores", out, "--model-version", "A", "--similarity", "text")
        == 0
    )
    manifest = orjson.loads(manifest_path(out).read_bytes())
    assert manifest["counts"]["samples"] == len(answers_a)
    for entry in manifest["cases"].values():
        assert entry["model_versions"] == ["A"] and set(entry["sample_ids"]) <= set(answers_a)
    # Without the option both versions are material (the default is unchanged).
    both = tmp_path / "suite-both.jsonl"
    assert build(two_versions / "samples", two_versions / "scores", both, "--similarity", "text") == 0
    manifest = orjson.loads(manifest_path(both).read_bytes())
    assert any("B" in entry["model_versions"] for entry in manifest["cases"].values())


def test_a_model_version_with_no_sample_is_refused_naming_the_versions_there(
    two_versions: Path, tmp_path: Path, capsys
):
    out = tmp_path / "suite.jsonl"
    code = build(
        two_versions / "samples", two_versions / "scores", out, "--model-version", "v2", "--similarity", "text"
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--model-version v2: no sample of that version" in err and "(versions there: A, B)" in err, err
    assert "Traceback" not in err
    assert not out.exists() and not manifest_path(out).exists()


def test_every_named_model_version_must_have_a_sample_not_only_one(two_versions: Path, tmp_path: Path, capsys):
    # `--model-version A --model-version typo` built A's suite, exit 0: the typo went unseen.
    out = tmp_path / "suite.jsonl"
    code = build(
        two_versions / "samples", two_versions / "scores", out,
        "--model-version", "A", "--model-version", "typo", "--similarity", "text",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--model-version typo: no sample of that version" in err and "(versions there: A, B)" in err, err
    assert "Traceback" not in err
    assert not out.exists() and not manifest_path(out).exists()


def test_bad_build_options_are_refused_before_any_sample_is_read(tmp_path: Path, capsys):
    # The samples do not exist: an option checked only after reading them would name them instead.
    for option, value in (("--size", "0"), ("--failure-quota", "1.5")):
        code = build(tmp_path / "nope", tmp_path / "nope", tmp_path / "s.jsonl", option, value)
        err = capsys.readouterr().err
        assert code == 2 and option in err and "nope" not in err, err
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.slow
def test_with_the_embeddings_extra_paraphrases_collapse_that_text_shingles_keep_apart():
    # Loads the packaged MiniLM (tens of seconds on a busy CPU): one small batch only.
    pytest.importorskip("sentence_transformers")
    from datetime import datetime, timezone

    from llmwatch.core.records import Sample

    def sample(i: int, text: str) -> Sample:
        return Sample(
            id=f"s{i}",
            timestamp=datetime(2026, 12, 1, tzinfo=timezone.utc),
            model="m",
            status=200,
            latency_ms=1.0,
            request={"model": "m", "messages": [{"role": "user", "content": text}]},
            response={"choices": [{"message": {"content": "ok"}}]},
        )

    prompts = [
        "How do I bake bread at home?",
        "How can I bake bread at home?",
        "Give me a simple recipe for banana bread.",
        "How do I fix a KeyError in my Python code?",
    ]
    samples = [sample(i, t) for i, t in enumerate(prompts)]
    categories = build_categories(MatrixSection())
    by_text = gather(samples, [], categories, similarity="text")
    by_meaning = gather(samples, [], categories, similarity="embeddings")
    assert len(by_text.candidates) == 4
    assert len(by_meaning.candidates) == 3 and by_meaning.n_duplicates == 1
    merged = next(c for c in by_meaning.candidates if len(c.samples) == 2)
    assert {s.id for s in merged.samples} == {"s0", "s1"}


# --- ids unique by construction; nothing written unless it validates ------------------------------


def numbered_variants(tmp_path: Path) -> tuple[Path, Path]:
    """Two code prompts that differ only by a number, as a new user's load test sent them.

    Their normalised texts (digits folded) are equal, so their case ids' hash part is too; the
    embeddings (cosine about 0.915, under the 0.92 threshold) keep them as two candidates.
    """
    from datetime import datetime, timedelta, timezone

    from llmwatch.core.records import Sample

    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    samples, scores = [], []
    for i, variant in enumerate((50, 15)):
        s = Sample(
            id=f"s{i}",
            timestamp=t0 + timedelta(seconds=i),
            model="m",
            model_version="A",
            status=200,
            latency_ms=1.0,
            finish_reason="stop",
            request={
                "model": "m",
                "messages": [
                    {"role": "user", "content": f"Write a Python function that reverses a string (variant {variant})"}
                ],
            },
            response={"choices": [{"message": {"content": "def rev(s): return s[::-1]"}, "finish_reason": "stop"}]},
        )
        samples.append(s)
        scores.append(
            Score(
                sample_id=s.id,
                check="not_empty_or_truncated",
                kind="not_empty_or_truncated",
                result="pass",
                value=1.0,
                model="m",
                model_version="A",
                sample_timestamp=s.timestamp,
            )
        )
    samples_path = tmp_path / "samples.jsonl"
    samples_path.write_bytes(b"".join(s.to_json() + b"\n" for s in samples))
    scores_path = tmp_path / "scores.jsonl"
    scores_path.write_bytes(b"".join(orjson.dumps(sc.model_dump(mode="json", by_alias=True)) + b"\n" for sc in scores))
    return samples_path, scores_path


@pytest.mark.slow
def test_prompts_that_differ_only_by_a_number_get_distinct_ids_and_a_suite_regress_reads(tmp_path: Path):
    pytest.importorskip("sentence_transformers")
    import subprocess
    import sys

    samples, scores = numbered_variants(tmp_path)
    out = tmp_path / "suite.jsonl"
    argv = ["suite", "build", "--samples", str(samples), "--scores", str(scores), "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", *argv, "--similarity", "embeddings", "--size", "10"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "already used" not in result.stderr
    ids = [c.id for c in load_suite(out).cases]  # what `regress` reads
    assert len(ids) == 2 and len(set(ids)) == 2
    # The first (in time) keeps the id built from the normalised prompt; the other is disambiguated.
    first = (
        "code-"
        + __import__("hashlib")
        .sha256(normalise("Write a Python function that reverses a string (variant 50)").encode())
        .hexdigest()[:12]
    )
    assert ids[0] == first or ids[1] == first
    manifest = orjson.loads(manifest_path(out).read_bytes())
    assert set(manifest["cases"]) == set(ids)
    assert {manifest["cases"][i]["sample_ids"][0] for i in ids} == {"s0", "s1"}


def test_a_suite_that_would_not_validate_is_refused_and_nothing_is_written(tmp_path: Path, monkeypatch, capsys):
    # Without the disambiguation the two candidates share an id: the build must refuse in memory,
    # with the validator `regress` uses, and leave neither the suite nor its manifest behind.
    from llmwatch.scorers.evaluation import suite_build

    samples, scores = numbered_variants(tmp_path)
    real_gather = suite_build.gather

    def colliding(*args, **kwargs):
        material = real_gather(*args, **kwargs)
        first = material.candidates[0]
        twin = suite_build.Candidate(**{**first.__dict__, "samples": list(first.samples), "scores": dict(first.scores)})
        material.candidates.append(twin)
        return material

    monkeypatch.setattr(suite_build, "gather", colliding)
    out = tmp_path / "suite.jsonl"
    code = build(samples, scores, out, "--similarity", "text", "--size", "10")
    err = capsys.readouterr().err
    assert code == 2
    assert "would not be valid, so nothing was written" in err and "already used on line" in err
    assert not out.exists() and not manifest_path(out).exists()
