"""JSON log lines carry the ids of the context they were logged in, and only those: two
asyncio tasks logging at once never borrow each other's session."""

from __future__ import annotations

import asyncio
import json
import logging

from runtime.logs import JsonLines, log_context


def _line(formatter: JsonLines, message: str) -> dict[str, object]:
    record = logging.LogRecord("brain.drive", logging.WARNING, __file__, 1, message, (), None)
    parsed: dict[str, object] = json.loads(formatter.format(record))
    return parsed


async def test_each_task_logs_its_own_ids() -> None:
    formatter = JsonLines("brain")
    seen: dict[str, dict[str, object]] = {}

    async def drive(session: str) -> None:
        with log_context(session_id=session):
            await asyncio.sleep(0)
            with log_context(task_id=f"{session}.root", operation_id=None):
                await asyncio.sleep(0)
                seen[session] = _line(formatter, f"driving {session}")

    await asyncio.gather(drive("s1"), drive("s2"))
    for session in ("s1", "s2"):
        line = seen[session]
        assert line["session_id"] == session and line["task_id"] == f"{session}.root"
        assert "operation_id" not in line and line["service"] == "brain"
        assert line["level"] == "warning" and line["message"] == f"driving {session}"
    assert "session_id" not in _line(formatter, "outside")
