"""The credentials llmwatch sends its own upstream never reach a stored sample.

The primary upstream's URL may carry `user:password`, which the proxy sends as Basic auth. An
upstream that quotes it back in an error body ("Incorrect password provided for svc: <password>"),
in a shape no redaction pattern knows, left it in every sample, and always with redaction off.
The client still gets the answer byte for byte; the sample keeps `***` in its place.
"""

from __future__ import annotations

import asyncio
import base64
import glob
import json
import os
import subprocess
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web
from helpers.agents import wait_until
from helpers.procs import proxy_argv
from helpers.upstreams import serve

PASSWORD = "Pr1mary-Pass.77"  # no redaction pattern's shape


def _quoting_upstream() -> web.Application:
    """Refuses every call with 401 and quotes the password of the Basic credentials it was sent."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        user, _, password = base64.b64decode(token).decode().partition(":") if scheme == "Basic" else ("", "", "")
        body = {"error": {"message": f"Incorrect password provided for {user}: {password}", "type": "auth_error"}}
        return web.Response(status=401, body=orjson.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _wait_logged(log: Path, proc: subprocess.Popen, event: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for line in log.read_text().splitlines():
            if f'"{event}"' in line:
                return json.loads(line)
        await asyncio.sleep(0.05)
    raise AssertionError(log.read_text())


@pytest.mark.parametrize("redaction", [True, False], ids=["redaction-on", "redaction-off"])
async def test_an_upstream_quoting_the_password_llmwatch_sent_it_leaves_no_trace_in_samples(tmp_path, redaction):
    runner, primary = await serve(_quoting_upstream())
    cfg = tmp_path / "llmwatch.yaml"
    cfg.write_text(
        yaml.safe_dump({"sampling": {"rate": 1.0}, "scoring": {"enabled": False}, "redaction": {"enabled": redaction}})
    )
    data, log = tmp_path / "data", tmp_path / "proxy.log"
    upstream = primary.replace("http://", f"http://svc:{PASSWORD}@")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            proxy_argv(upstream, data, "--config", str(cfg)),
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    sample_files = lambda: glob.glob(str(data / "samples" / "**" / "*.jsonl"), recursive=True)  # noqa: E731
    try:
        port = (await _wait_logged(log, proc, "agent_started"))["proxy_port"]
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "bread?"}]},
                ) as r:
                    # Relayed as it is: the client sees its upstream's own words.
                    assert r.status == 401 and PASSWORD in await r.text()
        await wait_until(lambda: sum(1 for p in sample_files() for _ in open(p)) >= 3, timeout=60)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        await runner.cleanup()
    samples = [json.loads(line) for p in sample_files() for line in open(p)]
    assert len(samples) >= 3
    for sample in samples:
        assert sample["status"] == 401
        message = sample["response"]["error"]["message"]
        assert message == "Incorrect password provided for svc: ***", message
    stored = "".join(
        Path(p).read_text() for p in glob.glob(str(data / "**" / "*"), recursive=True) if Path(p).is_file()
    )
    assert PASSWORD not in stored
    assert PASSWORD not in log.read_text()
