"""shell: run ``command`` with ``/bin/sh -c`` and report its exit code, stdout and stderr.

The tool itself succeeds whenever the shell ran, whatever the command's exit code (that
is the command's answer, not the tool's failure); it fails only when the shell could not
start. Each captured stream keeps its first 256 KiB. Stdlib only; see docs/tools.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

STREAM_CAP = 256 * 1024


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str) or not command:
        return _emit({"error": "'command' must be a non-empty string"}, 1)
    print(f"shell: running {command[:200]!r}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, capture_output=True, check=False
        )
    except OSError as error:
        return _emit({"error": f"could not start /bin/sh: {error}"}, 1)
    # A command killed by signal N reports 128 + N, as a shell would.
    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
    stdout, cut_out = _text(done.stdout)
    stderr, cut_err = _text(done.stderr)
    truncated = cut_out or cut_err
    return _emit({"exit_code": code, "stdout": stdout, "stderr": stderr, "truncated": truncated}, 0)


def _text(data: bytes) -> tuple[str, bool]:
    return data[:STREAM_CAP].decode("utf-8", "replace"), len(data) > STREAM_CAP


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
