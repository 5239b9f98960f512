"""A local HTTP service for the walk-through's tool to GET: ``GET /status`` answers a
small JSON document (and counts the requests it served: a GET repeated after a crash
would show). Stdlib only.

    python -m examples.fetch.service --port 8030
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_served = {"count": 0}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/status":
            self.send_error(404, "only /status is here")
            return
        _served["count"] += 1
        body = json.dumps({"service": "example", "ok": True, "served": _served["count"]})
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        print(f"example service: {self.command} {self.path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8030)
    arguments = parser.parse_args()
    server = ThreadingHTTPServer((arguments.host, arguments.port), _Handler)
    print(f"example service on http://{arguments.host}:{arguments.port}/status", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
