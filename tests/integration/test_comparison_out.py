"""`drift --out` and `canary --out` write the JSON report with any --format, as `report --out` does.

Before, --out was read for --format html only: `drift --format json --out drift.json` printed the
report and wrote nothing, silently. Real files and the real command (`main`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from helpers.samples import write_jsonl
from synthetic import Behaviour, window  # noqa: E402

from llmwatch.agent.cli.main import main  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("comparison-out")
    rng = np.random.default_rng(5)
    base, base_scores, _ = window(rng, 200, Behaviour(), version="v1", prefix="base")
    cur, cur_scores, _ = window(rng, 200, Behaviour(latency_ms=1900.0), version="v2", prefix="cur")
    write_jsonl(root / "samples" / "samples-20261201-0000.jsonl", [*base, *cur])
    write_jsonl(root / "scores" / "scores-20261201-0000.jsonl", [*base_scores, *cur_scores])
    (root / "llmwatch.yaml").write_text(yaml.safe_dump({"scoring": {"embeddings": False}}))
    freeze = ["baseline", "freeze", "--config", str(root / "llmwatch.yaml"), "--samples", str(root / "samples")]
    freeze += ["--scores", str(root / "scores"), "--model-version", "v1", "--out", str(root / "b.json")]
    assert main(freeze) == 0
    return root


def _drift(root: Path, *extra: str) -> list[str]:
    return [
        "drift",
        *("--config", str(root / "llmwatch.yaml"), "--baseline", str(root / "b.json")),
        *("--samples", str(root / "samples"), "--scores", str(root / "scores"), "--model-version", "v2"),
        *extra,
    ]


def _canary(root: Path, *extra: str) -> list[str]:
    return [
        "canary",
        *("--config", str(root / "llmwatch.yaml"), "--samples", str(root / "samples")),
        *("--scores", str(root / "scores"), "--stable", "v1", "--canary", "v2"),
        *extra,
    ]


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("command", [_drift, _canary])
def test_out_writes_the_json_report_whatever_the_format(data: Path, tmp_path: Path, capsys, fmt, command):
    out = tmp_path / "report.json"
    code = main(command(data, "--format", fmt, "--out", str(out)))
    printed = capsys.readouterr().out
    assert out.exists(), "--out was ignored"
    report = json.loads(out.read_text())
    assert report["exit_code"] == code and report["signals"]
    if fmt == "json":
        assert json.loads(printed) == report
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_a_directory_as_out_is_refused_before_the_comparison(data: Path, tmp_path: Path, capsys):
    assert main(_drift(data, "--out", str(tmp_path))) == 2
    assert f"--out {tmp_path} is a directory; give a file name inside it" in capsys.readouterr().err
