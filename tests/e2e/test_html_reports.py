"""HTML reports (`drift` and `report` with `--format html`): one file, opened from disk in a real Chromium."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from helpers.browser import browser_fixture, console_errors, failed_requests, network_events, requested_urls, screenshot  # noqa: E402,F401
from helpers.samples import write_jsonl
from synthetic import Behaviour, window  # noqa: E402

from llmwatch.agent.cli.main import main  # noqa: E402

# A version name as a deployment might spell it, with everything HTML or matplotlib could misread.
BASE = "support-v1"
CURRENT = 'support-v2 <i>"beta"</i> & $5'


ROUTES = ("/v1/chat/completions", "/v1/responses")
TOPICS = (
    ("invoice", "refund", "billing", "payment"),
    ("password", "login", "account", "reset"),
    ("shipping", "delivery", "parcel", "courier"),
    ("python", "error", "install", "package"),
)


def spread(samples, rng, new_topic: float):
    out = []
    for i, s in enumerate(samples):
        topic = TOPICS[3] if rng.random() < new_topic else TOPICS[int(rng.integers(3))]
        request = {
            "model": s.model,
            "messages": [{"role": "user", "content": f"{' '.join(rng.choice(topic, 3))}: question {i % 40}"}],
        }
        out.append(s.model_copy(update={"route": ROUTES[i % 2], "request": request}))
    return out


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """A baseline window and a current one that is slower and refuses more, as files on disk."""
    root = tmp_path_factory.mktemp("traffic")
    rng = np.random.default_rng(7)
    base, base_scores, _ = window(rng, 400, Behaviour(), version=BASE, prefix="base")
    cur, cur_scores, _ = window(rng, 400, Behaviour(latency_ms=1700.0, refusal=0.09), version=CURRENT, prefix="cur")
    # Two routes, as real traffic has (the signals are then tested across routes), and prompts on
    # a few topics; a tenth of the current window asks about a topic the baseline never saw.
    base, cur = spread(base, rng, new_topic=0.0), spread(cur, rng, new_topic=0.1)
    write_jsonl(root / "base" / "samples-20261201-0000.jsonl", base)
    write_jsonl(root / "cur" / "samples-20261202-0000.jsonl", cur)
    write_jsonl(root / "all" / "samples-20261201-0000.jsonl", base + cur)
    write_jsonl(root / "base-scores.jsonl", base_scores)
    write_jsonl(root / "cur-scores.jsonl", cur_scores)
    write_jsonl(root / "all-scores.jsonl", base_scores + cur_scores)
    (root / "llmwatch.yaml").write_text(yaml.safe_dump({"scoring": {"embeddings": False}}))
    assert (
        main(
            [
                "baseline",
                "freeze",
                "--config",
                str(root / "llmwatch.yaml"),
                "--samples",
                str(root / "base"),
                "--scores",
                str(root / "base-scores.jsonl"),
                "--model-version",
                BASE,
                "--out",
                str(root / "baseline.json"),
            ]
        )
        == 0
    )
    return root


def drift_args(root: Path, *extra: str) -> list[str]:
    return [
        "drift",
        "--config",
        str(root / "llmwatch.yaml"),
        "--baseline",
        str(root / "baseline.json"),
        "--samples",
        str(root / "cur"),
        "--scores",
        str(root / "cur-scores.jsonl"),
        *extra,
    ]


def report_args(root: Path, *extra: str) -> list[str]:
    return [
        "report",
        "--config",
        str(root / "llmwatch.yaml"),
        "--samples",
        str(root / "all"),
        "--scores",
        str(root / "all-scores.jsonl"),
        *extra,
    ]


def open_offline(driver, path: Path) -> None:
    """Load the file and prove it needed nothing but itself: no request beyond file:/data:, none failed, no console error."""
    driver.get(path.as_uri())
    events = network_events(driver)
    assert [u for u in requested_urls(events) if not u.startswith(("file:", "data:"))] == []
    assert failed_requests(events) == []
    assert console_errors(driver) == []


def assert_escaped(text: str) -> None:
    assert CURRENT not in text, "the version name reached the page unescaped"
    assert "<i>" not in text
    assert "support-v2 &lt;i&gt;&quot;beta&quot;&lt;/i&gt; &amp; $5" in text


def test_drift_html_report_is_one_offline_file_with_the_verdict_first_and_a_plot_per_signal(
    traffic: Path, browser, tmp_path: Path, capsys
):
    out = tmp_path / "drift.html"
    assert (
        main(drift_args(traffic, "--format", "html", "--out", str(out))) == 1
    )  # exit codes keep their meaning: 1 = drift
    printed = capsys.readouterr().out
    assert f"-> {out}" in printed and "KiB" in printed
    text = out.read_text()
    assert_escaped(text)
    assert len(text.encode()) < 600_000, "a report should stay small enough to mail"

    open_offline(browser, out)
    main_el = browser.find_element(By.TAG_NAME, "main")
    first_section = main_el.find_elements(By.CSS_SELECTOR, "h1 ~ *")[1]
    assert first_section.get_attribute("id") == "verdict"
    assert first_section.text.startswith("DRIFT: the current window behaves differently from the baseline")
    # Slower at the same answer length: a performance regression per output token (drift families).
    assert "perf:latency_per_token_ms" in first_section.text and "pass_rate:refusal" in first_section.text
    assert (
        browser.execute_script("return document.querySelectorAll('main i').length") == 0
    )  # the <i> in the version name stayed text
    figures = browser.find_elements(By.CSS_SELECTOR, "figure svg, figure img")
    captions = [f.text for f in browser.find_elements(By.TAG_NAME, "figcaption")]
    # Every tested signal but the embedding has its baseline-vs-current picture, captioned with its test and effect.
    assert len(figures) == len(captions) >= 8
    # Two routes: signals tested across them, and each family still drawn; the prompts on a 2-D map.
    assert any(c.startswith("perf:latency_per_token_ms on all routes: drift") for c in captions), captions
    for family in ("Inputs", "Behaviour", "Performance"):
        drawn = browser.find_elements(
            By.XPATH, f"//h2[starts-with(., '{family}:')]/following-sibling::div[1][@class='figs']//figure"
        )
        assert drawn, f"{family}: no plot"
    assert any("each dot a prompt" in c for c in captions), captions
    latency = next(c for c in captions if c.startswith("perf:latency_per_token_ms"))
    assert "drift" in latency and "van_elteren statistic" in latency and "effect +" in latency
    headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
    assert headings == [
        "Signals",
        "Inputs: baseline vs current",
        "Behaviour: baseline vs current",
        "Performance: baseline vs current",
    ]
    # The version name in the plots' legends is drawn as written ($ not read as TeX).
    assert "$5" in browser.execute_script(
        "return Array.from(document.querySelectorAll('figure svg text')).map(t => t.textContent).join(' ')"
    )
    screenshot(browser, "drift-report.png", tmp_path)


def test_evaluation_html_report_shows_the_decision_then_pass_rates_latency_cost_and_the_matrix(
    traffic: Path, browser, tmp_path: Path
):
    out = tmp_path / "report.html"
    assert main(report_args(traffic, "--format", "html", "--out", str(out))) == 0
    text = out.read_text()
    assert_escaped(text)
    assert len(text.encode()) < 600_000

    open_offline(browser, out)
    verdict = browser.find_element(By.ID, "verdict")
    assert verdict.text.startswith("Best: version ")
    assert "decision score = (" in verdict.text
    headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
    assert headings[:5] == [
        "Decision score",
        "Pass rate by category and version",
        "Latency and time to first token",
        "Cost",
        "Stability (1 = stable)",
    ]
    captions = " | ".join(f.text for f in browser.find_elements(By.TAG_NAME, "figcaption"))
    for shown in (
        "Decision score per version",
        "Wilson 95% confidence interval",
        "latency (ms): quantiles",
        "time to first token (ms): quantiles",
        "Cost per 1000 requests",
    ):
        assert shown in captions
    # The evaluation matrix: one row per category plus the weighted overall, a column per version.
    matrix = next(t for t in browser.find_elements(By.TAG_NAME, "table") if t.text.startswith("category weight"))
    assert re.search(r"\d\.\d\d \| \d+\.\d% \[\d+%-\d+%\] \| \d+", matrix.text)
    screenshot(browser, "evaluation-report.png", tmp_path)


def test_a_signal_table_of_long_names_fits_the_page_without_a_scrollbar(browser, tmp_path: Path):
    # The rows of a real drift report (gpt-3.5-turbo-0301 -> 0613 on AlpacaEval, one route): the
    # table was 1,218 px in a 1,180 px column, its direction column behind a scrollbar.
    from llmwatch.scorers.reports.html import HtmlDocument

    doc = HtmlDocument("llmwatch drift report")
    route = "/v1/chat/completions"
    rows = [
        ["drift", "behaviour", "output_tokens", route, "van_elteren", "17.59", "2.7e-69", "2.7e-68", "+0.559", "805/805", "higher"],
        ["drift", "behaviour", "embedding", route, "mmd_residual_split", "-0.0007276", "2.0e-04", "0.0016", "+0.049", "500/500", ""],
        ["stable", "performance", "perf:ttft_ms_by_input_length", route, "van_elteren", "1.065", "0.287", "1.000", "+0.040", "805/805", "higher"],
        ["stable", "behaviour", "pass_rate:not_empty_or_truncated", route, "cmh", "0", "1.000", "1.000", "+0.000", "805/805", ""],
        ["stable", "inputs", "input:prompt_embedding", route, "classifier_two_sample", "0", "1.000", "1.000", "-0.000", "805/805", "refusal share lower"],
    ]  # fmt: skip
    headers = [
        "verdict",
        "family",
        "signal",
        "route",
        "test",
        "statistic",
        "p",
        "p adjusted",
        "effect",
        "n base/cur",
        "direction",
    ]
    doc.table(headers, rows, numeric=(5, 6, 7, 8, 9))
    out = tmp_path / "table.html"
    out.write_text(doc.render())
    open_offline(browser, out)
    browser.set_window_size(1400, 900)
    wrap = browser.find_element(By.CSS_SELECTOR, ".tablewrap")
    assert browser.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth", wrap)
    # Wrapped only after a separator, never inside a word; the text reads as it was.
    assert "/v1/<wbr>chat/<wbr>completions" in out.read_text()
    assert browser.find_element(By.TAG_NAME, "tbody").text.count(route) == len(rows)


def test_html_without_matplotlib_is_refused_in_one_line_naming_the_extra(
    traffic: Path, tmp_path: Path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an install without the extra looks like to `import`
    out = tmp_path / "drift.html"
    assert main(drift_args(traffic, "--format", "html", "--out", str(out))) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "llmwatch: --format html needs the [reports] extra: pip install 'llmwatch[reports]' (or use --format text or json)\n"
    )
    assert not out.exists()
    assert main(report_args(traffic, "--format", "html", "--out", str(out))) == 2
    assert "llmwatch[reports]" in capsys.readouterr().err


def test_html_needs_an_output_file_and_other_formats_are_unchanged(traffic: Path, capsys):
    assert main(drift_args(traffic, "--format", "html")) == 2
    assert capsys.readouterr().err == "llmwatch: --format html writes a file: pass --out FILE.html\n"
    assert main(drift_args(traffic)) == 1
    assert capsys.readouterr().out.startswith("DRIFT: the current window behaves differently from the baseline\n")


def test_shadow_html_report_draws_paired_differences_ratios_and_win_tie_loss_bars(browser, tmp_path: Path, capsys):
    from llmwatch.core.pairs import Pair, PairScore
    from llmwatch.core.records import Sample, Usage

    rng = np.random.default_rng(3)
    checks = {"refusal": (0.97, 0.93), "json_valid": (0.95, 0.955), "not_empty_or_truncated": (0.98, 0.98)}

    def sample(i: int, side: str, ms: float, ttft: float, tokens: int, category: str) -> Sample:
        return Sample(
            id=f"{side}{i}", timestamp=1_700_000_000 + i, model="gpt-4o-mini", status=200, latency_ms=ms,
            ttft_ms=ttft, usage=Usage(input_tokens=40, output_tokens=tokens), request={"messages": []},
            response={"choices": [{"message": {"content": "answer " * (tokens // 10)}}]},
            cost_usd=(40 * 0.15 + tokens * 0.6) / 1e6, metadata={"category": category},
        )  # fmt: skip

    pairs = []
    for i in range(400):
        category = ("billing", "login", "shipping")[i % 3]
        ms, ttft, tokens = float(rng.lognormal(7.1, 0.3)), float(rng.lognormal(5.0, 0.3)), int(rng.lognormal(5.2, 0.3))
        pairs.append(
            Pair(
                id=f"p{i}",
                candidate=CURRENT,
                timestamp=1_700_000_000 + i,
                route="/v1/chat/completions",
                category=category,
                primary=sample(i, "p", ms, ttft, tokens, category),
                shadow=sample(i, "s", ms * float(rng.lognormal(0.22, 0.1)), ttft * 0.95, int(tokens * 0.9), category),
                primary_scores=[
                    PairScore(check=c, result="pass" if rng.random() < a else "fail") for c, (a, _) in checks.items()
                ],
                shadow_scores=[
                    PairScore(check=c, result="pass" if rng.random() < b else "fail") for c, (_, b) in checks.items()
                ],
            )  # fmt: skip
        )
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "pairs-20261201-0000.jsonl").write_bytes(b"".join(p.to_json() + b"\n" for p in pairs))
    out = tmp_path / "shadow.html"
    code = main(["shadow", "report", "--pairs", str(tmp_path / "pairs"), "--format", "html", "--out", str(out)])
    assert code == 1, capsys.readouterr()
    assert_escaped(out.read_text())

    open_offline(browser, out)
    assert browser.find_element(By.ID, "verdict").text.startswith(
        'candidate support-v2 <i>"beta"</i> & $5: WORSE on check:refusal, latency_p95'
    )
    meta = browser.find_element(By.CSS_SELECTOR, ".meta").text
    assert meta.startswith(
        "1 candidate(s); alpha 0.05; margins: pass rate at most 1 points lower, p95 latency at most x1.1"
    )
    captions = [f.text for f in browser.find_elements(By.TAG_NAME, "figcaption")]
    assert [c.split(" with")[0] for c in captions] == [
        "Paired difference per signal",
        "Candidate / primary ratio (p95 latency, p95 TTFT, mean tokens and cost)",
        "Wins, ties and losses of the candidate over the pairs",
    ]
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure svg")) == 3
    # The similarity with its interval and the table's legend, as the text report has them (the
    # page gave the point alone and never said which CI the table shows).
    body = browser.find_element(By.TAG_NAME, "body").text
    assert re.search(
        r"Answer similarity within pairs \(normalised text\): \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] \(90 % interval\) over \d+ pairs",
        body,
    )
    assert "effect: candidate minus primary (points) for rates" in body and "CI: two-sided 90 %" in body
    # Every primary and candidate figure with its unit: bare, a rate of 97 and a p95 of 97 ms read alike.
    cells = {
        row.find_element(By.TAG_NAME, "td").text: [td.text for td in row.find_elements(By.TAG_NAME, "td")[3:5]]
        for row in browser.find_elements(By.CSS_SELECTOR, "table tr")
        if row.find_elements(By.TAG_NAME, "td")
    }
    assert all(v.endswith(" %") for v in cells["check:refusal"] + cells["error_rate"]), cells
    assert all(v.endswith(" ms") for v in cells["latency_p95"] + cells["ttft_p95"]), cells
    assert all(v.endswith(" USD") for v in cells["cost_mean"]) and all(
        v.endswith(" tokens") for v in cells["output_tokens_mean"]
    ), cells
    screenshot(browser, "shadow-report.png", tmp_path)


def test_a_sampling_stability_from_one_prompt_is_marked_as_no_estimate(traffic: Path, browser, tmp_path: Path):
    # The current version asked one prompt throughout, the baseline five: the current's sampling
    # stability is that one prompt's spread, which the table showed as plainly as the others.
    lines = (traffic / "all" / "samples-20261201-0000.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    for i, row in enumerate(rows):
        text = "the one prompt" if row["model_version"] == CURRENT else f"prompt {i % 5}"
        row["request"]["messages"] = [{"role": "user", "content": text}]
    (tmp_path / "all").mkdir()
    (tmp_path / "all" / "samples-20261201-0000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "report.html"
    args = report_args(traffic, "--format", "html", "--out", str(out))
    args[args.index("--samples") + 1] = str(tmp_path / "all")
    assert main(args) == 0

    open_offline(browser, out)
    table = next(t for t in browser.find_elements(By.TAG_NAME, "table") if t.text.startswith("kind category version"))
    cells = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")] for tr in table.find_elements(By.TAG_NAME, "tr")]
    sampling = {(c[1], c[2]): (c[4], c[6]) for c in cells if c and c[0] == "sampling"}
    assert sampling[("all", CURRENT)] == ("1", "one prompt only: not a stability estimate")
    assert sampling[("all", BASE)] == ("5", "")


def test_the_canary_page_states_the_canary_verdict_and_exit_code_not_the_drift_s(browser, tmp_path: Path, capsys):
    # A canary that refuses less than the stable version: its behaviour drifted, in its favour, so
    # `llmwatch canary` passes it (exit 0); the page said "DRIFT: the current window behaves
    # differently from the baseline" and "exit code 1", the drift's verdict, not the canary's.
    from helpers.traffic import MIX, MODEL
    from helpers.traffic import traffic as canary_traffic

    rng = np.random.default_rng(3)
    a = canary_traffic(rng, 1500, MODEL, MIX, prefix="a", version="A")
    better = MODEL.with_kind("legal", refusal=0.0).with_kind("chat", refusal=0.0)
    b = canary_traffic(rng, 1500, better, MIX, prefix="b", version="B")
    write_jsonl(tmp_path / "samples" / "samples-20261201-0000.jsonl", a[0] + b[0])
    write_jsonl(tmp_path / "scores.jsonl", a[1] + b[1])
    out = tmp_path / "canary.html"
    args = ["canary", "--samples", str(tmp_path / "samples"), "--scores", str(tmp_path / "scores.jsonl")]
    code = main([*args, "--stable", "A", "--canary", "B", "--format", "html", "--out", str(out)])
    assert code == 0, capsys.readouterr()

    open_offline(browser, out)
    verdict = browser.find_element(By.ID, "verdict").text
    assert verdict.startswith("NOT WORSE: canary B is not worse than stable A in the same window"), verdict
    assert "behaviour: not_worse" in verdict and verdict.rstrip().endswith("exit code 0"), verdict
    assert browser.title == "llmwatch canary report"


def test_a_drift_page_that_passes_by_fail_on_names_the_families_that_drifted(traffic: Path, browser, tmp_path: Path):
    # The current window is slower and refuses more; with --fail-on inputs the run passes, and the
    # page said "STABLE: no signal differs from the baseline beyond chance" above both drifts.
    out = tmp_path / "drift.html"
    assert main(drift_args(traffic, "--fail-on", "inputs", "--format", "html", "--out", str(out))) == 0
    open_offline(browser, out)
    head = browser.find_element(By.ID, "verdict").text.splitlines()[0]
    assert head.startswith("STABLE on the families that fail the run (inputs): none of their signals differs"), head
    assert "drifted, which does not fail the run (--fail-on)" in head and "behaviour" in head, head
