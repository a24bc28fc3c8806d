"""The credentials llmwatch sends its own upstream never reach a stored sample.

The primary upstream's URL may carry `user:password`, which the proxy sends as Basic auth. An
upstream that quotes it back in an error body ("Incorrect password provided for svc: <password>"),
in a shape no redaction pattern knows, left it in every sample, and always with redaction off.
The client still gets the answer byte for byte; the sample keeps `***` in its place.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import aiohttp
import pytest
import yaml
from helpers.agents import wait_until
from helpers.procs import logged, proxy_process
from helpers.upstreams import quoting_app, serve

PASSWORD = "Pr1mary-Pass.77"  # no redaction pattern's shape


@pytest.mark.parametrize("redaction", [True, False], ids=["redaction-on", "redaction-off"])
async def test_an_upstream_quoting_the_password_llmwatch_sent_it_leaves_no_trace_in_samples(tmp_path, redaction):
    runner, primary = await serve(quoting_app())
    cfg = tmp_path / "llmwatch.yaml"
    cfg.write_text(
        yaml.safe_dump({"sampling": {"rate": 1.0}, "scoring": {"enabled": False}, "redaction": {"enabled": redaction}})
    )
    data, log = tmp_path / "data", tmp_path / "proxy.log"
    upstream = primary.replace("http://", f"http://svc:{PASSWORD}@")
    proc = proxy_process(cfg, upstream, data, log)
    sample_files = lambda: glob.glob(str(data / "samples" / "**" / "*.jsonl"), recursive=True)  # noqa: E731
    try:
        port = (await logged(log, proc, "agent_started"))["agent_started"]["proxy_port"]
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
