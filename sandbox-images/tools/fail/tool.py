"""fail: fail on purpose with a chosen exit code and message, printing the error object
the contract asks for (``{"error": message}``). Stdlib only; see docs/tools.md.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    if not isinstance(args, dict):
        return _emit({"error": "the arguments must be a JSON object"}, 1)
    code = args.get("code", 1)
    if not isinstance(code, int) or isinstance(code, bool) or not 1 <= code <= 255:
        return _emit({"error": "'code' must be an integer from 1 to 255"}, 1)
    message = str(args.get("message", "failed on purpose"))
    print(f"fail: exiting with {code}", file=sys.stderr, flush=True)
    return _emit({"error": message}, code)


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
