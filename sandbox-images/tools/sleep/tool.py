"""sleep: sleep ``seconds``, then say so — a run of known length, for timeouts and
cancellation (longer than the label's timeout on purpose when a test wants a timeout).
Stdlib only; the image contract is in docs/tools.md.
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
    seconds = args.get("seconds") if isinstance(args, dict) else None
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        return _emit({"error": "'seconds' must be a number >= 0"}, 1)
    print(f"sleep: sleeping {seconds} s", file=sys.stderr, flush=True)
    time.sleep(seconds)
    return _emit({"slept": seconds}, 0)


def _emit(document: Any, status: int) -> int:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
