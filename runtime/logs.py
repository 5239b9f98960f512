"""Log lines of a service process: text (the default) or JSON lines (``BH_LOG_FORMAT=json``).

A JSON line carries, besides the time, level, service, logger and message, the ids of
what the line is about — ``session_id``, ``task_id``, ``operation_id`` — taken from the
``log_context`` the code around it entered (a drive, a phase, an operation's handling),
and the ``trace_id`` of the current OpenTelemetry span when there is one. Ids are
context variables, so each asyncio task carries its own and a line never borrows another
session's. Secrets are never logged in either format (tokens and keys do not enter log
calls; ``docs/security.md``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Final

#: ``BH_LOG_FORMAT``: ``text`` or ``json``
FORMAT_VARIABLE: Final = "BH_LOG_FORMAT"
TEXT_FORMAT: Final = "%(asctime)s %(name)s %(message)s"
_IDS: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "bh_log_ids", default=()
)


@contextlib.contextmanager
def log_context(**ids: str | None) -> Iterator[None]:
    """Lines logged in the block (and in tasks it starts) carry ``ids`` (None: left out)."""
    merged = {**dict(_IDS.get()), **{name: value for name, value in ids.items() if value}}
    token = _IDS.set(tuple(merged.items()))
    try:
        yield
    finally:
        _IDS.reset(token)


def json_lines() -> bool:
    return os.environ.get(FORMAT_VARIABLE, "text").strip().lower() == "json"


class JsonLines(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
            **dict(_IDS.get()),
        }
        trace = _trace_id()
        if trace is not None:
            line["trace_id"] = trace
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(service: str) -> None:
    """The process's root logger at INFO on stderr, in the ``BH_LOG_FORMAT`` format."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonLines(service) if json_lines() else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def _trace_id() -> str | None:
    try:
        from opentelemetry import trace
    except ImportError:  # tracing is optional
        return None
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None
