"""run_command: run ``command`` with ``/bin/sh -c`` in the session's workspace.

The workspace (``$BH_WORKSPACE``, read-write) is the working directory, so a build or a
test run sees the files the session's earlier calls left, and what it writes there
becomes the next version. With ``report`` (an artifact name), the command's output —
stdout then stderr — is published as that artifact. Like ``shell``, the tool succeeds
whenever the shell ran, whatever the command's exit code (that is the answer); it fails
only when the shell could not start. Each captured stream keeps its first 256 KiB.
Stdlib only; see docs/tools.md and docs/workspaces.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

STREAM_CAP = 256 * 1024


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    root, artifacts = os.environ.get("BH_WORKSPACE"), os.environ.get("BH_ARTIFACTS")
    if not root or not artifacts:
        return _emit({"error": "no workspace is mounted (BH_WORKSPACE, BH_ARTIFACTS)"}, 1)
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str) or not command:
        return _emit({"error": "'command' must be a non-empty string"}, 1)
    print(f"run_command: running {command[:200]!r} in {root}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", command],
            cwd=root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            # no bytecode caches in the workspace: only what the command means to write
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    except OSError as error:
        return _emit({"error": f"could not start /bin/sh: {error}"}, 1)
    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
    report = args.get("report")
    if isinstance(report, str) and report:
        Path(artifacts, report).write_bytes(done.stdout + done.stderr)
    stdout, cut_out = _text(done.stdout)
    stderr, cut_err = _text(done.stderr)
    return _emit(
        {"exit_code": code, "stdout": stdout, "stderr": stderr, "truncated": cut_out or cut_err}, 0
    )


def _text(data: bytes) -> tuple[str, bool]:
    return data[:STREAM_CAP].decode("utf-8", "replace"), len(data) > STREAM_CAP


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
