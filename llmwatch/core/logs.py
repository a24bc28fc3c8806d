"""structlog set-up: always on stderr (stdout is for what a command prints for people or scripts);
JSON lines for log collectors, readable console lines when a person watches the terminal."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import structlog


def configure_logging(level: str = "info", fmt: str | None = None) -> None:
    """`fmt` None: console lines when stderr is a terminal, else JSON lines (a collector reads them)."""
    if fmt is None:
        fmt = "console" if _isatty(sys.stderr) else "json"
    numeric = getattr(logging, level.upper(), logging.INFO)
    renderer = structlog.dev.ConsoleRenderer(colors=False) if fmt == "console" else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )
    # Libraries that use stdlib logging (aiohttp access log is off) go to the same stream.
    logging.basicConfig(
        level=max(numeric, logging.WARNING), stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("aiohttp.server").addFilter(_BAD_REQUEST)


class _BadRequestFilter(logging.Filter):
    """aiohttp's servers (ui, review, OTLP receiver, /metrics) log a request their parser refuses
    (a line over 8190 bytes, a bad header) as an ERROR with a traceback whose message echoes the
    first 100 bytes of the offending line: an `Authorization: Bearer` header or a `?token=` URL
    put the token in the log. Such a record becomes one line naming the refusal, no bytes of it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and type(exc).__module__ == "aiohttp.http_exceptions":
            client = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = "bad HTTP request from %s refused: %s %s (its bytes not logged)"
            record.args = (client, getattr(exc, "code", 400), type(exc).__name__)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_BAD_REQUEST = _BadRequestFilter()


class _StderrLogger:
    """structlog's PrintLogger, writing to `sys.stderr` as it is when the line is written.

    PrintLoggerFactory(file=sys.stderr) keeps the stream of the moment logging was configured, and
    loggers are cached: a stream replaced and closed since (a test's captured stderr, a daemon's
    re-opened one) made every later line raise ValueError inside the code that logged, such as the
    proxy's upstream probe or a component's stop. A line that cannot be written is dropped: a log
    must never break the work it reports on.
    """

    _lock = threading.Lock()

    def msg(self, message: str) -> None:
        with self._lock:
            try:
                print(message, file=sys.stderr, flush=True)
            except (ValueError, OSError):
                pass

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


def _stderr_logger(*_args: Any) -> _StderrLogger:
    return _StderrLogger()


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return callable(isatty) and bool(isatty())
    except ValueError:  # replaced or closed streams (tests, daemons)
        return False


class RateLimitedLog:
    """At most one log line per `every_s` for a repeating failure, with how many were suppressed.

    A full disk or an unreachable broker fails on every batch; one line per batch would flood
    the log (and the disk that is already full) without saying more than the first one.
    """

    def __init__(self, every_s: float = 10.0) -> None:
        self._every_s = every_s
        self._clock = time.monotonic
        self._last = float("-inf")
        self._suppressed = 0
        self._lock = threading.Lock()

    def __call__(self, method: Any, event: str, **fields: Any) -> bool:
        """Call `method(event, suppressed=N, **fields)` if the last line is old enough; True when logged."""
        with self._lock:
            now = self._clock()
            if now - self._last < self._every_s:
                self._suppressed += 1
                return False
            self._last = now
            suppressed, self._suppressed = self._suppressed, 0
        method(event, suppressed=suppressed, **fields)
        return True
