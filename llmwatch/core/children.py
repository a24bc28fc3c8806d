"""Child processes (the scorer, the shadow mirror): leaving when the parent is gone, and keeping off traffic's CPU."""

from __future__ import annotations

import os
import time

import structlog

from llmwatch.core.config import parse_cpu_list

log = structlog.get_logger(__name__)


def exit_when_orphaned(parent_pid: int, poll_s: float = 0.5, role: str = "scorer") -> None:
    """Exit this process as soon as the parent that spawned it is gone (killed, crashed).

    A thread, so that it also works while the main thread is busy loading the model. Re-parented,
    the child would otherwise run on, and keep multiprocessing's resource tracker running too.
    """
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    log.warning(f"{role}_parent_gone", parent_pid=parent_pid)
    os._exit(0)


def scorer_cpus(setting: str, allowed: set[int]) -> set[int] | None:
    """The CPUs the scorer child is pinned to for `scoring.cpu_affinity`, or None for no pinning.

    Lower priority alone does not protect traffic: a scorer at nice 10 on the proxy's core still
    took about 90 ms of that core per sampled call (issue 13). So by default ("auto") the child
    keeps off the first allowed CPU, the one left to the proxy, wherever there is another.
    """
    if setting == "all":
        return None
    if setting == "auto":
        if len(allowed) < 2:
            return None
        return allowed - {min(allowed)}
    wanted = parse_cpu_list(setting) & allowed
    return wanted or None  # none of them allowed here: run unpinned rather than not at all


def isolate(setting: str, nice: int, role: str = "scorer") -> None:
    """Lower this (child) process's priority and pin it per a `cpu_affinity` setting (see scorer_cpus)."""
    # Below the proxy in CPU priority wherever both share a core, and off the traffic core when
    # there is another: traffic wins and scoring lags.
    try:
        os.nice(nice)
    except OSError:
        pass
    if not hasattr(os, "sched_setaffinity"):
        return  # macOS, Windows: priority only
    try:
        cpus = scorer_cpus(setting, os.sched_getaffinity(0))
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
            log.info(f"{role}_cpus", cpus=sorted(cpus))
    except OSError as exc:
        log.warning(f"{role}_cpu_affinity_failed", setting=setting, error=str(exc))
