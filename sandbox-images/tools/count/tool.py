"""count: the Docker twin of ``examples.chaos.tool`` — wait ``seconds``, then record one
tally for this operation in a ledger service; ``BH_MODE=query`` asks whether it did.

The ledger is the example email service (one message per tally, to ``tally@ledger.invalid``,
keyed by the operation id): ``POST {LEDGER_URL}/messages``; the query is
``GET /messages/{operation_id}`` (404: no tally). ``fail: true`` fails on purpose
before recording. The egress proxy adds the credentials. Stdlib only.

Exit status: 0 with ``{"op", "slept"}`` (run) or ``{"found", "output"}`` (query); 3 when
asked to fail; 75 (``outcome: unknown``) when the ledger did not answer; 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

EXIT_UNKNOWN = 75


def main() -> int:
    operation = os.environ.get("BH_OPERATION_ID", "")
    ledger = os.environ.get("LEDGER_URL", "").rstrip("/")
    if not operation or not ledger.startswith("http://"):
        return _emit({"error": "BH_OPERATION_ID and LEDGER_URL (http://...) must be set"}, 1)
    if os.environ.get("BH_MODE") == "query":
        status, _ = _call("GET", f"{ledger}/messages/{quote(operation, safe='')}", None)
        if status in (200, 404):
            found = status == 200
            return _emit({"found": found, "output": {"op": operation} if found else None}, 0)
        return _emit({"error": f"ledger answered the query with {status}"}, EXIT_UNKNOWN)
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    time.sleep(float(args.get("seconds", 0)))
    if args.get("fail"):
        return _emit({"error": "asked to fail"}, 3)
    tally = {"operation_id": operation, "to": "tally@ledger.invalid", "subject": "count"}
    status, body = _call("POST", f"{ledger}/messages", {**tally, "body": operation})
    if status in (200, 202):
        return _emit({"op": operation, "slept": args.get("seconds", 0)}, 0)
    outcome = EXIT_UNKNOWN if status == 0 or status >= 500 else 1
    return _emit({"error": f"ledger answered {status}: {body[:200]}"}, outcome)


def _call(method: str, url: str, payload: Any) -> tuple[int, str]:
    """Status and body; status 0 when there was no answer."""
    data = None if payload is None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        with error:
            return error.code, ""
    except OSError as error:
        return 0, str(error)


def _emit(document: Any, status: int) -> int:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
