"""`llmwatch review serve` under hostile input and a full disk, as a real process on loopback.

A verdict is saved whole or not at all (a full disk costs that one verdict, said so, and the retry
saves it; the round is never corrupt); the files and the directory it makes are private and never
written through a planted link; every answer, errors included, carries the security headers and
bad input gets a 400 that names the problem; one person cannot both review and arbitrate.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import pytest
from helpers.review_app import Server
from helpers.reviews import export_args, live_traffic, write_config, write_samples
from helpers.tmpfs import fill, small_tmpfs

CLI = [sys.executable, "-m", "llmwatch.agent.cli"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    samples = write_samples(tmp_path, live_traffic())
    config = write_config(tmp_path / "llmwatch.yaml")
    out = tmp_path / "round1" / "tasks.jsonl"
    done = cli(*export_args(samples, config, out, "--n", "6", "--seed", "11"))
    assert done.returncode == 0, done.stderr
    return out


def task_list(tasks: Path) -> list[dict]:
    return [orjson.loads(line) for line in tasks.read_bytes().splitlines() if line.strip()]


def verdict(task: dict, comment: str = "") -> dict[str, str]:
    lo, _ = task.get("scale") or [1, 5]
    fields = {f"s{pos}_{ci}": str(lo + 2) for ci in range(len(task["criteria"])) for pos in (1, 2)}
    fields["preferred"] = "tie"
    if comment:
        fields["comment"] = comment
    return fields


def post(url: str, body: bytes, content_type: str = "application/x-www-form-urlencoded") -> tuple[int, dict, str]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode("utf-8", "replace")


def get(url: str, method: str = "GET") -> tuple[int, dict, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode("utf-8", "replace")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a 303 after a save is the answer, not a page to fetch
        return None


def save(url: str, fields: dict[str, str]) -> tuple[int, str]:
    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, data=urllib.parse.urlencode(fields).encode(), method="POST")
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def whole_lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"torn tail: {data[-80:]!r}"
    return [orjson.loads(line) for line in data.splitlines()]


def test_a_full_disk_costs_one_verdict_said_so_and_the_retry_and_a_restart_find_the_round_whole(
    tasks: Path, tmp_path: Path
):
    [t1, t2, t3, *_] = task_list(tasks)
    with small_tmpfs(tmp_path / "disk", "512k") as disk:
        out = disk / "reviews.jsonl"
        server = Server(tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice")
        try:
            base = server.links["alice"]
            # Two verdicts whose comments bring the file to just under a 4 KiB page, so that the
            # third line straddles a page the full disk cannot give: a short write, then ENOSPC.
            assert save(f"{base}/t/{t1['task_id']}", verdict(t1, "a" * 2000))[0] == 303
            line = out.stat().st_size
            target = 4096 - 120  # the next line (~300 bytes) crosses the page boundary
            assert save(f"{base}/t/{t2['task_id']}", verdict(t2, "b" * (target - line - (line - 2000))))[0] == 303
            before = out.read_bytes()
            assert 3600 < len(before) < 4096, len(before)
            filler = fill(disk)
            status, body = save(f"{base}/t/{t3['task_id']}", verdict(t3))
            assert status == 503 and "disk is full" in body and "nothing of this verdict was recorded" in body
            assert out.read_bytes() == before, "a failed save leaves no torn bytes behind"
            filler.unlink()
            assert save(f"{base}/t/{t3['task_id']}", verdict(t3))[0] == 303
            saved = whole_lines(out)
            assert [r["task_id"] for r in saved] == [t1["task_id"], t2["task_id"], t3["task_id"]]
        finally:
            server.stop()
        # A restart reads the round whole: every verdict, nothing glued.
        server = Server(tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice")
        try:
            status, _, page = get(f"{server.links['alice']}/t/{t3['task_id']}")
            assert status == 200 and 'id="saved"' in page
        finally:
            server.stop()


def test_a_torn_last_line_left_by_a_killed_writer_is_cut_at_start_and_named(tasks: Path, tmp_path: Path):
    [t1, *_] = task_list(tasks)
    out = tmp_path / "r.jsonl"
    server = Server(tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice")
    try:
        assert save(f"{server.links['alice']}/t/{t1['task_id']}", verdict(t1))[0] == 303
    finally:
        server.stop()
    whole = out.read_bytes()
    out.write_bytes(whole + b'{"task_id": "T-0002", "categ')  # what a kill mid-write leaves
    server = Server(tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice")
    server.stop()
    assert out.read_bytes() == whole
    assert b"review.torn_line_cut" in (tmp_path / "serve.stderr").read_bytes()


def test_the_out_directory_it_creates_is_private_and_so_are_its_files(tasks: Path, tmp_path: Path):
    [t1, *_] = task_list(tasks)
    os.umask(old := os.umask(0o022))
    try:
        out = tmp_path / "new" / "round" / "reviews.jsonl"
        server = Server(
            tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice", "--arbiters", "carol"
        )
        try:
            assert save(f"{server.links['alice']}/t/{t1['task_id']}", verdict(t1))[0] == 303
        finally:
            server.stop()
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(tmp_path / "new") == mode(tmp_path / "new" / "round") == 0o700
    assert {p.name: mode(p) for p in out.parent.iterdir()} == {"reviews.jsonl": 0o600, "reviews.tokens.json": 0o600}


def test_a_planted_link_at_the_out_file_is_refused_and_its_target_untouched(tasks: Path, tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"not yours\n")
    victim.chmod(0o644)
    out = tmp_path / "r.jsonl"
    out.symlink_to(victim)
    done = cli("review", "serve", "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice")
    assert done.returncode == 2 and "symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert victim.read_bytes() == b"not yours\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not (tmp_path / "r.tokens.json").exists(), "refused before anything is written"
    # The tokens file too: a link planted there is refused, never read or written through.
    out.unlink()
    tokens = tmp_path / "r.tokens.json"
    tokens.symlink_to(victim)
    done = cli("review", "serve", "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice")
    assert done.returncode == 2 and "symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert victim.read_bytes() == b"not yours\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_a_form_that_is_not_utf8_gets_a_400_naming_it_and_every_answer_carries_the_security_headers(
    tasks: Path, tmp_path: Path
):
    [t1, *_] = task_list(tasks)
    out = tmp_path / "r.jsonl"
    server = Server(tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice")
    try:
        base = server.links["alice"]
        root = base.split("/r/")[0]
        answers = {
            "not utf-8": post(f"{base}/t/{t1['task_id']}", b"s1_0=3&comment=\xff\xfe\xfa"),
            "unknown link": get(f"{root}/r/not-a-token"),
            "no such route": get(f"{root}/nothing-here"),
            "wrong method": get(f"{base}/t/{t1['task_id']}", method="DELETE"),
            "too large": post(f"{base}/t/{t1['task_id']}", b"comment=" + b"x" * (2 << 20)),
            "page": get(f"{base}/t/{t1['task_id']}"),
            # str.isdigit() takes a superscript two, which int() refuses: Python's words, not the fix.
            "superscript score": post(
                f"{base}/t/{t1['task_id']}", urllib.parse.urlencode({**verdict(t1), "s1_0": "\u00b2"}).encode()
            ),
            "superscript preference": post(
                f"{base}/t/{t1['task_id']}", urllib.parse.urlencode({**verdict(t1), "preferred": "\u00b9"}).encode()
            ),
        }
        status, _, body = answers["not utf-8"]
        assert status == 400 and "not valid UTF-8" in body and "Traceback" not in body
        status, _, body = answers["superscript score"]
        assert status == 400 and "Answer 1, accuracy: choose a score from 1 to 5" in body and "int()" not in body
        status, _, body = answers["superscript preference"]
        assert status == 400 and "preferred: Answer 1, Answer 2, tie or no preference" in body
        assert [answers[k][0] for k in ("unknown link", "no such route", "wrong method", "too large", "page")] == [
            404,
            404,
            405,
            413,
            200,
        ]
        for name, (_status, headers, _) in answers.items():
            assert "default-src 'none'" in headers.get("Content-Security-Policy", ""), name
            assert headers.get("Cache-Control") == "no-store", name
            assert headers.get("X-Content-Type-Options") == "nosniff", name
        assert not out.exists() or whole_lines(out) == []
    finally:
        server.stop()
    assert b"Traceback" not in (tmp_path / "serve.stderr").read_bytes()


@pytest.mark.parametrize(
    "reviewers, arbiters, earlier",
    [("r1,r2", "r1", None), ("r1,r2", "carol,r2", None), ("r1,r2", "r3", "r3")],
)
def test_one_person_cannot_both_review_and_arbitrate(tasks: Path, tmp_path: Path, reviewers, arbiters, earlier):
    out = tmp_path / "r.jsonl"
    if earlier is not None:
        # r3 reviewed in an earlier run of this round: the tokens file remembers.
        server = Server(tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", earlier)
        server.stop()
    tokens_before = (tmp_path / "r.tokens.json").read_bytes() if earlier else None
    done = cli(
        "review", "serve", "--tasks", str(tasks), "--out", str(out), "--reviewers", reviewers, "--arbiters", arbiters
    )
    assert done.returncode == 2, done.stderr
    both = sorted(set(reviewers.split(",") + ([earlier] if earlier else [])) & set(arbiters.split(",")))
    assert f"{', '.join(both)} would be both reviewer and arbiter" in done.stderr and "Traceback" not in done.stderr
    if earlier is None:
        assert not (tmp_path / "r.tokens.json").exists()
    else:
        assert (tmp_path / "r.tokens.json").read_bytes() == tokens_before


def test_a_port_in_use_is_one_line_naming_the_address_and_the_flag_like_the_proxy(tasks: Path, tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        done = cli(
            "review", "serve", "--tasks", str(tasks), "--out", str(tmp_path / "r.jsonl"),
            "--reviewers", "alice", "--listen", address,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on {address} (--listen): " in done.stderr and "in use" in done.stderr
    assert "port 0 picks a free one" in done.stderr
    for noise in ("Traceback", "Errno", "Unclosed"):
        assert noise not in done.stderr, done.stderr


def _fields(task: dict, scores: dict[int, int]) -> dict[str, str]:
    """A verdict giving position `pos` the score `scores[pos]` on every criterion, preferring neither."""
    out = {f"s{pos}_{ci}": str(scores[pos]) for ci in range(len(task["criteria"])) for pos in (1, 2)}
    out["preferred"] = "tie"
    return out


@pytest.mark.parametrize("round_begun_before", [False, True])
def test_the_arbiter_reads_a_comment_in_their_own_numbering_and_verdicts_go_to_a_clearly_named_file(
    tasks: Path, tmp_path: Path, round_begun_before: bool
):
    from llmwatch.agent.apps.review import positions

    # A task that alice and the arbiter see in different orders: her "answer 1" is carol's Answer 2.
    task = next(t for t in task_list(tasks) if positions("alice", t["task_id"]) != positions("carol", t["task_id"]))
    tid = task["task_id"]
    meant = positions("alice", tid)[0]
    carol_pos = positions("carol", tid).index(meant) + 1
    assert carol_pos == 2
    out = tmp_path / "r.jsonl"
    old = tmp_path / "r.arbitrated.jsonl"
    if round_begun_before:
        old.touch(mode=0o600)  # a round started before the rename: its verdicts file keeps its name
    server = Server(
        tmp_path, "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice,bob", "--arbiters", "carol"
    )
    try:
        comment = "Answer 1 is wrong about the refund window; answer 2 is fine. Reply #1 also invents a fee."
        alice = {**_fields(task, {1: 1, 2: 5}), "comment": comment}
        assert save(f"{server.links['alice']}/t/{tid}", alice)[0] == 303
        assert save(f"{server.links['bob']}/t/{tid}", _fields(task, {1: 4, 2: 4}))[0] == 303  # 3 points apart: disputed
        status, _, page = get(f"{server.links['carol']}/t/{tid}")
        assert status == 200
        # The words as written, each reference followed by the arbiter's number for the same answer.
        assert (
            'Answer 1 <mark class="ref">[your Answer 2]</mark> is wrong about the refund window; '
            'answer 2 <mark class="ref">[your Answer 1]</mark> is fine. '
            'Reply #1 <mark class="ref">[your Answer 2]</mark> also invents a fee.'
        ) in page
        assert (
            "This reviewer saw the answers in another order: their Answer 1 is your Answer 2; their Answer 2 is your Answer 1."
            in page
        )
        # Bob's review has no comment; nothing is said about his order.
        assert page.count('class="their-order"') == 1
        assert save(f"{server.links['carol']}/t/{tid}", _fields(task, {1: 2, 2: 5}))[0] == 303
    finally:
        server.stop()
    new = tmp_path / "r.arbitration-verdicts.jsonl"
    written, absent = (old, new) if round_begun_before else (new, old)
    assert [(r["task_id"], r["judge"], r["arbitration"]) for r in whole_lines(written)] == [(tid, "carol", True)]
    assert not absent.exists()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
