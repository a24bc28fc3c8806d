"""Log lines go to the stderr of the moment, and a stream that is gone never breaks the caller."""

from __future__ import annotations

import io
import sys

import structlog

from llmwatch.core.logs import configure_logging


def test_a_line_goes_to_the_current_stderr_and_a_closed_one_is_no_error(monkeypatch):
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info", "json")
    log = structlog.get_logger("llmwatch.test.logs")
    log.info("one")  # the logger is made and cached here, with `first` as stderr
    assert '"event": "one"' in first.getvalue()

    first.close()  # a test's captured stream, or a daemon's, replaced and closed
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    log.warning("two")  # raised ValueError into the caller with PrintLoggerFactory(file=sys.stderr)
    assert '"event": "two"' in second.getvalue()

    second.close()
    log.error("three")  # nowhere to write: dropped, not raised
