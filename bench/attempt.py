"""The window an in-process tool's request still has after its last proof (issue 31,
defect 13): from the moment ``brain.attempt.AttemptTransport`` proves the attempt (at
httpcore's ``send_request_headers.started``) to the moment the request's head has been
written to the socket (``send_request_headers.complete``). A freeze of the process
inside that window is the only way left for a request to leave after its lease lapsed;
the service's fence check (``contracts.attempt``) covers even that.

For comparison in the same run: the window the Brain had before — from the proof made
just before the tool was called to the same write — for a request that first waits for
a connection (a fan-out's other request holds it for ``--hold`` ms)::

    python -m bench.attempt --requests 2000 --out bench/results/attempt.json

Each figure is the median (and 99th percentile) over ``--requests`` requests to a
local HTTP server, in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.stats import median
from brain.attempt import Attempt, AttemptTransport
from contracts import utcnow
from webapi.server import serving


async def behind_another(client: httpx.AsyncClient, url: str) -> float:
    """Seconds from a proof made before the call to the request's head being written,
    when another request holds the one connection."""
    holder = asyncio.create_task(client.post(url + "?hold=1", json={}))
    await asyncio.sleep(0)
    called = time.perf_counter()
    written: list[float] = []

    async def mark(event: str, info: dict[str, Any]) -> None:
        if event.endswith("send_request_headers.complete"):
            written.append(time.perf_counter())

    await client.post(url, json={}, extensions={"trace": mark})
    await holder
    return written[0] - called


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def measure(requests: int, hold_ms: float) -> dict[str, Any]:
    async def answer(request: Request) -> Response:
        if request.query_params.get("hold"):
            await asyncio.sleep(hold_ms / 1000)
        return Response(b"{}", media_type="application/json")

    app = Starlette(routes=[Route("/", answer, methods=["POST"])])
    windows: list[float] = []
    before: list[float] = []
    proved: list[float] = []

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event.endswith("send_request_headers.complete") and proved:
            windows.append(time.perf_counter() - proved[-1])

    def prove() -> None:
        proved.append(time.perf_counter())

    async with serving(app) as url:
        one = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1))
        async with httpx.AsyncClient(transport=AttemptTransport(one)) as client:
            attempt = Attempt(operation_id="op-bench", deadline=utcnow(), prove=prove)
            for index in range(requests):
                with attempt.running():
                    await client.post(url, json={"n": index}, extensions={"trace": trace})
                if index % 10 == 0:  # the old proof: before a request that waits
                    proved.clear()
                    before.append(await behind_another(client, url))
    micro = 1e6
    return {
        "requests": requests,
        "proof_to_write_us": {
            "median": median(windows) * micro,
            "p99": percentile(windows, 0.99) * micro,
        },
        "before_call_proof_to_write_us": {
            "hold_ms": hold_ms,
            "median": median(before) * micro,
            "p99": percentile(before, 0.99) * micro,
        },
        "load": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--hold", type=float, default=20.0, help="ms the other request holds")
    parser.add_argument("--out", default="bench/results/attempt.json")
    args = parser.parse_args()
    report = asyncio.run(measure(args.requests, args.hold))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    now = report["proof_to_write_us"]
    old = report["before_call_proof_to_write_us"]
    print(f"last proof -> head written: median {now['median']:.1f} us, p99 {now['p99']:.1f} us")
    print(
        f"proof before the call -> head written, behind a {old['hold_ms']:g} ms request: "
        f"median {old['median']:.0f} us, p99 {old['p99']:.0f} us"
    )


if __name__ == "__main__":
    main()
