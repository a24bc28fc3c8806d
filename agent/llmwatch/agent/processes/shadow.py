"""The mirror child: shadow evaluation's sending, timing, pairing and writing, off the proxy's process.

Spawned by `ShadowMirror.start` (collectors/llmwatch/collectors/shadow/mirror.py), which is handed `child_main` by the runtime:
the collectors layer cannot import the agent's process helpers, and this entry point needs them.
Like the scorer child (agent/llmwatch/agent/processes/scoring.py), it ignores Ctrl-C (the parent decides when it stops),
exits by itself when its parent is gone, and is pinned off the proxy's core (`shadow.cpu_affinity`,
`shadow.nice`).

`headers` are the candidates' resolved header values (secrets among them): they arrive through the
spawn's pipe, live in this process's memory only, and are never logged.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, Sequence

from llmwatch.agent.processes.scoring import exit_when_orphaned, isolate
from llmwatch.core.config import Config


def child_main(
    cfg: Config,
    headers: Sequence[dict[str, str]],
    inbox: Any,
    outbox: Any,
    pairs_to_parent: bool,
    parent_pid: int | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:
        threading.Thread(
            target=exit_when_orphaned,
            args=(parent_pid, 0.5, "shadow_mirror"),
            name="llmwatch-shadow-orphan-check",
            daemon=True,
        ).start()
    from llmwatch.collectors.shadow.mirror import ShadowWorker, framed_sender
    from llmwatch.core.logs import configure_logging

    # As the parent's CLI does: JSON lines unless a format was configured or stderr is a terminal.
    configure_logging(cfg.logging.level, cfg.logging.format if "format" in cfg.logging.model_fields_set else None)
    isolate(cfg.shadow.cpu_affinity, cfg.shadow.nice, role="shadow_mirror")
    # The event loop takes the candidate's timestamps while the writer thread scores pairs: with
    # the default 5 ms switch interval a chunk could wait that long for the GIL and read as a
    # slower candidate (the proxy's process sets the same interval for the same reason).
    sys.setswitchinterval(0.0005)
    ShadowWorker(cfg, headers, framed_sender(outbox), pairs_to_parent=pairs_to_parent).run(inbox)
