"""letter_count: print ``{"letters": N}``, the number of letters in ``name``.

The image contract (docs/tools.md): the arguments arrive as JSON in ``BH_ARGUMENTS``
(already checked against the image's schema); the output is one JSON document on
stdout; exit 0 means it succeeded, anything else that it failed. Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return answer({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    name = args.get("name") if isinstance(args, dict) else None
    if not isinstance(name, str):
        return answer({"error": "'name' must be a string"}, 1)
    return answer({"letters": sum(1 for character in name if character.isalpha())}, 0)


def answer(document: object, status: int) -> int:
    print(json.dumps(document))
    return status


if __name__ == "__main__":
    sys.exit(main())
