"""`llmwatch ui` as a real process over a generated data directory (real Sample/Score/Pair files).

Filters select exactly the samples the files say they should; a sample's page shows the call,
its checks and its redaction marks; hostile record text is inert text on every page; off
loopback nothing is shown without the token; files that grow are picked up; a drift report's
signals and a Grafana data link lead to the samples behind them; a port in use is one line.
"""

from __future__ import annotations

import html
import json
import re
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest
from helpers.ui_app import UiServer, count, get, listed_ids, records
from helpers.ui_data import HOSTILE_ANSWER, HOSTILE_PROMPT, START, generate, make_sample, make_scores

N = 300
SECURITY = ("Content-Security-Policy", "Referrer-Policy", "X-Content-Type-Options", "Cache-Control")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ui") / "llmwatch-data"
    generate(folder, N)
    return folder


@pytest.fixture(scope="module")
def ui(data_dir: Path):
    server = UiServer(data_dir)
    yield server
    server.stop()


def test_filters_select_exactly_the_samples_the_files_hold(ui: UiServer, data_dir: Path):
    samples = {s["id"]: s for s in records(data_dir / "samples")}
    scores = records(data_dir / "scores")
    failed_b = {
        s["sample_id"]
        for s in scores
        if s["check"] == "min_length" and s["result"] == "fail" and samples[s["sample_id"]]["model_version"] == "B"
    }
    assert 10 < len(failed_b) < 50  # the fixture has some, not all on one page or none

    status, headers, body = get(f"{ui.base}/samples?model_version=B&check=min_length&outcome=fail")
    assert status == 200 and all(h in headers for h in SECURITY)
    assert count(body) == len(failed_b)
    assert set(listed_ids(body)) == failed_b

    billing_errors = {i for i, s in samples.items() if s["metadata"]["category"] == "billing" and s["status"] >= 400}
    _, _, body = get(f"{ui.base}/samples?category=billing&failure_mode=error")
    assert set(listed_ids(body)) == billing_errors and billing_errors

    # A time range: [since, until] inclusive, ISO or epoch milliseconds (Grafana's ${__from}).
    since, until = START + timedelta(seconds=30), START + timedelta(seconds=60)
    inside = {i for i, s in samples.items() if since.isoformat()[:19] <= s["timestamp"][:19] <= until.isoformat()[:19]}
    _, _, body = get(f"{ui.base}/samples?since={int(since.timestamp() * 1000)}&until={quote(until.isoformat())}")
    assert set(listed_ids(body)) == inside and len(inside) == 11

    # Text search over prompts and answers; pages of 50, the next link carries the filters.
    tracking = {i for i, s in samples.items() if "parcel tracking" in json.dumps(s["request"])}
    _, _, body = get(f"{ui.base}/samples?q=PARCEL+tracking")
    assert count(body) == len(tracking) == 50
    _, _, body = get(f"{ui.base}/samples?sort=latency")
    assert count(body) == N and len(listed_ids(body)) == 50
    nxt = re.search(r'id="next" href="([^"]+)"', body).group(1)  # type: ignore[union-attr]
    _, _, page2 = get(ui.base + html.unescape(nxt))
    slowest = sorted(samples.values(), key=lambda s: -s["latency_ms"])
    assert listed_ids(page2) == [s["id"] for s in slowest[50:100]]

    status, headers, body = get(f"{ui.base}/samples?outcome=maybe")
    assert status == 400 and "outcome='maybe': one of pass, fail, error, skip" in html.unescape(body)
    assert all(h in headers for h in SECURITY)


def test_a_sample_page_shows_the_call_its_checks_and_its_redaction_marks(ui: UiServer, data_dir: Path):
    sample = next(s for s in records(data_dir / "samples") if s["id"] == "smp-0000050")
    status, _, body = get(f"{ui.base}/samples/smp-0000050")
    assert status == 200
    text = html.unescape(re.sub(r"<[^>]+>", " ", body))
    assert "Question 50 about password reset: what should I do next?" in text
    assert '<mark class="redacted">[EMAIL]</mark>' in body  # the redaction, visible as such
    assert f"{sample['latency_ms']:,.0f} ms" in text and f"{sample['ttft_ms']:,.0f} ms" in text
    assert f"${sample['cost_usd']:.6f}" in text
    assert re.search(rf"output tokens\s+{sample['usage']['output_tokens']}\b", text)
    rows = re.findall(r'<tr class="check"><td>([^<]+)</td><td>[^<]*</td><td class="(\w+)">', body)
    expected = sorted(
        (s["check"], s["result"]) for s in records(data_dir / "scores") if s["sample_id"] == "smp-0000050"
    )
    assert sorted(rows) == expected
    assert "words: " in text  # a check's reason (its details)

    assert get(f"{ui.base}/samples/no-such-sample")[0] == 404


def test_hostile_record_text_is_inert_on_every_page(ui: UiServer):
    for url in ("/samples/smp-0000004", "/samples?q=script", "/samples?category=account"):
        status, _, body = get(ui.base + url)
        assert status == 200
        # The pages have no script of their own: any <script or <img is the record's, unescaped.
        assert "<script" not in body and "<img" not in body and 'href="javascript' not in body
    _, _, body = get(ui.base + "/samples/smp-0000004")
    assert html.escape(HOSTILE_PROMPT) in body and html.escape(HOSTILE_ANSWER) in body
    # A hostile filter value is escaped back into the form, never into markup.
    _, _, body = get(ui.base + "/samples?q=" + quote('"><script>alert(1)</script>'))
    assert "<script" not in body and "&quot;&gt;&lt;script&gt;" in body


def test_without_a_token_only_a_loopback_host_may_read_the_pages(ui: UiServer, data_dir: Path):
    """DNS rebinding: a web page under a name that resolves to 127.0.0.1 is, to the browser, the
    same origin as the UI; the only mark it leaves is its name in the Host header."""
    for host in ("attacker.example", f"attacker.example:{ui.port}", "127.0.0.1.attacker.example", ""):
        status, got, body = get(f"{ui.base}/samples/smp-0000004", {"Host": host})
        assert status == 421, host
        assert "loopback Host" in body and "Question" not in body and all(h in got for h in SECURITY)
    for host in (f"127.0.0.1:{ui.port}", f"localhost:{ui.port}", "LOCALHOST.", f"[::1]:{ui.port}"):
        assert get(f"{ui.base}/samples/smp-0000004", {"Host": host})[0] == 200, host
    assert get(f"{ui.base}/healthz", {"Host": "attacker.example"})[0] == 200, "a probe reads nothing"
    # Behind a reverse proxy on this machine that passes its own name on: --public-url names it.
    proxied = UiServer(data_dir, "--public-url", "https://ui.example.org/")
    try:
        assert get(f"{proxied.base}/samples", {"Host": "ui.example.org"})[0] == 200
        assert get(f"{proxied.base}/samples", {"Host": "attacker.example"})[0] == 421
    finally:
        proxied.stop()


def test_versions_side_by_side_with_wilson_intervals(ui: UiServer, data_dir: Path):
    from llmwatch.scorers.stats.proportions import wilson_interval

    samples = {s["id"]: s for s in records(data_dir / "samples")}
    scores = [
        s
        for s in records(data_dir / "scores")
        if s["check"] == "min_length" and samples[s["sample_id"]]["model_version"] == "B"
    ]
    passed = sum(s["result"] == "pass" for s in scores)
    decided = sum(s["result"] in ("pass", "fail") for s in scores)
    lo, hi = wilson_interval(passed, decided)
    status, _, body = get(f"{ui.base}/versions")
    assert status == 200
    assert (
        f'{100 * passed / decided:.1f}% <span class="ci">[{100 * lo:.1f}, {100 * hi:.1f}]</span> <span class="help">n={decided}</span>'
        in body
    )
    link = "/samples?model_version=B&amp;check=min_length&amp;outcome=fail"
    assert f'<a class="failures" href="{link}">{decided - passed:,} failed</a>' in body


def test_versions_gives_the_latency_of_answered_calls_as_the_report_does(ui: UiServer, data_dir: Path):
    # With the errors' times mixed in, /versions and `llmwatch report` gave one version two p50s
    # (demo, version A: 1,231 ms here, 1,260 ms in the report).
    from llmwatch.core.records import Sample
    from llmwatch.scorers.evaluation.decision import cost_latency

    samples = [Sample.model_validate(s) for s in records(data_dir / "samples")]
    assert any(s.status >= 400 and s.model_version == "B" for s in samples)
    reported = cost_latency(samples)["B"]
    _, _, body = get(f"{ui.base}/versions")
    text = html.unescape(re.sub(r"<[^>]+>", " ", body))
    for label, value in (
        ("latency p50 (answered)", reported.latency_ms["p50"]),
        ("latency p95 (answered)", reported.latency_ms["p95"]),
        ("TTFT p50 (answered)", reported.ttft_ms["p50"]),
    ):
        assert re.search(rf"{re.escape(label)}\s+\S+ ms\s+{value:,.0f} ms", text), (label, value)


def test_a_grafana_data_link_and_a_drift_signal_lead_to_the_samples(ui: UiServer, data_dir: Path):
    _, _, direct = get(f"{ui.base}/samples?model_version=B&check=min_length&outcome=fail")
    # What the quality dashboard's data link sends with "All" versions selected and the time range in ms.
    frm, to = int(START.timestamp() * 1000), int((START + timedelta(days=1)).timestamp() * 1000)
    status, _, body = get(f"{ui.base}/samples?model_version=.*&check=min_length&outcome=fail&since={frm}&until={to}")
    assert status == 200 and count(body) > count(direct)
    _, _, body = get(f"{ui.base}/samples?model_version=$__all&signal=pass_rate:min_length&since={frm}&until={to}")
    assert count(body) > count(direct)
    _, _, body = get(f"{ui.base}/samples?model_version=B&signal=pass_rate:min_length&since={frm}&until={to}")
    assert listed_ids(body) == listed_ids(direct)

    # A drift report saved in the data directory: its drifted signal links to the same samples.
    report = {
        "baseline_version": "A",
        "current_versions": ["B"],
        "n_current": 150,
        "verdict": "drift",
        "signals": [
            {"name": "pass_rate:min_length", "family": "behaviour", "route": "/v1/chat/completions", "verdict": "drift",
             "effect_size": -0.12, "p_adjusted": 0.0004, "n_baseline": 150, "n_current": 150, "direction": "down"},
            {"name": "latency_ms", "family": "performance", "route": "/v1/chat/completions", "verdict": "stable"},
        ],
    }  # fmt: skip
    (data_dir / "drift").mkdir(exist_ok=True)
    (data_dir / "drift" / "drift-B.json").write_bytes(orjson.dumps(report))
    (data_dir / "drift" / "drift-B.html").write_text("<!DOCTYPE html><title>drift DRIFT</title><p>the plots</p>")
    _, _, listing = get(f"{ui.base}/drift")
    assert 'href="/drift/0">drift-B.json' in listing and 'href="/drift/page/0">drift-B.html' in listing
    status, headers, served = get(f"{ui.base}/drift/page/0")  # as written, under the app's CSP
    assert status == 200 and served.endswith("<p>the plots</p>") and all(h in headers for h in SECURITY)
    status, _, page = get(f"{ui.base}/drift/0")
    assert status == 200 and '<span class="drift">drift</span>' in page
    link = html.unescape(re.search(r'<tr class="drifted">.*?class="signal-samples" href="([^"]+)"', page).group(1))  # type: ignore[union-attr]
    assert link == "/samples?signal=pass_rate%3Amin_length&model_version=B&route=%2Fv1%2Fchat%2Fcompletions"
    _, _, body = get(ui.base + link)
    samples = {s["id"]: s for s in records(data_dir / "samples")}
    assert set(listed_ids(body)) == {i for i in listed_ids(direct) if samples[i]["route"] == "/v1/chat/completions"}


def test_a_drift_report_that_could_not_decide_is_not_shown_as_stable(ui: UiServer, data_dir: Path):
    # Every verdict but `drift` was green: an `insufficient` report, a `shifted` input mix and a
    # `changed` context figure all read like `stable`.
    report = {
        "baseline_version": "A",
        "current_versions": ["B"],
        "n_current": 12,
        "verdict": "insufficient",
        "signals": [
            {"name": "input:mix:category", "family": "inputs", "route": "*", "verdict": "shifted"},
            {"name": "perf:ttft_ms", "family": "performance", "route": "*", "verdict": "changed"},
            {"name": "output_tokens", "family": "behaviour", "route": "*", "verdict": "insufficient"},
            {"name": "perf:latency_ms", "family": "performance", "route": "*", "verdict": "stable"},
        ],
    }  # fmt: skip
    (data_dir / "drift").mkdir(exist_ok=True)
    (data_dir / "drift" / "drift-undecided.json").write_bytes(orjson.dumps(report))
    _, _, listing = get(f"{ui.base}/drift")
    n = re.search(r'href="/drift/(\d+)">drift-undecided.json', listing).group(1)  # type: ignore[union-attr]
    status, _, page = get(f"{ui.base}/drift/{n}")
    assert status == 200 and '<span class="undecided">insufficient</span>' in page
    verdicts = {v: c for c, v in re.findall(r'<td class="(drift|stable|undecided)">(\w+)</td>', page)}
    assert verdicts == {"shifted": "drift", "changed": "drift", "insufficient": "undecided", "stable": "stable"}
    # The signals that moved are listed first.
    order = re.findall(r'<td class="(?:drift|stable|undecided)">(\w+)</td>', page)
    assert order[:2] == ["shifted", "changed"]


def test_shadow_pairs_show_both_answers(ui: UiServer, data_dir: Path):
    pair = records(data_dir / "pairs")[3]
    status, _, body = get(f"{ui.base}/shadow")
    assert status == 200 and f'href="/shadow/{pair["id"]}"' in body
    status, _, body = get(f"{ui.base}/shadow/{pair['id']}")
    assert status == 200
    for side in ("primary", "shadow"):
        answer = pair[side]["response"]["choices"][0]
        assert html.escape(answer.get("message", {}).get("content") or answer.get("text")) in body


def test_suites_show_their_cases(data_dir: Path, tmp_path: Path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        json.dumps({"id": "refund-1", "category": "billing", "input": "How do I get a <b>refund</b>?", "expected": "refund"}) + "\n"
        + json.dumps({"id": "track-1", "category": "shipping", "input": "Where is my parcel?", "checks": [{"kind": "not_empty_or_truncated"}]}) + "\n"
    )  # fmt: skip
    server = UiServer(data_dir, "--suite", str(suite))
    try:
        _, _, body = get(f"{server.base}/suites/0")
        assert re.findall(r'<tr class="case"><td>([^<]+)</td>', body) == ["refund-1", "track-1"]
        assert "How do I get a &lt;b&gt;refund&lt;/b&gt;?" in body
    finally:
        server.stop()


def test_off_loopback_or_asked_the_token_is_required_then_kept_in_a_cookie(data_dir: Path, tmp_path: Path):
    token_file = tmp_path / "ui.token"
    server = UiServer(data_dir, "--auth", "token", "--token-file", str(token_file))
    try:
        token = token_file.read_text().strip()
        assert server.link == f"{server.base}/samples?token={token}"
        assert token_file.stat().st_mode & 0o777 == 0o600
        for url, headers in (
            ("/samples", {}),
            ("/samples/smp-0000004", {}),
            ("/versions?token=wrong", {}),
            ("/samples", {"Authorization": "Bearer wrong"}),
            ("/samples", {"Cookie": "llmwatch_ui_token=wrong"}),
        ):
            status, got, body = get(server.base + url, headers)
            assert status == 401, url
            assert all(h in got for h in SECURITY) and "Question" not in body
        status, got, _ = get(f"{server.base}/samples?model_version=B&token={token}", follow=False)
        assert status == 303 and got["Location"] == "/samples?model_version=B"  # the token leaves the URL
        cookie = got["Set-Cookie"]
        assert f"llmwatch_ui_token={token}" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
        assert get(f"{server.base}/samples?model_version=B", {"Cookie": f"llmwatch_ui_token={token}"})[0] == 200
        assert get(f"{server.base}/samples/smp-0000004", {"Authorization": f"Bearer {token}"})[0] == 200
    finally:
        server.stop()
    assert "Secure" not in cookie, "plain http on loopback: a Secure cookie would never come back"
    # A restart with the same token file keeps the links; under an https:// public URL the
    # cookie is Secure: never sent over plain http to the same name.
    again = UiServer(
        data_dir, "--auth", "token", "--token-file", str(token_file), "--public-url", "https://ui.example.org"
    )
    try:
        assert again.link == f"https://ui.example.org/samples?token={token}"
        status, got, _ = get(f"{again.base}/samples?token={token}", follow=False)
        assert status == 303 and "; Secure" in got["Set-Cookie"] and "HttpOnly" in got["Set-Cookie"]
    finally:
        again.stop()


def test_a_request_line_or_header_too_long_to_parse_leaves_no_token_in_the_log(data_dir: Path, tmp_path: Path):
    token_file = tmp_path / "ui.token"
    server = UiServer(data_dir, "--auth", "token", "--token-file", str(token_file))
    try:
        token = token_file.read_text().strip()
        filler = "x" * 9000  # over aiohttp's 8190-byte line limit
        assert get(f"{server.base}/samples", {"Authorization": f"Bearer {token}{filler}"})[0] == 400
        assert get(f"{server.base}/samples?token={token}&q={filler}")[0] == 400
        server.proc.wait_for(r"bad HTTP request from 127\.0\.0\.1 refused: 400 LineTooLong", 30)
        server.proc.wait_for(r"bad HTTP request from .* refused: 400 LineTooLong", 30)
        assert get(f"{server.base}/samples", {"Authorization": f"Bearer {token}"})[0] == 200, "still serving"
    finally:
        server.stop()
    out = server.proc.output().partition('"event": "ui.serving"')[2]  # after the link printed at start
    # The parser's error echoed the first 100 bytes of the line: the token, in a traceback.
    assert out.count("LineTooLong") == 2 and token not in out and "Traceback" not in out


def test_new_and_grown_files_are_picked_up(tmp_path: Path):
    folder = tmp_path / "data"
    generate(folder, 20, pairs=0)
    server = UiServer(folder, "--refresh", "0.2")
    try:
        assert json.loads(get(f"{server.base}/healthz")[2])["samples"] == 20
        import random

        rng = random.Random(1)
        extra = [make_sample(i, rng) for i in range(20, 30)]
        with open(folder / "samples" / "samples-20261201-0000.jsonl", "ab") as fh:
            fh.write(b"".join(s.to_json() + b"\n" for s in extra[:5]))
        with open(folder / "samples" / "samples-20261202-0000.jsonl", "ab") as fh:
            fh.write(b"".join(s.to_json() + b"\n" for s in extra[5:]))
        with open(folder / "scores" / "scores-20261202-0000.jsonl", "ab") as fh:
            fh.write(b"".join(sc.to_json() + b"\n" for s in extra for sc in make_scores(s, rng)))
        deadline = time.monotonic() + 30
        while json.loads(get(f"{server.base}/healthz")[2]) != {"samples": 30, "scores": 90, "pairs": 0}:
            assert time.monotonic() < deadline, get(f"{server.base}/healthz")[2]
            time.sleep(0.1)  # polling the state under test, with a deadline
        status, _, body = get(f"{server.base}/samples/{extra[-1].id}")
        assert status == 200 and "min_length" in body
    finally:
        server.stop()


def test_a_port_in_use_and_a_missing_data_dir_are_one_line_each(data_dir: Path, tmp_path: Path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{port} (--listen)" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", str(tmp_path / "nowhere")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "--data-dir" in done.stderr and "no such directory" in done.stderr


def _other_files(data_dir: Path, folder: Path) -> dict[str, Path]:
    """One file of each kind a user may hand the wrong flag, as llmwatch writes it."""
    drift = folder / "drift.json"
    drift.write_text(json.dumps({"verdict": "stable", "signals": []}, indent=2))  # indented: line 1 is `{`
    suite = folder / "suite.jsonl"
    suite.write_text(json.dumps({"id": "refund-1", "input": "How do I get a refund?", "expected": "refund"}) + "\n")
    baseline = folder / "baseline-A.json"
    baseline.write_text(json.dumps({"schema": "llmwatch.baseline/v2", "model_version": "A"}, indent=2))
    other = folder / "other.json"
    other.write_text(json.dumps({"user": 1, "event": "click"}) + "\n")
    return {
        "samples": next((data_dir / "samples").glob("*.jsonl")),
        "scores": next((data_dir / "scores").glob("*.jsonl")),
        "pairs": next((data_dir / "pairs").glob("*.jsonl")),
        "drift": drift,
        "suite": suite,
        "baseline": baseline,
        "other": other,
    }


@pytest.mark.parametrize(
    "flag, given, said",
    [
        ("--suite", "samples", "a samples file: its first record has schema/id/request/response, not a regression suite; samples go to --samples"),
        ("--drift-report", "samples", "a samples file: its first record has schema/id/request/response, not a drift report; samples go to --samples"),
        ("--suite", "scores", "a scores file: its first record has schema/sample_id/check/result, not a regression suite; scores go to --scores"),
        ("--drift-report", "pairs", "a shadow pairs file: its first record has schema/candidate/primary/shadow, not a drift report"),
        ("--suite", "drift", "a drift report (`llmwatch drift --format json`: a list of signals), not a regression suite; give it as --drift-report"),
        ("--drift-report", "suite", "a regression suite: its first record has id/input, not a drift report; give it as --suite"),
        ("--drift-report", "baseline", "a frozen baseline (`llmwatch baseline freeze`, schema llmwatch.baseline/v2), not a drift report; a baseline goes to `llmwatch drift --baseline`"),
        ("--drift-report", "other", "not a drift report (no list of signals; its keys are event, user)"),
        ("--suite", "other", ":1: field 'id': Field required"),
    ],
)  # fmt: skip
def test_a_file_of_another_kind_given_as_suite_or_drift_report_is_refused_at_the_prompt(
    data_dir: Path, tmp_path: Path, flag: str, given: str, said: str
):
    """`ui --suite samples.jsonl` (or any JSON that is no suite or drift report) started the UI,
    whose page then said "field 'id': Field required" or "not a drift report (KeyError)". Refused
    before it starts: one line naming the file, what it is and which flag takes it, exit 2. Without
    the check the UI serves until the timeout."""
    path = _other_files(data_dir, tmp_path)[given]
    done = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", flag, str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"llmwatch: {flag} {path}") and said in line, line
    assert "listening" not in done.stdout


def test_a_live_sidecars_data_directory_redacted_samples_and_all(tmp_path: Path):
    """A real `llmwatch proxy` in front of the simulator writes the data directory; the UI reads it
    as it grows: the sampled calls, the e-mail address as the pipeline's [EMAIL] mark, the checks."""
    import urllib.request

    from helpers.procs import Proc, agent_env, agent_started, simulator_url, start_simulator

    config = tmp_path / "llmwatch.yaml"
    config.write_text("scoring:\n  embeddings: false\nsampling:\n  rate: 1.0\n")
    data = tmp_path / "data"
    sim = start_simulator()
    proxy = ui = None
    try:
        upstream = simulator_url(sim)
        proxy = Proc(
            [sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--config", str(config), "--upstream", upstream,
             "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(data)],
            env=agent_env(),
        )  # fmt: skip
        port = agent_started(proxy)["proxy_port"]

        def call(i: int, stream: bool) -> None:
            body = {"model": "sim-gpt-4o-mini", "stream": stream,
                    "messages": [{"role": "user", "content": f"Question {i}: reset my password, mail bob{i}@example.com"}]}  # fmt: skip
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()

        for i in range(6):
            call(i, stream=i % 2 == 1)
        deadline = time.monotonic() + 60
        while len({s["sample_id"] for s in records(data / "scores")} if (data / "scores").is_dir() else ()) < 6:
            assert time.monotonic() < deadline, proxy.output()[-3000:]
            time.sleep(0.2)  # waiting for the scorer child's files, with a deadline
        ui = UiServer(data, "--refresh", "0.3")
        _, _, body = get(f"{ui.base}/samples")
        assert count(body) == 6
        ids = listed_ids(body)
        samples = {s["id"]: s for s in records(data / "samples")}
        streamed = next(i for i in ids if samples[i]["stream"])
        _, _, page = get(f"{ui.base}/samples/{quote(streamed, safe='')}")
        assert '<mark class="redacted">[EMAIL]</mark>' in page and "@example.com" not in page
        checks = re.findall(r'<tr class="check"><td>([^<]+)</td>', page)
        assert sorted(checks) == sorted(s["check"] for s in records(data / "scores") if s["sample_id"] == streamed)
        answer = html.unescape(
            re.search(
                r'<section class="panel" id="answer"><h2>Answer</h2><div class="text">(.*?)</div>', page, re.S
            ).group(1)
        )  # type: ignore[union-attr]
        assert answer and answer == re.sub(r"<[^>]+>", "", answer)  # the stream's assembled text

        for i in range(6, 10):  # the sidecar appends to the same files while the UI runs
            call(i, stream=False)
        deadline = time.monotonic() + 60
        while json.loads(get(f"{ui.base}/healthz")[2])["samples"] < 10:
            assert time.monotonic() < deadline, get(f"{ui.base}/healthz")[2]
            time.sleep(0.2)
        assert count(get(f"{ui.base}/samples?q=Question+9")[2]) == 1

        # A two-turn chat through the proxy, no conversation header: the sidecar follows the history,
        # and the second turn's page links to the conversation, both turns in order.
        def chat(messages: list[dict]) -> str:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                data=json.dumps({"model": "sim-gpt-4o-mini", "messages": messages}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())["choices"][0]["message"]["content"]

        history = [{"role": "user", "content": "Turn one: where is parcel 4711?"}]
        history += [{"role": "assistant", "content": chat(history)}, {"role": "user", "content": "Turn two: and when?"}]
        chat(history)
        deadline = time.monotonic() + 60
        while count(get(f"{ui.base}/samples?q=turn+two")[2]) < 1:
            assert time.monotonic() < deadline, get(f"{ui.base}/healthz")[2]
            time.sleep(0.2)  # polling the state under test (the UI's refresh), with a deadline
        second = listed_ids(get(f"{ui.base}/samples?q=turn+two")[2])[0]
        first = listed_ids(get(f"{ui.base}/samples?q=turn+one")[2])[0]
        _, _, page = get(f"{ui.base}/samples/{quote(second, safe='')}")
        link = re.search(r'id="conversation-link" href="([^"]+)"', page)
        assert link and "turn 2 of 2" in page
        _, _, conversation = get(ui.base + link.group(1))
        rows = re.findall(
            r'<tr class="turn" id="turn-[^"]+"><td class=num>(\d+)</td><td><a class="sample-link" href="/samples/([^"]+)"',
            conversation,
        )
        assert rows == [("1", quote(first, safe="")), ("2", quote(second, safe=""))]
    finally:
        for proc in (ui, proxy, sim):
            if proc is not None:
                proc.stop()
