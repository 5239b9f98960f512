"""The chaos run's ``malformed_ids``: ids that can never become valid, at every door.

Each sweep sends two ids no door may take — a path (``../../etc/passwd-<mark>``) and
10 kB (``x<mark>xxxx…``), where ``<mark>`` finds its refusal in the logs — through:

=====================================  =================================================
door                                   the refusal expected
=====================================  =================================================
the Session API: a session's path, a   an answer in 4xx (422: the id is not one); never
submission's request id                5xx, nothing written
the dispatch stream (as ``brain``)     the Hands terminate it, count it and log it once
                                       (``refused a dispatch message``)
the results stream (as ``hands``)      the scheduler: the same (``refused a result
                                       event``)
a cancel broadcast (as ``brain``)      the Hands: logged and counted, nothing stopped
a wake job, the attention set, the     the Brain refuses the job (``refused wake job``),
due set (Redis, with its password)     the scheduler drops the members (``dropped a
                                       member``)
=====================================  =================================================

A bus message terminated is never delivered again: its mark must be in the logs exactly
once (an endlessly redelivered one logged it again and again). ``check`` turns what the
sweeps found into violations.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from bh.chaos_clients import as_role, nats_client, redis_sync_url
from bh.chaos_forge import WAIT_FOR_REFUSAL, route_of, sync_client
from coordination.wakes import due_key, queue_name

#: each door's refusal: the logs it is in (their names start so), what it says
_REFUSALS = {
    "dispatch": ("hands-", "refused a dispatch message"),
    "cancel": ("hands-", "refused a cancel message"),
    "result": ("scheduler", "refused a result event"),
    "wake": ("brain-", "refused wake job"),
    "attention": ("scheduler", "dropped a member of the attention set"),
    "due": ("scheduler", "dropped a member of the due set"),
}
#: stream doors: a message terminated is logged once per id (more: delivered again)
_ONCE = frozenset({"dispatch", "result"})


def malformed(mark: str) -> tuple[str, str]:
    """The two ids of a sweep: a path, and 10 kB."""
    return f"../../etc/passwd-{mark}", f"x{mark}" + "x" * 10_000


@dataclass
class IdSweeps:
    api: str
    token: str
    env: dict[str, str]
    namespace: str
    work: Path
    #: HTTP answers that were not a 4xx refusal: (door, status)
    answers: list[tuple[str, int]] = field(default_factory=list)
    #: messages sent to a door that logs its refusal: (door, mark)
    sent: list[tuple[str, str]] = field(default_factory=list)

    async def sweep(self) -> str:
        mark = uuid.uuid4().hex[:10]
        ids = malformed(mark)
        await self._http(ids)
        await self._bus(ids, mark)
        await asyncio.to_thread(self._redis, ids, mark)
        await self._refused(mark)
        wrong = [f"{door} {status}" for door, status in self.answers if not 400 <= status < 500]
        return f"mark {mark}: HTTP {'all 4xx' if not wrong else ', '.join(wrong)}"

    async def _http(self, ids: tuple[str, str]) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.api, headers=headers, timeout=10) as http:
            for bad in ids:
                requests = (
                    ("session path", "GET", f"/v1/sessions/{bad}", None),
                    ("submission path", "POST", f"/v1/sessions/{bad}/submissions", _HELLO),
                    (
                        "request id",
                        "POST",
                        "/v1/sessions/s0/submissions",
                        _HELLO | {"request_id": bad},
                    ),
                )
                for door, method, path, body in requests:
                    try:
                        status = (await http.request(method, path, json=body)).status_code
                    except httpx.HTTPError:
                        continue  # the API is down a moment (a restart fault): no answer
                    if not 400 <= status < 500:
                        self.answers.append((door, status))

    async def _bus(self, ids: tuple[str, str], mark: str) -> None:
        url = self.env["BH_NATS_URL"]
        dispatch = {"operation_id": "op-x", "session_id": "s0", "tool": "count", "tool_version": 1}
        result = {"operation_id": "op-x", "session_id": "s0", "succeeded": True}
        for n, bad in enumerate(ids):
            await _publish(
                as_role(url, "brain"),
                f"{self.namespace}.tools.dispatch.count",
                dispatch | {"type": "dispatch", "operation_id": bad},
                f"ids-{mark}-d{n}",
            )
            await _publish(
                as_role(url, "hands"),
                f"{self.namespace}.tools.results.s0",
                result | {"type": "result", "operation_id": bad},
                f"ids-{mark}-r{n}",
            )
            await _broadcast(
                as_role(url, "brain"),
                f"{self.namespace}.tools.cancel",
                {"type": "cancel", "operation_id": bad, "session_id": "s0"},
            )
            self.sent += [("dispatch", mark), ("result", mark), ("cancel", mark)]

    def _redis(self, ids: tuple[str, str], mark: str) -> None:
        bare, credentials = redis_sync_url(self.env["BH_REDIS_URL"])
        connection = sync_client(bare, credentials)
        try:
            route = route_of(connection, self.namespace)
            for n, bad in enumerate(ids):
                if route is not None:
                    queue = _queue(connection, self.namespace, route)
                    queue.enqueue_call(
                        "coordination.wakes.drive_session", args=(bad,), job_id=f"ids-{mark}-w{n}"
                    )
                    self.sent.append(("wake", f"ids-{mark}-w{n}"))
                connection.zadd(f"{self.namespace}:attention", {bad: 0})
                connection.zadd(due_key(self.namespace), {bad: 0})
            self.sent += [("attention", mark), ("due", mark)]
        finally:
            connection.close()

    async def _refused(self, mark: str) -> None:
        """Wait (a while) for every door to have logged the sweep's refusals."""
        deadline = time.monotonic() + WAIT_FOR_REFUSAL
        while time.monotonic() < deadline:
            if not self._missing(mark):
                return
            await asyncio.sleep(0.5)

    def _missing(self, mark: str) -> list[str]:
        lines = self._lines()
        return [door for door, sent in self.sent if mark in sent and not _seen(lines, door, sent)]

    def _lines(self) -> list[tuple[str, str]]:
        """Every line of the run's logs, with its log's name."""
        return [
            (path.stem, line)
            for path in self.work.glob("*.log")
            for line in path.read_text(errors="replace").splitlines()
        ]

    def check(self) -> list[str]:
        """Violations: an HTTP door that answered a malformed id other than 4xx; a message
        whose refusal nobody logged; a stream message logged more than once per id (it
        was delivered again: never terminated)."""
        found = [
            f"malformed id: {door} answered {status}, not a 4xx refusal"
            for door, status in self.answers
        ]
        lines = self._lines()
        for door, sent in self.sent:
            seen = _seen(lines, door, sent)
            if seen == 0:
                found.append(f"malformed id not refused (or not logged) at the {door} door: {sent}")
            elif door in _ONCE and seen > len(malformed("")):
                found.append(f"malformed {door} delivered again and again: {sent} ({seen} times)")
        return found


_HELLO: dict[str, object] = {"request_id": "r-ids", "input": "hi"}


def _seen(lines: list[tuple[str, str]], door: str, sent: str) -> int:
    """How often ``door`` logged its refusal of what ``sent`` marks."""
    prefix, says = _REFUSALS[door]
    return sum(name.startswith(prefix) and says in line and sent in line for name, line in lines)


async def _publish(url: str, subject: str, body: dict[str, object], msg_id: str) -> None:
    nc = await nats_client(url)
    try:
        await nc.jetstream().publish(
            subject, json.dumps(body).encode(), headers={"Nats-Msg-Id": msg_id}, timeout=5
        )
    finally:
        await nc.close()


async def _broadcast(url: str, subject: str, body: dict[str, object]) -> None:
    nc = await nats_client(url)
    try:
        await nc.publish(subject, json.dumps(body).encode())
        await nc.flush(timeout=5)
    finally:
        await nc.close()


def _queue(connection: redis.Redis, namespace: str, route: str) -> Queue:
    return Queue(queue_name(namespace, route), connection=connection, serializer=JSONSerializer)
