"""run_command: run ``argv`` or a ``command`` line in the workspace and report its exit
code and the tails of its stdout and stderr.

The tool succeeds whenever the program ran, whatever its exit code (that is the
command's answer: failing tests are a result, not the tool's failure); it fails only
when there is no workspace or the program could not start. Each stream keeps its last
64 KiB (a test run's summary is at its end). Stdlib only; see docs/tools.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

TAIL = 64 * 1024


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    workspace = os.environ.get("BH_WORKSPACE")
    if not workspace or not os.path.isdir(workspace):
        return _emit({"error": "no workspace is mounted (BH_WORKSPACE)"}, 1)
    argv = _argv(args if isinstance(args, dict) else {})
    if argv is None:
        return _emit({"error": "give 'argv' (a non-empty list of strings) or 'command'"}, 1)
    print(f"run_command: running {argv!r:.200}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(
            argv, cwd=workspace, stdin=subprocess.DEVNULL, capture_output=True, check=False
        )
    except OSError as error:
        return _emit({"error": f"could not start {argv[0]!r}: {error}"}, 1)
    # A program killed by signal N reports 128 + N, as a shell would.
    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
    stdout, cut_out = _tail(done.stdout)
    stderr, cut_err = _tail(done.stderr)
    report = {"exit_code": code, "stdout": stdout, "stderr": stderr}
    return _emit({**report, "truncated": cut_out or cut_err}, 0)


def _argv(args: dict[str, Any]) -> list[str] | None:
    argv, command = args.get("argv"), args.get("command")
    if (argv is None) == (command is None):
        return None
    if command is not None:
        return ["/bin/sh", "-c", command] if isinstance(command, str) and command else None
    if isinstance(argv, list) and argv and all(isinstance(part, str) for part in argv):
        return argv
    return None


def _tail(data: bytes) -> tuple[str, bool]:
    return data[-TAIL:].decode("utf-8", "replace"), len(data) > TAIL


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
