"""`llmwatch review serve` in a real Chromium: scripted reviewers score blind tasks with the keyboard,
disagree once, an arbiter resolves it, and `review import` computes the agreement from what they saved."""

from __future__ import annotations

import os
import re
import stat
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import pytest
from helpers import reviews as review_round
from helpers.browser import browser_fixture, console_errors, failed_requests, network_events, requested_urls, screenshot  # noqa: F401
from helpers.review_app import Server
from helpers.reviews import REFUSAL, V1, V2, alpha_interval_pairwise, live_traffic
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from sklearn.metrics import cohen_kappa_score

from llmwatch.agent.cli.main import main

CRITERIA = ["accuracy", "completeness", "hallucination"]
# Whatever could tell a reviewer which model wrote an answer; none of it may reach the browser.
NOTE = "alice-private-note"
BOB_SAYS = "Answer 1 gets the refund window wrong."
SECRETS = (V1, V2, "gpt-4o", "fp_", "req-", "chatcmpl", "model_version", "sample_id", "tasks.key")


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    samples = review_round.write_samples(tmp_path, live_traffic())
    config = review_round.write_config(tmp_path / "llmwatch.yaml", categories=True)
    tasks = tmp_path / "round1" / "tasks.jsonl"
    assert main(review_round.export_args(samples, config, tasks, "--n", "6", "--seed", "11")) == 0
    return tasks


def judged(answer: str) -> dict[str, int]:
    """What a careful reviewer gives an answer: refusals worst, the detailed answers best."""
    if answer == REFUSAL:
        return {"accuracy": 1, "completeness": 1, "hallucination": 5}
    if "refunded" in answer or "%" in answer:
        return {"accuracy": 5, "completeness": 4, "hallucination": 5}
    return {"accuracy": 4, "completeness": 3, "hallucination": 5}


def shown_answers(driver) -> list[str]:
    return [driver.find_element(By.CSS_SELECTOR, f"#answer-{pos} > .text").text for pos in (1, 2)]


def keyboard_verdict(driver, scores_by_position: list[dict[str, int]], extra_keys: str = "") -> str:
    """Type the scores cell by cell as the page lays them out (criterion by criterion, Answer 1 then 2), then Enter."""
    keys = "".join(str(scores_by_position[pos][c]) for c in CRITERIA for pos in (0, 1)) + extra_keys
    before = driver.current_url
    ActionChains(driver).send_keys(keys).perform()
    ActionChains(driver).send_keys(Keys.ENTER).perform()
    WebDriverWait(driver, 15).until(lambda d: d.current_url != before)
    return before


def task_id_of(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[1]


def read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def post_form(url: str, fields: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=urllib.parse.urlencode(fields).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_two_reviewers_and_an_arbiter_review_blind_in_the_browser_and_import_gives_the_expected_agreement(  # noqa: C901
    exported: Path, browser, tmp_path: Path, capsys
):
    tasks = {t["task_id"]: t for t in read_jsonl(exported)}
    order = list(tasks)
    label_of = {(tid, c["answer"]): label for tid, t in tasks.items() for label, c in t["candidates"].items()}
    # The server is given the tasks and nothing else: the key is out of its reach for the whole round.
    key = exported.with_name("tasks.key.json")
    vault = tmp_path / "vault"
    vault.mkdir()
    key.rename(vault / key.name)
    out = tmp_path / "round1" / "reviews.jsonl"
    args = ("--tasks", str(exported), "--out", str(out), "--reviewers", "alice,bob", "--arbiters", "erin")
    server = Server(tmp_path, *args)
    pages: list[str] = []
    requests: list[dict] = []

    def visit_log() -> None:
        pages.append(browser.page_source)
        events = network_events(browser)
        requests.extend(events)
        assert failed_requests(events) == [] and console_errors(browser) == []

    try:
        tokens_file = tmp_path / "round1" / "reviews.tokens.json"
        assert stat.S_IMODE(tokens_file.stat().st_mode) == 0o600
        assert set(server.links) == {"alice", "bob", "erin"}
        alice_link = server.links["alice"]

        # alice: the first open task, scored from the keyboard; a reload mid-way changes nothing.
        intended: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
        seen_order: dict[tuple[str, str], list[str]] = {}
        browser.get(alice_link)
        visit_log()
        for i in range(4):
            tid = task_id_of(browser.current_url)
            assert tid == order[i]
            answers = shown_answers(browser)
            if i == 3:
                browser.refresh()
                assert shown_answers(browser) == answers, "a reload shows the same order"
                assert browser.find_element(By.ID, "progress").text == "3 of 6 saved"
            if i == 1:
                ActionChains(browser).send_keys("45").perform()
                screenshot(browser, "review-app.png", tmp_path)
                browser.refresh()  # the half-typed verdict was never sent
            seen_order[("alice", tid)] = answers
            scores = [judged(a) for a in answers]
            intended[("alice", tid)] = {label_of[(tid, a)]: s for a, s in zip(answers, scores)}
            if i == 0:
                # A comment is typed in its box (keys there are text, not shortcuts), then saved with the button.
                ActionChains(browser).send_keys(
                    "".join(str(scores[pos][c]) for c in CRITERIA for pos in (0, 1))
                ).perform()
                browser.find_element(By.NAME, "comment").send_keys(NOTE + " 5 n p")
                before = browser.current_url
                browser.find_element(By.ID, "save").click()
                WebDriverWait(browser, 15).until(lambda d, before=before: d.current_url != before)
            else:
                keyboard_verdict(browser, scores)
            visit_log()

        # A restart keeps every link and every verdict: alice resumes at her fifth task.
        assert server.stop() == 0
        server = Server(tmp_path, *args)
        assert server.links["alice"].rsplit("/", 1)[1] == alice_link.rsplit("/", 1)[1]
        browser.get(server.links["alice"])
        assert task_id_of(browser.current_url) == order[4]
        assert browser.find_element(By.ID, "progress").text == "4 of 6 saved"
        for i in (4, 5):
            answers = shown_answers(browser)
            seen_order[("alice", order[i])] = answers
            scores = [judged(a) for a in answers]
            intended[("alice", order[i])] = {label_of[(order[i], a)]: s for a, s in zip(answers, scores)}
            keyboard_verdict(browser, scores)
            visit_log()
        assert browser.find_element(By.ID, "all-done").text == "All 6 tasks reviewed. Thank you."

        # bob: agrees within a point (he never gives 5 for hallucination), except on the third task,
        # where he rates Answer 1's accuracy two points apart from what alice gave it.
        disputed = order[2]
        browser.get(server.links["bob"])
        for tid in order:
            assert task_id_of(browser.current_url) == tid
            # Nothing of alice's verdict: no score chosen, not her comment.
            assert browser.find_elements(By.CSS_SELECTOR, "td.cell input:checked") == []
            assert NOTE not in browser.page_source
            answers = shown_answers(browser)
            seen_order[("bob", tid)] = answers
            scores = [{**judged(a), "hallucination": 4} for a in answers]
            if tid == disputed:
                a = scores[0]["accuracy"]
                scores[0]["accuracy"] = a - 2 if a > 2 else a + 2
            intended[("bob", tid)] = {label_of[(tid, a)]: s for a, s in zip(answers, scores)}
            if tid == disputed:
                # His comment numbers the answers as he saw them; the arbiter must read it in hers.
                ActionChains(browser).send_keys(
                    "".join(str(scores[pos][c]) for c in CRITERIA for pos in (0, 1))
                ).perform()
                browser.find_element(By.NAME, "comment").send_keys(BOB_SAYS)
                before = browser.current_url
                browser.find_element(By.ID, "save").click()
                WebDriverWait(browser, 15).until(lambda d, before=before: d.current_url != before)
            else:
                keyboard_verdict(browser, scores)
            visit_log()
        # The position of each answer is drawn per reviewer and task.
        assert any(seen_order[("alice", t)] != seen_order[("bob", t)] for t in order)

        # erin arbitrates the one dispute, seeing both reviews but not who wrote them.
        browser.get(server.links["erin"])
        assert browser.find_element(By.ID, "summary").text == "1 disputed task(s), 0 resolved."
        browser.find_element(By.CSS_SELECTOR, "a.dispute").click()
        assert task_id_of(browser.current_url) == disputed
        panels = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "section.review h3")]
        assert panels == ["Review 1", "Review 2"]
        reasons = [r.text for r in browser.find_elements(By.CSS_SELECTOR, ".reason")]
        assert any(
            re.match(r"Answer [12], accuracy: scores differ by 2 or more \(Review 1 \d, Review 2 \d\)", r)
            for r in reasons
        ), reasons
        src = browser.page_source
        assert "alice" not in src and "bob" not in src
        # Bob's "Answer 1" is the answer he saw first: erin reads it with her own number for it.
        bobs_first = label_of[(disputed, seen_order[("bob", disputed)][0])]
        erins = [label_of[(disputed, a)] for a in shown_answers(browser)]
        comment = browser.find_element(By.CSS_SELECTOR, "section.review p.comment").text
        if erins[0] == bobs_first:
            assert comment == BOB_SAYS
            assert "saw the answers in the same order as you" in browser.page_source
        else:
            assert comment == BOB_SAYS.replace("Answer 1", "Answer 1 [your Answer 2]", 1)
            assert "their Answer 1 is your Answer 2; their Answer 2 is your Answer 1" in browser.page_source
        screenshot(browser, "arbitration.png", tmp_path)
        answers = shown_answers(browser)
        arbitrated = [judged(a) for a in answers]
        keyboard_verdict(browser, arbitrated)
        visit_log()
        assert browser.find_element(By.ID, "summary").text == "1 disputed task(s), 1 resolved."

        # A verdict is final: a second post for a saved task is refused and nothing is appended.
        before = out.read_bytes()
        form = {f"s{p}_{c}": "3" for p in (1, 2) for c in range(3)}
        assert post_form(f"{server.links['alice']}/t/{order[0]}", form) == 409
        assert post_form(f"http://127.0.0.1:{server.port}/r/not-a-token/t/{order[0]}", form) == 404
        assert out.read_bytes() == before
    finally:
        code = server.stop()
    assert code == 0
    # The links are credentials: the server's log names reviewers, never their tokens.
    server_log = (tmp_path / "serve.stderr").read_text()
    assert "review.saved" in server_log and "alice" in server_log
    for link in server.links.values():
        assert link.rsplit("/", 1)[1] not in server_log

    # Nothing that names a model reached the browser: not in any page, not in any request.
    for src in pages:
        for secret in SECRETS:
            assert secret not in src, secret
    sent = [e["params"]["request"] for e in requests if e["method"] == "Network.requestWillBeSent"]
    assert sent and all(r["url"].startswith(("http://127.0.0.1:", "data:")) for r in sent), "no CDN, no other host"
    for r in sent:
        for secret in SECRETS:
            assert secret not in r["url"] and secret not in r.get("postData", ""), secret
    assert any("postData" in r for r in sent)
    assert all(u.startswith(("http://127.0.0.1:", "data:")) for u in requested_urls(requests))

    # The saved records: one line per verdict, in review-import format, mapped back to A/B by the server.
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    records = read_jsonl(out)
    assert len(records) == 12
    for r in records:
        assert r["blind"] is True and r["candidates"] == ["A", "B"] and r["category"] == tasks[r["task_id"]]["category"]
        assert r["scores"] == intended[(r["judge"], r["task_id"])]
    assert [r.get("comment") for r in records if r["judge"] == "alice"] == [NOTE + " 5 n p"] + [None] * 5
    arbitration = read_jsonl(tmp_path / "round1" / "reviews.arbitration-verdicts.jsonl")
    assert [(a["task_id"], a["judge"], a["arbitration"]) for a in arbitration] == [(disputed, "erin", True)]
    assert arbitration[0]["scores"] == {label_of[(disputed, a)]: s for a, s in zip(answers, arbitrated)}

    # review import reads them as they are and finds the agreement computed independently here.
    (vault / key.name).rename(key)
    report_path = tmp_path / "review-report.json"
    assert (
        main(
            [
                "review",
                "import",
                "--tasks",
                str(exported),
                "--reviews",
                str(out),
                "--out",
                str(report_path),
                "--level",
                "interval",
            ]
        )
        == 0
    )
    capsys.readouterr()
    report = orjson.loads(report_path.read_bytes())
    assert report["reviewers"] == ["alice", "bob"] and report["reviews"] == 12
    assert report["disputed"] == [disputed]
    for criterion in CRITERIA:
        pairs = [
            (intended[("alice", t)][label][criterion], intended[("bob", t)][label][criterion])
            for t in order
            for label in ("A", "B")
        ]
        got = report["agreement"][criterion]
        assert got["krippendorff_alpha"] == pytest.approx(alpha_interval_pairwise(pairs)), criterion
        kappa = cohen_kappa_score(
            [a for a, _ in pairs], [b for _, b in pairs], weights="quadratic", labels=[1, 2, 3, 4, 5]
        )
        assert got["cohen_kappa"]["alice|bob"]["kappa_quadratic"] == pytest.approx(kappa), criterion
        assert got["n_items"] == 12
    assert (
        report["agreement"]["hallucination"]["krippendorff_alpha"] < 0
    )  # 5 against 4, always: no agreement beyond chance
    # The arbitrated verdict is itself a review line `review import` accepts.
    arb_report = tmp_path / "arbitrated-report.json"
    assert (
        main(
            [
                "review",
                "import",
                "--tasks",
                str(exported),
                "--reviews",
                str(tmp_path / "round1" / "reviews.arbitration-verdicts.jsonl"),
                "--out",
                str(arb_report),
            ]
        )
        == 0
    )
    assert orjson.loads(arb_report.read_bytes())["reviewers"] == ["erin"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--reviewers", "2", "--listen", "localhost"], "--listen 'localhost': expected HOST:PORT"),
        (["--reviewers", "2", "--listen", "127.0.0.1:\u00b2"], "--listen '127.0.0.1:\u00b2': expected HOST:PORT"),
        (["--reviewers", "\u00b2"], "--reviewers: '\u00b2' is not a usable name"),
        (["--reviewers", "alice,al ice"], "--reviewers: 'al ice' is not a usable name"),
        (["--reviewers", "alice,alice"], "--reviewers: a name is given twice"),
        ([], "no reviewer: pass --reviewers alice,bob"),
    ],
)
def test_bad_serve_arguments_are_refused_with_the_fix(exported: Path, tmp_path: Path, capsys, args, message):
    assert main(["review", "serve", "--tasks", str(exported), "--out", str(tmp_path / "r.jsonl"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.tokens.json").exists() and not (tmp_path / "r.jsonl").exists()


def test_a_bad_line_in_the_reviews_file_is_refused_naming_the_line(exported: Path, tmp_path: Path, capsys):
    # A whole line that is not JSON is damage nobody can undo for the reviewer: refused, named.
    # (A torn last line, what a kill mid-write leaves, is cut at start: tests/integration/test_review_serve_faults.py.)
    out = tmp_path / "r.jsonl"
    out.write_bytes(b'{"task_id": "T-0001", "category"\n')
    assert main(["review", "serve", "--tasks", str(exported), "--out", str(out), "--reviewers", "1"]) == 2
    assert f"{out}:1: not valid JSON" in capsys.readouterr().err


def test_tokens_are_kept_across_runs_and_only_new_names_get_new_ones(tmp_path: Path):
    from llmwatch.agent.apps.review import load_or_make_tokens

    path = tmp_path / "r.tokens.json"
    first = load_or_make_tokens(path, ["alice"], [])
    second = load_or_make_tokens(path, ["alice", "bob"], ["carol"])
    assert second["reviewers"]["alice"] == first["reviewers"]["alice"]
    assert len({second["reviewers"]["alice"], second["reviewers"]["bob"], second["arbiters"]["carol"]}) == 3
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_on_a_narrow_screen_the_two_answers_stack_instead_of_squeezing_side_by_side(exported: Path, browser, tmp_path):
    server = Server(tmp_path, "--tasks", str(exported), "--out", str(tmp_path / "r.jsonl"), "--reviewers", "alice")
    try:
        browser.get(server.links["alice"])
        boxes = "return [1, 2].map(p => document.getElementById('answer-' + p).getBoundingClientRect().toJSON())"
        wide = browser.execute_script(boxes)
        assert wide[1]["left"] >= wide[0]["right"] and wide[1]["top"] == wide[0]["top"]  # side by side at 1280 px
        browser.set_window_size(420, 900)
        WebDriverWait(browser, 10).until(lambda d: d.execute_script("return window.innerWidth") <= 420)
        narrow = browser.execute_script(boxes)
        assert narrow[1]["top"] >= narrow[0]["bottom"], narrow  # Answer 2 below Answer 1
        assert narrow[0]["width"] > 300  # each answer the width of the screen, not half of it
    finally:
        server.stop()
