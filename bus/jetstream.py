"""JetStream streams of the tool path, and a connection that publishes with de-duplication.

==================  ==================================  ==========  =======================
stream              topics                              retention   consumers
==================  ==================================  ==========  =======================
``<NS>_DISPATCH``   ``tools.dispatch.<tool>``           work queue  Hands (durable pull)
``<NS>_RESULTS``    ``tools.results.<session>``         limits      scheduler; runners
==================  ==================================  ==========  =======================

Topics are logical (they are what outbox messages in the store name); on the wire each is
prefixed by the deployment's ``namespace`` (subject ``<ns>.<topic>``, streams
``<NS>_...``), so deployments — or test runs — sharing a NATS account never meet.
``tools.cancel`` is plain NATS (every Hands instance hears it; the store records the
cancellation, so a Hands that missed it still finds it). Every publish carries
``Nats-Msg-Id``: a repeat inside the duplicate window is dropped by the server, and one
after it is harmless because executors act on the store, not on the message.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from pydantic import BaseModel, Field

from bus.streams import Difference, differences
from contracts import StoreUnavailable
from contracts.model import Frozen
from runtime.cancellation import cancel_and_wait
from runtime.credentials import endpoint, redact

log = logging.getLogger(__name__)

DISPATCH_STREAM = "DISPATCH"
DISPATCH_SUBJECTS = "tools.dispatch.>"
RESULTS_STREAM = "RESULTS"
RESULTS_SUBJECTS = "tools.results.>"
CANCEL_SUBJECT = "tools.cancel"
#: readiness checks in a row without an answer that make the bus reconnect (``check``)
SILENT_CHECKS = 2


def dispatch_subject(tool: str) -> str:
    return f"tools.dispatch.{tool}"


def result_subject(session_id: str) -> str:
    return f"tools.results.{session_id}"


class BusSettings(Frozen):
    """Where the bus is and how to reach it.

    ``url`` may name a user and the file holding its password, never the password:
    ``nats://brain@host:4222?passfile=/run/secrets/nats-brain.pass`` (``runtime.credentials``).
    ``tls://host:4222`` turns TLS on (the system's CAs verify the server); the query
    options ``tls_ca=<file>`` (a private CA) and ``tls_cert=<file>&tls_key=<file>`` (a
    client certificate, for a server that asks for one) do too (``docs/security.md``).
    """

    url: str = "nats://127.0.0.1:4222"
    namespace: str = Field(default="bh", pattern=r"^[a-z][a-z0-9_]{0,30}$")
    duplicate_window: timedelta = timedelta(minutes=2)
    results_max_age: timedelta = timedelta(days=1)
    #: copies of each stream in a NATS cluster. None (every service): a stream this
    #: client creates gets one, an existing one keeps its own — so a service starting
    #: never scales down what the deployment's init job (``bh init --replicas 3``) set
    replicas: int | None = Field(default=None, ge=1, le=5)
    connect_timeout: timedelta = timedelta(seconds=5)
    #: the client pings the server this often, and after ``max_outstanding_pings``
    #: unanswered it drops the connection and reconnects: a peer that died silently (a
    #: partition: no reset, no FIN) is noticed within about (max + 1) x interval, 15 s
    #: (nats-py's defaults, 120 s x 2, left a dead connection for minutes)
    ping_interval: timedelta = timedelta(seconds=5)
    max_outstanding_pings: int = Field(default=2, ge=1)


class Bus:
    """One NATS connection with the tool path's streams ensured."""

    def __init__(self, nc: Client, settings: BusSettings) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.settings = settings
        self._drift: dict[str, list[Difference]] = {}
        #: readiness checks in a row that got no answer (``check``)
        self._unanswered = 0

    def subject(self, topic: str) -> str:
        """The wire subject of a logical topic."""
        return f"{self.settings.namespace}.{topic}"

    def stream(self, name: str) -> str:
        """The server's name of one of the streams (``DISPATCH_STREAM``...)."""
        return f"{self.settings.namespace.upper()}_{name}"

    @classmethod
    async def connect(
        cls, settings: BusSettings, *, name: str = "brainhands", align: bool = False
    ) -> Bus:
        """Connect (reconnecting forever after a server restart) and ensure the streams
        (``ensure_streams``; ``align`` only for the operator)."""
        found = endpoint(settings.url)
        url, tls = _tls(found.url)
        nc = Client()
        refused = _Refusal(nc)
        options: dict[str, Any] = {  # nats-py types its seconds as int; it takes floats
            "connect_timeout": settings.connect_timeout.total_seconds(),
            "reconnect_time_wait": 0.5,
            "ping_interval": settings.ping_interval.total_seconds(),
            "max_outstanding_pings": settings.max_outstanding_pings,
        }
        connecting = asyncio.ensure_future(
            nc.connect(
                url,
                user=found.username,
                password=found.password,
                tls=tls,
                name=name,
                max_reconnect_attempts=-1,
                drain_timeout=5,
                error_cb=refused.note,
                **options,
            )
        )
        # nats-py retries a first connect forever; a refused login or an untrusted
        # certificate will not get better by waiting, so it ends the wait at once.
        await asyncio.wait({connecting, refused.seen}, return_when=asyncio.FIRST_COMPLETED)
        if not connecting.done() or connecting.exception() is not None:
            failure = connecting.exception() if connecting.done() else refused.error
            await cancel_and_wait(connecting, refused.seen)
            await nc.close()
            raise StoreUnavailable(f"cannot connect to NATS at {redact(settings.url)}: {failure}")
        await cancel_and_wait(refused.seen)
        bus = cls(nc, settings)
        await bus.ensure_streams(align=align)
        return bus

    async def ensure_streams(self, *, align: bool = False) -> None:
        """Create each stream that is missing; one that exists is left as it is and,
        where it differs from this deployment's, reported (``bus.streams``: logged
        once, and a critical difference fails ``check``). ``align`` (the operator's
        ``bh init``, which has the right to) updates it to this deployment's instead.
        Creating a stream that exists with the same configuration changes nothing on the
        server, so services starting together all create safely."""
        for config in self.wanted_streams():
            await self._ensure(config, align=align)

    def wanted_streams(self) -> list[StreamConfig]:
        """The streams' configuration this deployment wants."""
        window = self.settings.duplicate_window.total_seconds()
        return [
            StreamConfig(
                name=self.stream(DISPATCH_STREAM),
                subjects=[self.subject(DISPATCH_SUBJECTS)],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                duplicate_window=window,
                num_replicas=self.settings.replicas or 1,
            ),
            StreamConfig(
                name=self.stream(RESULTS_STREAM),
                subjects=[self.subject(RESULTS_SUBJECTS)],
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                duplicate_window=window,
                max_age=self.settings.results_max_age.total_seconds(),
                num_replicas=self.settings.replicas or 1,
            ),
        ]

    async def replicas(self) -> dict[str, tuple[int, str | None]]:
        """Each stream's replicas and its leader's name (None while none is elected)."""
        found = {}
        for name in (self.stream(DISPATCH_STREAM), self.stream(RESULTS_STREAM)):
            try:
                info = await self.js.stream_info(name)
            except (nats.errors.Error, OSError) as error:
                raise StoreUnavailable(f"cannot read stream {name}: {error}") from None
            leader = info.cluster.leader if info.cluster is not None else None
            found[name] = (info.config.num_replicas or 1, leader)
        return found

    async def _ensure(self, config: StreamConfig, *, align: bool) -> None:
        try:
            found = await self._create(config)
            if found is not None and align:
                await self._align(config, found)
            else:
                self._note(config, found)
        except (nats.errors.Error, OSError) as error:
            raise StoreUnavailable(f"cannot create stream {config.name}: {error}") from None

    async def _create(self, config: StreamConfig) -> StreamConfig | None:
        """Create the stream; None when that made it (or it was there just so), else
        the configuration it has on the server."""
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError as refused:  # there with another configuration?
            try:
                return (await self.js.stream_info(str(config.name))).config
            except nats.js.errors.NotFoundError:  # no: the server refused it (say why)
                raise refused from None
        return None

    async def _align(self, config: StreamConfig, found: StreamConfig) -> None:
        if self.settings.replicas is None:  # keep the copies the deployment chose
            config = replace(config, num_replicas=found.num_replicas)
        log.warning("aligning stream %s with this deployment's configuration", config.name)
        await self.js.update_stream(config)
        self._drift.pop(str(config.name), None)

    def _note(self, config: StreamConfig, found: StreamConfig | None) -> None:
        """Keep (and log once) how the stream on the server differs from ``config``."""
        name = str(config.name)
        replicas = self.settings.replicas is not None
        drift = [] if found is None else differences(config, found, replicas=replicas)
        if drift == self._drift.get(name, []):
            return
        if drift:
            log.error(
                "stream %s differs from this deployment's and is left as it is (only the "
                "operator changes streams: `bh init` aligns them): %s",
                name,
                "; ".join(str(difference) for difference in drift),
            )
            self._drift[name] = drift
        else:
            log.info("stream %s is as this deployment wants it again", name)
            self._drift.pop(name, None)

    @property
    def drift(self) -> dict[str, list[Difference]]:
        """How each stream differed from this deployment's when last looked at."""
        return dict(self._drift)

    async def publish(self, topic: str, message: BaseModel | bytes, *, msg_id: str) -> bool:
        """Publish durably (waits for the stream's ack); False if it was a duplicate."""
        data = message if isinstance(message, bytes) else message.model_dump_json().encode()
        subject = self.subject(topic)
        try:
            ack = await self.js.publish(
                subject,
                data,
                headers={"Nats-Msg-Id": msg_id},
                timeout=10,
            )
        except (TimeoutError, nats.errors.Error, OSError) as error:
            raise StoreUnavailable(f"could not publish {msg_id} on {subject}: {error}") from None
        return not ack.duplicate

    async def broadcast(self, topic: str, message: BaseModel | bytes) -> None:
        """Plain NATS publish (no stream): for every current listener, lost if none."""
        subject = self.subject(topic)
        data = message if isinstance(message, bytes) else message.model_dump_json().encode()
        try:
            await self.nc.publish(subject, data)
            await self.nc.flush(timeout=5)
        except (TimeoutError, nats.errors.Error, OSError) as error:
            raise StoreUnavailable(f"could not publish on {subject}: {error}") from None

    async def listen(self, topic: str, handler: Callable[[Msg], Awaitable[None]]) -> Any:
        """A plain subscription (e.g. to a session's results): hints, not the truth."""
        return await self.nc.subscribe(self.subject(topic), cb=handler)

    async def listen_raw(self, subject: str, handler: Callable[[Msg], Awaitable[None]]) -> Any:
        """A subscription to a server subject (advisories), not namespaced."""
        return await self.nc.subscribe(subject, cb=handler)

    async def check(self) -> None:
        """Raise unless JetStream answers a request now (a readiness check), or a stream
        differs critically from this deployment's (``bus.streams``; read again here, so
        an operator's ``bh init`` makes the service ready again). A request, not
        ``flush``: a flush given up (its timeout, or the probe's) leaves its PONG
        future cancelled in nats-py's queue, and the late PONG's ``set_result`` on it
        (``InvalidStateError``) broke the connection's reader — seen in every Hands of
        the compose deployment after a NATS partition. A request's reply slot is dropped
        with its future."""
        if not self.nc.is_connected:
            raise ConnectionError("not connected to NATS")
        try:
            await self.js.account_info()
        except (TimeoutError, asyncio.CancelledError):  # no answer (or the probe gave up)
            await self._unanswered_check()
            raise
        self._unanswered = 0
        if self._critical():
            await self._look_again()
        if critical := self._critical():
            raise StoreUnavailable(f"streams not as this deployment wants them: {critical}")

    async def _unanswered_check(self) -> None:
        """``SILENT_CHECKS`` checks in a row without an answer while the client still
        calls itself connected: the connection is dead without anyone having said so
        (a partition), so reconnect now rather than when the pings run out."""
        self._unanswered += 1
        if self._unanswered >= SILENT_CHECKS and self.nc.is_connected:
            self._unanswered = 0
            log.warning("nats: %d checks got no answer; reconnecting", SILENT_CHECKS)
            await self.nc.force_reconnect()

    def _critical(self) -> str:
        return "; ".join(
            f"{name}: {difference}"
            for name, drift in self._drift.items()
            for difference in drift
            if difference.critical
        )

    async def _look_again(self) -> None:
        """Read the streams found different again (an operator may have aligned them)."""
        for config in self.wanted_streams():
            if str(config.name) in self._drift:
                found = await self.js.stream_info(str(config.name))
                self._note(config, found.config)

    async def close(self) -> None:
        """Drain (deliveries in hand finish), or close at once when the connection is
        not up. Closing a dead connection ends quietly: nats-py's close awaits the old
        transport's end, which then fails with that transport's error (a reset, or the
        cancellation of its close waiter); a process stopping because NATS stayed away
        must exit with its own status, not that error (issue 36)."""
        try:
            await self.nc.drain()
        except (TimeoutError, nats.errors.Error, OSError):
            try:
                await self.nc.close()
            except (nats.errors.Error, OSError) as error:
                log.info("nats: the dead connection's close said %r", error)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the caller's own cancellation
                log.info("nats: the dead connection's close was cancelled under it")


class _Refusal:
    """Errors of a first connect that waiting will not cure: a login the server refuses,
    a certificate we do not trust. Later ones are only logged (reconnects go on)."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._refused = asyncio.Event()
        self.error: Exception | None = None
        self.seen: asyncio.Future[Any] = asyncio.ensure_future(self._refused.wait())

    async def note(self, error: Exception) -> None:
        await _log_error(error)
        if not self._nc.is_connected and _is_refusal(error):
            self.error = error
            self._refused.set()


def _is_refusal(error: Exception) -> bool:
    text = str(error).lower()
    return isinstance(error, ssl.SSLError) or "authorization violation" in text


def _tls(url: str) -> tuple[str, ssl.SSLContext | None]:
    """``url`` without its ``tls_*`` options, and the TLS context they ask for (None: as
    the scheme says; ``tls://`` alone verifies with the system's CAs)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    ca, cert, key = (query.pop(name, None) for name in ("tls_ca", "tls_cert", "tls_key"))
    bare = urlunsplit(parts._replace(query=urlencode(query)))
    if ca is None and cert is None:
        return bare, None
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return bare, context


async def _log_error(error: Exception) -> None:
    # a connect that timed out says nothing of itself (str() is empty): name its class
    log.warning("nats: %s", str(error) or type(error).__name__)
