"""python_exec: run a Python snippet with ``exec`` and report what it printed and the
value it left in a variable named ``result``.

What the snippet prints is captured (first 256 KiB); anything written straight to file
descriptor 1 (``os.system``, a child process) is sent to stderr instead, so stdout only
ever carries this tool's one JSON document. ``result`` is reported when it is
JSON-serialisable, otherwise as ``result_repr``. An exception in the snippet fails the
run with ``{"error", "stdout", "truncated", "traceback"}``. Stdlib only; see docs/tools.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from typing import Any

STDOUT_CAP = 256 * 1024


def main() -> int:
    answer = os.dup(1)
    os.dup2(2, 1)  # stray writes to fd 1 become logs
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit(answer, {"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    code = args.get("code") if isinstance(args, dict) else None
    if not isinstance(code, str):
        return _emit(answer, {"error": "'code' must be a string of Python source"}, 1)
    report, status = _run(code)
    return _emit(answer, report, status)


def _run(code: str) -> tuple[dict[str, Any], int]:
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "<snippet>", "exec"), namespace)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            return _failure(f"the snippet exited with {stop.code!r}", printed), 1
    except BaseException as error:
        traceback.print_exc(file=sys.stderr)
        return _failure(f"{type(error).__name__}: {error}", printed), 1
    stdout, truncated = _capped(printed)
    report: dict[str, Any] = {"stdout": stdout, "truncated": truncated}
    result = namespace.get("result")
    try:
        json.dumps(result, allow_nan=False)
        report["result"] = result
    except (TypeError, ValueError, RecursionError):
        report["result"] = None
        report["result_repr"] = repr(result)[:4096]
    return report, 0


def _failure(message: str, printed: io.StringIO) -> dict[str, Any]:
    stdout, truncated = _capped(printed)
    tail = traceback.format_exc(limit=-5)[-4096:]
    return {"error": message, "stdout": stdout, "truncated": truncated, "traceback": tail}


def _capped(printed: io.StringIO) -> tuple[str, bool]:
    text = printed.getvalue()
    return text[:STDOUT_CAP], len(text) > STDOUT_CAP


def _emit(fd: int, document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    data = text.encode("utf-8", "backslashreplace") + b"\n"
    while data:
        data = data[os.write(fd, data) :]
    return status


if __name__ == "__main__":
    sys.exit(main())
