"""Streamed text on its way to a reader: how long a piece of text takes from leaving the
model server to reaching a client of the session's event stream, and what the previews
cost in commits and stored bytes.

One round: the scripted model streams ``--tokens`` words ``--pause`` seconds apart to a
Brain (``python -m brain run``, its own process, SQLite store); a client follows the
session through the Session API (default stream settings) and notes when each preview
arrives. A piece's latency is from the moment the model server sent it to the first
preview that holds it. Each preview interval is measured against the baseline of the
same run: an interval of 1 µs, which writes a preview for every piece the commit rate
allows — what one commit per token costs.

    python -m bench.previews --tokens 300 --pause 0.01 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bench.stats import median, percentile
from bh.session_client import SessionApiClient
from brain.model.scripted import Script, ScriptedModel
from contracts import PROGRESS_DOCUMENT, CommitRecord
from session_api.app import create_app
from session_api.views import CommitEvent, PreviewView
from session_store import open_store
from session_store.submissions import SessionClient
from webapi.server import serving

TOKEN = "bench-token-0123456789abcdef"
ROOT = Path(__file__).resolve().parent.parent
#: the baseline's interval: a preview per piece, as fast as commits go
PER_TOKEN_MS = 0.001


async def one_round(work: Path, *, tokens: int, pause: float, interval_ms: float) -> dict[str, Any]:
    url = f"sqlite:///{work}/s.db"
    store = await open_store(url)
    await SessionClient(store).submit("s1", "r1", "tell me")
    answer = " ".join(f"w{n}" for n in range(tokens))
    model = ScriptedModel(
        Script.model_validate(
            {"model": "m", "turns": [{"content": answer, "stream_pause": pause}]}
        ),
        token="t",
    )
    app = create_app(store=store, wakes=None, token=SecretStr(TOKEN))
    arrived: list[tuple[float, int]] = []
    async with serving(model.app()) as model_url, serving(app) as api_url:
        env = {
            **os.environ,
            "BH_MODEL_BASE_URL": f"{model_url}/v1",
            "BH_MODEL_API_KEY": "t",
            "BH_MODEL_NAME": "m",
            "BH_MODEL_STREAM": "1",
            "BH_MODEL_PREVIEW_MS": str(interval_ms),
            "BH_MODEL_PREVIEW_CHARS": str(len(answer) + 1),
        }
        brain = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "brain", "run", "--store", url, "--session", "s1",
            cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        client = SessionApiClient(api_url, TOKEN)
        async with client, aclosing(client.follow("s1")) as items:
            async for item in items:
                if isinstance(item, PreviewView) and not item.removed:
                    arrived.append((time.monotonic(), len(item.text)))
                final = any(s.status.is_final for s in getattr(item, "submissions", []))
                if isinstance(item, CommitEvent) and final:
                    break
        _, stderr = await brain.communicate()
        if brain.returncode != 0:
            raise RuntimeError(f"the Brain failed: {stderr.decode()[-2000:]}")
    records = [r async for r in store.history("s1")]
    await store.close()
    sent = list(model.streamed)
    return {
        "latencies": _latencies(sent, arrived),
        "pieces": len(sent),
        "previews": sum(1 for r in records if _preview_only(r)),
        "preview_bytes": sum(
            len(r.model_dump_json().encode()) for r in records if _preview_only(r)
        ),
    }


def _preview_only(record: CommitRecord) -> bool:
    commit = record.commit
    return (
        bool(commit.documents)
        and all(write.name == PROGRESS_DOCUMENT for write in commit.documents)
        and not (commit.entries or commit.tasks or commit.submissions)
    )


def _latencies(sent: list[tuple[float, int]], arrived: list[tuple[float, int]]) -> list[float]:
    """For each piece sent: from its sending to the first preview holding it (pieces no
    preview held before the answer are left out: the answer, not a preview, brought them)."""
    found, at = [], 0
    for when, chars in sent:
        while at < len(arrived) and arrived[at][1] < chars:
            at += 1
        if at == len(arrived):
            break
        found.append(arrived[at][0] - when)
    return found


def summary(rounds: list[dict[str, Any]]) -> dict[str, float]:
    latencies = [x for r in rounds for x in r["latencies"]]
    per_1000 = [1000 * r["previews"] / r["pieces"] for r in rounds]
    bytes_per_1000 = [1000 * r["preview_bytes"] / r["pieces"] for r in rounds]
    return {
        "latency_p50_ms": percentile(latencies, 0.5) * 1000 if latencies else float("nan"),
        "latency_p99_ms": percentile(latencies, 0.99) * 1000 if latencies else float("nan"),
        "pieces_seen_in_previews": len(latencies) / sum(r["pieces"] for r in rounds),
        "commits_per_1000_tokens": median(per_1000),
        "stored_kib_per_1000_tokens": median(bytes_per_1000) / 1024,
    }


def main() -> None:
    logging.getLogger("session_api").setLevel(logging.ERROR)  # "no wake queue": by design
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--pause", type=float, default=0.01, help="seconds between tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--intervals", default="250,100", help="preview intervals (ms)")
    parser.add_argument("--out", default="bench/results/previews.json")
    args = parser.parse_args()
    intervals = [PER_TOKEN_MS, *(float(x) for x in args.intervals.split(","))]
    rounds: dict[float, list[dict[str, Any]]] = {i: [] for i in intervals}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for interval in intervals:  # interleaved with the baseline
                work = Path(tmp) / f"{repeat}-{interval}"
                work.mkdir()
                done = asyncio.run(
                    one_round(work, tokens=args.tokens, pause=args.pause, interval_ms=interval)
                )
                rounds[interval].append(done)
    report: dict[str, Any] = {"tokens": args.tokens, "pause_s": args.pause, "by_interval_ms": {}}
    base = summary(rounds[PER_TOKEN_MS])
    for interval in intervals:
        figures = summary(rounds[interval])
        figures["commits_ratio_to_per_token"] = (
            figures["commits_per_1000_tokens"] / base["commits_per_1000_tokens"]
        )
        report["by_interval_ms"][str(interval)] = figures
        name = "per token (baseline)" if interval == PER_TOKEN_MS else f"{interval:g} ms"
        print(
            f"{name:>20}: token→SSE p50 {figures['latency_p50_ms']:.0f} ms, "
            f"p99 {figures['latency_p99_ms']:.0f} ms | "
            f"{figures['commits_per_1000_tokens']:.0f} commits and "
            f"{figures['stored_kib_per_1000_tokens']:.0f} KiB per 1000 tokens "
            f"({figures['commits_ratio_to_per_token']:.3f}x the baseline's commits)"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
