"""structlog set-up: JSON lines on stderr by default, readable console output on request."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", fmt: str = "json") -> None:
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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Libraries that use stdlib logging (aiohttp access log is off) go to the same stream.
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
