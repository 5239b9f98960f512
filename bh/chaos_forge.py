"""Forged messages: dispatches, result events and wake jobs no committed work backs.

Each comes first from an anonymous client (no credential: where the stack requires
credentials the server refuses the connection or the publish, which is counted), then,
when the run's URLs carry credentials, from an insider — a client with a service role's
credentials — which the servers let through, so the store must refuse it: the Hands
refuse a dispatch no committed intent backs (logged ``<op>: operation <op>: … refused``),
the scheduler a result event the store holds no result for (``result event for <op> …
refused``), a Brain anything on its wake queue but ``drive_session`` of one session id
(``refused wake job <id>``). The forged wake job calls ``os.makedirs`` on a marker
directory: the directory existing means the Brain ran code a message carried.

A forgery is judged at the end: one that ran anything, or a delivered one whose refusal
nobody logged (refused and counted is the contract), is a violation.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redis.exceptions
from rq import Queue
from rq.serializers import JSONSerializer

from bh.chaos_clients import as_role, nats_client, redis_sync_url
from contracts.tool import Dispatch, ResultEvent
from runtime.credentials import endpoint
from session_store import SessionStore

#: how long a fault waits for the refusal to be logged before moving on
WAIT_FOR_REFUSAL = 15.0


@dataclass
class Forgery:
    kind: str  # dispatch | result | wake
    ident: str  # the operation id, or the wake job's id
    client: str  # anonymous | insider
    outcome: str  # refused by the server | delivered | not sent
    refused_by: str = ""  # the log that holds the refusal

    @property
    def delivered(self) -> bool:
        return self.outcome.startswith("delivered")


@dataclass
class Forger:
    env: dict[str, str]
    namespace: str
    work: Path
    forgeries: list[Forgery] = field(default_factory=list)

    @property
    def markers(self) -> Path:
        return self.work / "forged-wake-markers"

    def _clients(self, url: str) -> list[str]:
        insider = endpoint(url).has_credentials
        return ["anonymous", "insider"] if insider else ["anonymous"]

    async def dispatch(self, session_id: str) -> str:
        url = self.env["BH_NATS_URL"]
        made: list[Forgery] = []
        for client in self._clients(url):
            op = f"forged-d-{uuid.uuid4().hex[:10]}"
            message = Dispatch(
                operation_id=op, session_id=session_id, tool="count", tool_version=1, args={}
            )
            topic = f"{self.namespace}.tools.dispatch.count"
            outcome = await _publish(as_role(url, "brain"), topic, message, op, client)
            made.append(Forgery("dispatch", op, client, outcome))
        return await self._judge(made)

    async def result(self, session_id: str) -> str:
        url = self.env["BH_NATS_URL"]
        made: list[Forgery] = []
        for client in self._clients(url):
            op = f"forged-r-{uuid.uuid4().hex[:10]}"
            message = ResultEvent(operation_id=op, session_id=session_id, succeeded=True)
            topic = f"{self.namespace}.tools.results.{session_id}"
            outcome = await _publish(as_role(url, "hands"), topic, message, op, client)
            made.append(Forgery("result", op, client, outcome))
        return await self._judge(made)

    async def wake(self, rng: random.Random) -> str:
        url = self.env["BH_REDIS_URL"]
        self.markers.mkdir(exist_ok=True)
        made: list[Forgery] = []
        for client in self._clients(url):
            job = f"forged-w-{uuid.uuid4().hex[:10]}"
            as_json = rng.random() < 0.5  # RQ's own pickle, or the Brain's JSON
            outcome = await asyncio.to_thread(
                _enqueue, url, self.namespace, job, self.markers / job, client, as_json
            )
            made.append(Forgery("wake", job, client, outcome))
        return await self._judge(made)

    async def _judge(self, made: list[Forgery]) -> str:
        """Wait (a while) for the refusals of ``made``; say what became of each."""
        self.forgeries += made
        deadline = time.monotonic() + WAIT_FOR_REFUSAL
        while time.monotonic() < deadline:
            await asyncio.to_thread(self.find_refusals)
            if all(f.refused_by or not f.delivered for f in made):
                break
            await asyncio.sleep(0.5)
        return "; ".join(_said(f) for f in made)

    def find_refusals(self) -> None:
        """Mark every delivered forgery whose refusal is logged."""
        waiting = [f for f in self.forgeries if f.delivered and not f.refused_by]
        if not waiting:
            return
        logs = {path.stem: path.read_text(errors="replace") for path in self.work.glob("*.log")}
        for forgery in waiting:
            mark = _refusal_mark(forgery)
            for name, text in logs.items():
                if mark in text:
                    forgery.refused_by = name
                    break

    async def check(self, store: SessionStore, executed: set[str], applied: set[str]) -> list[str]:
        """Violations: a forgery that ran something; one delivered and not refused; an
        anonymous one a server let through although the stack has credentials."""
        self.find_refusals()
        found = []
        for forgery in self.forgeries:
            if forgery.kind == "dispatch" and (
                forgery.ident in executed or await store.get_operation(forgery.ident)
            ):
                found.append(f"forged dispatch ran: {forgery.ident} ({forgery.client})")
            if forgery.kind == "result" and forgery.ident in applied:
                found.append(f"forged result applied: {forgery.ident} ({forgery.client})")
            if forgery.kind == "wake" and (self.markers / forgery.ident).exists():
                found.append(f"forged wake job ran its code: {forgery.ident} ({forgery.client})")
            if forgery.delivered and not forgery.refused_by:
                found.append(f"forged {forgery.kind} not refused (or not counted): {forgery.ident}")
            with_credentials = endpoint(self._url(forgery.kind)).has_credentials
            if forgery.client == "anonymous" and forgery.delivered and with_credentials:
                found.append(f"anonymous {forgery.kind} accepted by the server: {forgery.ident}")
        return found

    def _url(self, kind: str) -> str:
        return self.env["BH_REDIS_URL" if kind == "wake" else "BH_NATS_URL"]

    def summary(self) -> dict[str, int]:
        sent = len(self.forgeries)
        at_server = sum(f.outcome.startswith("refused") for f in self.forgeries)
        by_store = sum(bool(f.refused_by) for f in self.forgeries)
        return {"forged": sent, "refused by a server": at_server, "refused by the system": by_store}


def _said(forgery: Forgery) -> str:
    refused = f", refused in {forgery.refused_by}.log" if forgery.refused_by else ""
    return f"{forgery.client} {forgery.ident}: {forgery.outcome}{refused}"


def _refusal_mark(forgery: Forgery) -> str:
    if forgery.kind == "dispatch":
        return f"{forgery.ident}: operation {forgery.ident}: session"
    if forgery.kind == "result":
        return f"result event for {forgery.ident} (session"
    return f"refused wake job {forgery.ident}"


async def _publish(
    url: str, subject: str, message: Dispatch | ResultEvent, msg_id: str, client: str
) -> str:
    try:
        nc = await nats_client(url, anonymous=client == "anonymous")
    except Exception as error:  # authorization violation, most likely: what we want
        return f"refused by the server at connect ({type(error).__name__})"
    try:
        ack = await nc.jetstream().publish(
            subject, message.model_dump_json().encode(), headers={"Nats-Msg-Id": msg_id}, timeout=5
        )
        return "delivered" if not ack.duplicate else "dropped as a duplicate"
    except Exception as error:  # a permissions violation surfaces as no ack
        return f"refused by the server ({type(error).__name__})"
    finally:
        await nc.close()


def _enqueue(url: str, namespace: str, job: str, marker: Path, client: str, as_json: bool) -> str:
    bare, credentials = redis_sync_url(url)
    connection = sync_client(bare, {} if client == "anonymous" else credentials)
    try:
        route = route_of(connection, namespace)
        if route is None:
            return "not sent: no Brain advertised a route within 20 s"
        name = f"{namespace}-wakes-{route}"
        queue = Queue(name, connection=connection, serializer=JSONSerializer if as_json else None)
        queue.enqueue_call("os.makedirs", args=(str(marker),), job_id=job)
        return "delivered" + (" (JSON)" if as_json else " (pickled)")
    except redis.exceptions.AuthenticationError as error:
        return f"refused by the server ({type(error).__name__})"
    except redis.exceptions.ResponseError as error:  # NOAUTH
        return f"refused by the server ({str(error)[:40]})"
    finally:
        connection.close()


def route_of(connection: redis.Redis, namespace: str) -> str | None:
    """A route the run's Brains consume (``coordination.routes``: they advertise it every
    few seconds, so it comes back soon after a FLUSHALL). A queue merely listed in
    ``rq:queues`` may have no consumer (a forged job there is never refused: the
    harness's own mistake in an earlier run, after a FLUSHALL)."""
    deadline = time.monotonic() + 20
    while True:
        routes = sorted(_text(key) for key in connection.hkeys(f"{namespace}:routes"))
        if routes or time.monotonic() > deadline:
            return routes[0] if routes else None
        time.sleep(0.5)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def sync_client(url: str, credentials: dict[str, str]) -> redis.Redis:
    return redis.Redis.from_url(
        url, username=credentials.get("username"), password=credentials.get("password")
    )
