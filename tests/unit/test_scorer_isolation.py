"""The scorer child keeps off the core that serves traffic: pinned away from it and at lower priority.

Lower priority alone does not protect the proxy (issue 13: a scorer at nice 10 on the proxy's
core took ~90 ms of it per sampled call), so by default the child runs on every allowed CPU but
the first, which is left to the proxy, whenever there are two or more.
"""

import os

import pytest

from llmwatch.agent.components import load_config
from llmwatch.agent.processes.scoring import ScorerProcess
from llmwatch.core.children import scorer_cpus
from llmwatch.core.config import ConfigError
from llmwatch.scorers.checks.config import ScoringSection

linux_only = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux-only")


def test_auto_leaves_the_first_allowed_cpu_to_traffic_when_there_is_another():
    assert scorer_cpus("auto", {0, 1}) == {1}
    assert scorer_cpus("auto", {2, 3, 5}) == {3, 5}
    assert scorer_cpus("auto", {4}) is None  # one CPU: shared, at lower priority only
    assert scorer_cpus("all", {0, 1}) is None
    assert scorer_cpus("1,3-4", {0, 1, 2, 3, 4}) == {1, 3, 4}
    assert scorer_cpus("7", {0, 1}) is None  # not allowed here: unpinned rather than not at all


def test_a_bad_cpu_list_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "llmwatch.yaml"
    path.write_text("upstream: http://127.0.0.1:9/\nscoring:\n  cpu_affinity: 'cores 2'\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "cpu_affinity" in str(err.value) and "1-3" in str(err.value)


def _child_state(pid: int) -> tuple[str, int]:
    with open(f"/proc/{pid}/status") as f:
        allowed = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list:"))
    with open(f"/proc/{pid}/stat") as f:
        nice = int(f.read().rsplit(")", 1)[1].split()[16])
    return allowed, nice


def _parse(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


@linux_only
@pytest.mark.parametrize("setting", ["auto", "all"])
def test_the_real_scorer_child_runs_pinned_and_niced(setting):
    cfg = ScoringSection(embeddings=False, cpu_affinity=setting)
    scorer = ScorerProcess(cfg.model_dump(mode="json"), lambda *a: None, max_pending=10, batch_timeout_s=60.0)
    scorer.start()
    try:
        assert scorer.ready.wait(60.0), scorer.fatal
        # Ready is sent after the child pinned itself; read what the kernel says of it.
        allowed, nice = _child_state(scorer.pid)
        here = os.sched_getaffinity(0)
        expected = scorer_cpus(setting, here) or here
        assert _parse(allowed) == expected
        assert nice >= cfg.nice
        if setting == "auto" and len(here) > 1:
            assert min(here) not in _parse(allowed)
    finally:
        scorer.close(timeout=1.0)


@pytest.mark.parametrize(("written", "kept"), [("1", "1"), ("[1, 3]", "1,3"), ("'2-3'", "2-3"), ("auto", "auto")])
def test_cpu_lists_are_taken_as_yaml_and_the_environment_type_them(tmp_path, written, kept):
    path = tmp_path / "llmwatch.yaml"
    path.write_text(f"upstream: http://127.0.0.1:9/\nscoring:\n  cpu_affinity: {written}\n")
    assert load_config(path).scoring.cpu_affinity == kept
    assert (
        load_config(
            None, environ={"LLMWATCH_SCORING__CPU_AFFINITY": "0", "LLMWATCH_UPSTREAM": "http://127.0.0.1:9/"}
        ).scoring.cpu_affinity
        == "0"
    )
