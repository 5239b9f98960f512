"""echo: answer with the arguments and the operation id, after an optional sleep.

The smallest tool, for smoke tests, benchmarks (``sleep`` stretches a run) and crash
tests (kill the executor while it sleeps). Stdlib only; the image contract is in
docs/tools.md.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    if not isinstance(args, dict):
        return _emit({"error": "the arguments must be a JSON object"}, 1)
    pause = args.get("sleep", 0)
    if not isinstance(pause, int | float) or isinstance(pause, bool) or pause < 0:
        return _emit({"error": "'sleep' must be a number of seconds >= 0"}, 1)
    if pause:
        print(f"echo: sleeping {pause} s", file=sys.stderr, flush=True)
        time.sleep(pause)
    return _emit({"echo": args, "operation_id": os.environ.get("BH_OPERATION_ID", "")}, 0)


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
