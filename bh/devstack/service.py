"""What the dev stack needs to know to run one service."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from bh.devstack.config import LOOPBACK
from bh.devstack.process import Argv, PidRecord


def _nothing() -> None:
    return None


def _no_detail() -> str:
    return ""


def _no_refresh(record: PidRecord) -> str:
    return ""


@dataclass(frozen=True, kw_only=True)
class Service:
    """A frozen description of one dev service.

    ``launches`` builds the command lines to try, in order: the first is the normal one,
    any others are fallbacks tried when the previous one does not become ready (dockerd
    with ``--storage-driver=vfs``). Building them may raise ``DevstackError`` when a
    binary is missing, so a missing optional service never stops the others.
    """

    name: str
    address: str  # shown to the developer: redis://127.0.0.1:16379/0, unix:///...
    ports: tuple[int, ...]  # TCP ports it listens on at ``host``; () for Unix-socket services
    launches: Callable[[], tuple[Argv, ...]]
    ready: Callable[[], bool]
    exports: Mapping[str, str]  # what `bh dev env` exports while it is running
    log_path: Path
    pid_path: Path
    host: str = LOOPBACK
    ready_timeout: timedelta = timedelta(seconds=20)
    stop_timeout: timedelta = timedelta(seconds=10)
    prepare: Callable[[], object] = _nothing  # runs before a start: install, check rights
    detail: Callable[[], str] = _no_detail  # extra facts once ready (storage driver)
    # for its process bh dev started, found answering: bring it up to date with this
    # version's config (nats: the roles' permissions); what it did, "" for nothing
    refresh: Callable[[PidRecord], str] = _no_refresh
    child_env: Mapping[str, str] = field(default_factory=dict)  # on top of os.environ
