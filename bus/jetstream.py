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

import logging
import ssl
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from pydantic import BaseModel, Field

from contracts import StoreUnavailable
from contracts.model import Frozen
from runtime.credentials import endpoint, redact

log = logging.getLogger(__name__)

DISPATCH_STREAM = "DISPATCH"
DISPATCH_SUBJECTS = "tools.dispatch.>"
RESULTS_STREAM = "RESULTS"
RESULTS_SUBJECTS = "tools.results.>"
CANCEL_SUBJECT = "tools.cancel"


def dispatch_subject(tool: str) -> str:
    return f"tools.dispatch.{tool}"


def result_subject(session_id: str) -> str:
    return f"tools.results.{session_id}"


class BusSettings(Frozen):
    """Where the bus is and how to reach it.

    ``url`` may name a user and the file holding its password, never the password:
    ``nats://brain@host:4222?passfile=/run/secrets/nats-brain.pass`` (``runtime.credentials``).
    ``tls://host:4222`` (or any ``tls_*`` file) turns TLS on: ``tls_ca_file`` verifies the
    server with a private CA, ``tls_cert_file``/``tls_key_file`` present a client
    certificate to a server that asks for one (``docs/security.md``).
    """

    url: str = "nats://127.0.0.1:4222"
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    namespace: str = Field(default="bh", pattern=r"^[a-z][a-z0-9_]{0,30}$")
    duplicate_window: timedelta = timedelta(minutes=2)
    results_max_age: timedelta = timedelta(days=1)
    replicas: int = 1
    connect_timeout: timedelta = timedelta(seconds=5)


class Bus:
    """One NATS connection with the tool path's streams ensured."""

    def __init__(self, nc: Client, settings: BusSettings) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.settings = settings

    def subject(self, topic: str) -> str:
        """The wire subject of a logical topic."""
        return f"{self.settings.namespace}.{topic}"

    def stream(self, name: str) -> str:
        """The server's name of one of the streams (``DISPATCH_STREAM``...)."""
        return f"{self.settings.namespace.upper()}_{name}"

    @classmethod
    async def connect(cls, settings: BusSettings, *, name: str = "brainhands") -> Bus:
        """Connect (reconnecting forever after a server restart) and ensure the streams."""
        found = endpoint(settings.url)
        where = redact(settings.url)
        try:
            nc = await nats.connect(
                found.url,
                user=found.username,
                password=found.password,
                tls=_tls_context(settings),
                name=name,
                connect_timeout=settings.connect_timeout.total_seconds(),
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                drain_timeout=5,
                error_cb=_log_error,
            )
        except (OSError, nats.errors.Error) as error:
            raise StoreUnavailable(f"NATS is not reachable at {where}: {error}") from None
        bus = cls(nc, settings)
        await bus.ensure_streams()
        return bus

    async def ensure_streams(self) -> None:
        window = self.settings.duplicate_window.total_seconds()
        await self._ensure(
            StreamConfig(
                name=self.stream(DISPATCH_STREAM),
                subjects=[self.subject(DISPATCH_SUBJECTS)],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                duplicate_window=window,
                num_replicas=self.settings.replicas,
            )
        )
        await self._ensure(
            StreamConfig(
                name=self.stream(RESULTS_STREAM),
                subjects=[self.subject(RESULTS_SUBJECTS)],
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                duplicate_window=window,
                max_age=self.settings.results_max_age.total_seconds(),
                num_replicas=self.settings.replicas,
            )
        )

    async def _ensure(self, config: StreamConfig) -> None:
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError:
            await self.js.update_stream(config)  # exists with other settings: align them
        except (nats.errors.Error, OSError) as error:
            raise StoreUnavailable(f"cannot create stream {config.name}: {error}") from None

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

    async def close(self) -> None:
        try:
            await self.nc.drain()
        except (TimeoutError, nats.errors.Error, OSError):
            await self.nc.close()


def _tls_context(settings: BusSettings) -> ssl.SSLContext | None:
    """A verifying TLS context when any ``tls_*`` file is set; None leaves it to the URL
    (``tls://`` uses the system's CAs)."""
    if not (settings.tls_ca_file or settings.tls_cert_file):
        return None
    context = ssl.create_default_context(
        cafile=str(settings.tls_ca_file) if settings.tls_ca_file else None
    )
    if settings.tls_cert_file:
        context.load_cert_chain(
            str(settings.tls_cert_file),
            str(settings.tls_key_file) if settings.tls_key_file else None,
        )
    return context


async def _log_error(error: Exception) -> None:
    log.warning("nats: %s", error)
