"""http_get: GET one http(s) URL through the egress proxy and answer its status and body.

The proxy comes from ``HTTP_PROXY``/``HTTPS_PROXY`` (set by the executor when the
operator allowed a destination; urllib reads them); with no network granted every GET
fails. Any HTTP status is an answer (the tool succeeds); no answer at all fails the run.
The body keeps its first 64 KiB, decoded by its charset (UTF-8 by default) with
replacement characters. Stdlib only; see docs/tools.md.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

BODY_CAP = 64 * 1024
DEFAULT_TIMEOUT = 10.0


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    if not isinstance(args, dict):
        return _emit({"error": "the arguments must be a JSON object"}, 1)
    url, timeout = args.get("url"), args.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        return _emit({"error": "'url' must be an http:// or https:// URL"}, 1)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        return _emit({"error": "'timeout' must be a number of seconds > 0"}, 1)
    print(f"http_get: GET {url}", file=sys.stderr, flush=True)
    try:
        status, charset, body = _get(url, float(timeout))
    except (OSError, http.client.HTTPException, ValueError) as error:
        return _emit({"error": f"GET {url} failed: {_describe(error)}"}, 1)
    text = _decode(body[:BODY_CAP], charset)
    return _emit({"status": status, "body": text, "truncated": len(body) > BODY_CAP}, 0)


def _get(url: str, timeout: float) -> tuple[int, str | None, bytes]:
    request = urllib.request.Request(url, headers={"User-Agent": "brainhands-http-get/1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            charset = response.headers.get_content_charset()
            return response.status, charset, response.read(BODY_CAP + 1)
    except urllib.error.HTTPError as error:
        # An error status is still the server's answer.
        with error:
            return error.code, error.headers.get_content_charset(), error.read(BODY_CAP + 1)


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


def _describe(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    detail = str(reason if reason is not None else error)
    return f"{type(error).__name__}: {detail}" if detail else type(error).__name__


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
