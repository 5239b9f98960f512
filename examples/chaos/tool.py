"""A tool that records each execution of its action in a ledger file (one line per
operation id), for the process sandbox; its query mode reports whether the ledger has
the operation. Run: ``python -m examples.chaos.tool`` with the tool contract's env."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time


def main() -> int:
    operation = os.environ["BH_OPERATION_ID"]
    ledger = os.environ["LEDGER"]
    args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    if os.environ.get("BH_MODE") == "query":
        seen = open(ledger).read().split() if os.path.exists(ledger) else []  # noqa: SIM115
        found = operation in seen
        print(json.dumps({"found": found, "output": {"op": operation} if found else None}))
        return 0
    time.sleep(float(args.get("seconds", 0)))
    if args.get("fail"):
        print(json.dumps({"error": "asked to fail"}))
        return 3
    with open(ledger, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.write(operation + "\n")
    print(json.dumps({"op": operation, "slept": args.get("seconds", 0)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
