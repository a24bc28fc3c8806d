"""`llmwatch drift` on traffic of more than one route, as real traffic is: the HTML report draws
every family, and the text, JSON and HTML outputs of one run quote the same number of tests.

Real files and the real command (`main`), no browser: tests/e2e/test_html_reports.py opens the
pages in Chromium.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from helpers.samples import write_jsonl
from synthetic import Behaviour, window  # noqa: E402

from llmwatch.agent.cli.main import main  # noqa: E402

pytest.importorskip("matplotlib")

ROUTES = ("/v1/chat/completions", "/v1/responses")
TOPICS = (
    ("invoice", "refund", "billing", "payment"),
    ("password", "login", "account", "reset"),
    ("shipping", "delivery", "parcel", "courier"),
)


def _spread(samples, rng):
    """Alternate the samples over two routes and give each a prompt of one of three topics."""
    out = []
    for i, s in enumerate(samples):
        words = " ".join(rng.choice(TOPICS[int(rng.integers(len(TOPICS)))], 3))
        request = {"model": s.model, "messages": [{"role": "user", "content": f"{words}: question {i % 40}"}]}
        out.append(s.model_copy(update={"route": ROUTES[i % 2], "request": request}))
    return out


@pytest.fixture(scope="module")
def two_routes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("two-routes")
    rng = np.random.default_rng(11)
    base, base_scores, _ = window(rng, 400, Behaviour(), version="v1", prefix="base")
    cur, cur_scores, _ = window(rng, 400, Behaviour(latency_ms=1700.0, refusal=0.09), version="v2", prefix="cur")
    write_jsonl(root / "base" / "samples-20261201-0000.jsonl", _spread(base, rng))
    write_jsonl(root / "cur" / "samples-20261202-0000.jsonl", _spread(cur, rng))
    write_jsonl(root / "base-scores.jsonl", base_scores)
    write_jsonl(root / "cur-scores.jsonl", cur_scores)
    (root / "llmwatch.yaml").write_text(yaml.safe_dump({"scoring": {"embeddings": False}}))
    freeze = ["baseline", "freeze", "--config", str(root / "llmwatch.yaml"), "--samples", str(root / "base")]
    freeze += ["--scores", str(root / "base-scores.jsonl"), "--model-version", "v1", "--out", str(root / "b.json")]
    assert main(freeze) == 0
    return root


def drift(root: Path, *extra: str) -> list[str]:
    return [
        "drift",
        *("--config", str(root / "llmwatch.yaml"), "--baseline", str(root / "b.json")),
        *("--samples", str(root / "cur"), "--scores", str(root / "cur-scores.jsonl")),
        *extra,
    ]


def sections(html: str) -> dict[str, str]:
    """The page's h2 sections by heading text."""
    parts = re.split(r"<h2>", html)[1:]
    return {p.split("</h2>", 1)[0]: p.split("</h2>", 1)[1] for p in parts}


def test_multi_route_drift_html_draws_every_family(two_routes: Path, tmp_path: Path, capsys):
    out = tmp_path / "drift.html"
    assert main(drift(two_routes, "--format", "html", "--out", str(out))) == 1
    capsys.readouterr()
    html = out.read_text()
    # The signals are tested across routes (route "*"): their pictures pool the routes the same way.
    assert "<td>all routes</td>" in html
    by_heading = sections(html)
    for family in ("Inputs", "Behaviour", "Performance"):
        body = by_heading[f"{family}: baseline vs current"]
        assert body.count("<svg") >= 1, f"{family}: no plot"
    # The prompt space: baseline and current prompts on one 2-D map.
    assert "prompt space (PCA" in by_heading["Inputs: baseline vs current"]
    # Pass rates with their intervals, answer-length distributions, failure-mode bars.
    behaviour = by_heading["Behaviour: baseline vs current"]
    assert "pass rate (Wilson 95% CI)" in behaviour and "failure modes [all routes]" in behaviour
    # Drifted signals first: the first figure of performance is the one that drifted.
    perf_captions = re.findall(r"<figcaption>([^<]*)</figcaption>", by_heading["Performance: baseline vs current"])
    assert perf_captions[0].startswith("perf:latency_per_token_ms on all routes: drift"), perf_captions
    # No external resource: the page is one file.
    assert not re.search(r"""(src|href)=["']https?:""", html)


def test_text_json_and_html_quote_one_count_of_tests(two_routes: Path, tmp_path: Path, capsys):
    assert main(drift(two_routes, "--format", "json")) == 1
    report = json.loads(capsys.readouterr().out)
    n, context = report["n_tests"], report["n_context_tests"]
    # The count is what the correction covered: every signal with an adjusted p-value, and beside
    # a performance signal's location test its tail test (detail.tail.p_adjusted).
    corrected = [s for s in report["signals"] if s["p_adjusted"] is not None]  # NaN is written as null
    tails = [s for s in corrected if s["detail"].get("tail", {}).get("p_adjusted") is not None]
    assert tails and n == len(corrected) + len(tails)
    assert n > 0 and context > 0
    phrase = f"correction over {n} tests (and {context} context figure(s), uncorrected)"
    assert main(drift(two_routes)) == 1
    assert phrase in capsys.readouterr().out
    out = tmp_path / "drift.html"
    assert main(drift(two_routes, "--format", "html", "--out", str(out))) == 1
    assert phrase in out.read_text()


def test_p_values_on_the_page_do_not_break_inside_a_number(two_routes: Path, tmp_path: Path, capsys):
    out = tmp_path / "drift.html"
    assert main(drift(two_routes, "--format", "html", "--out", str(out))) == 1
    html = out.read_text()
    cells = re.findall(r"<td class=n>([^<]*)</td>", html)
    assert cells and all("-" not in c or c == "-" for c in cells), "a hyphen is a line-break opportunity"
    assert re.search(r"td\.n \{[^}]*white-space: nowrap", html)
    # Short p-values: two significant digits in exponent form (3.1e−07), a negative number with a minus sign.
    assert re.search(r"<td class=n>\d\.\de\u2212\d\d</td>", html)


def test_every_effect_says_its_kind_and_unit_with_one_interval_in_text_json_and_html(
    two_routes: Path, tmp_path: Path, capsys
):
    # Before, the effect column mixed a pass-rate difference, a relative change of p95 and a
    # distance between distributions as bare numbers: -0.050 beside +0.412 beside +0.085.
    assert main(drift(two_routes, "--format", "json")) == 1
    signals = {s["name"]: s for s in json.loads(capsys.readouterr().out)["signals"]}
    refusal, latency = signals["pass_rate:refusal"], signals["perf:latency_per_token_ms"]
    assert (refusal["effect_kind"], refusal["effect_unit"]) == ("difference", "pass rate (0.01 = 1 point)")
    assert latency["effect_kind"] == "relative change" and "p50 and p95" in latency["effect_unit"]
    mixes = [s for n, s in signals.items() if n.startswith("input:mix:")]
    assert mixes and all(s["effect_kind"] == "distance" and s["effect_ci"] is None for s in mixes)
    for s in (refusal, latency):
        low, high = s["effect_ci"]
        assert low <= s["effect_size"] <= high, s
    # The window refuses more (0.09 against the baseline's fewer) and is slower: both intervals
    # exclude no change, as their tests do.
    assert refusal["effect_ci"][1] < 0 < latency["effect_ci"][0]

    assert main(drift(two_routes)) == 1
    text = capsys.readouterr().out.splitlines()
    assert any(line.startswith("effect: diff = current minus baseline") for line in text)
    header = next(line for line in text if line.startswith("verdict "))
    assert "95% interval" in header and "effect is" in header
    for name, label in (("pass_rate:refusal", "diff pass rate"), ("perf:latency_per_token_ms", "rel p50|p95")):
        row = next(line for line in text if f" {name} " in line)
        low, high = signals[name]["effect_ci"]
        assert f"[{low:+.3f}, {high:+.3f}] {label}" in row, row

    out = tmp_path / "drift.html"
    assert main(drift(two_routes, "--format", "html", "--out", str(out))) == 1
    html = out.read_text()
    assert "Effect kinds: diff = current minus baseline" in html
    low, high = refusal["effect_ci"]
    cell = f"[{low:+.3f}, {high:+.3f}]".replace("-", "\u2212")
    assert f"<td class=n>{cell}</td><td>difference, pass rate (0.01 = 1 point)</td>" in html
    # The verdict's points say what the effect is, not "effect -0.050".
    assert f"difference {refusal['effect_size']:+.3f}".replace("-", "\u2212") in html
