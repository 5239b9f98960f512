"""The set of dev services and the idempotent operations on it: up, down, status, restart.

Every operation is safe to repeat: ``up`` leaves alone a service that already answers,
``down`` stops only what ``bh dev`` started. Services are handled concurrently; each
waits for readiness by polling with a deadline.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from bh.devstack import envfile, probe
from bh.devstack.errors import DevstackError
from bh.devstack.poll import poll_until
from bh.devstack.process import (
    Argv,
    PidRecord,
    Stopped,
    is_running,
    log_tail,
    read_pidfile,
    remove_pidfile,
    spawn,
    stop,
    write_pidfile,
)
from bh.devstack.report import Report, State
from bh.devstack.service import Service
from bh.devstack.state import StateDir

T = TypeVar("T")


class Stack:
    """The dev services of one state directory."""

    def __init__(
        self,
        services: Sequence[Service],
        *,
        state: StateDir,
        env: Mapping[str, str],
        say: Callable[[str], None],
    ) -> None:
        self._services = {service.name: service for service in services}
        self._state = state
        self._env = dict(env)
        self._say = say

    def get(self, name: str) -> Service:
        try:
            return self._services[name]
        except KeyError:
            known = ", ".join(self._services)
            raise DevstackError(f"unknown service {name!r}; known services: {known}") from None

    def up(self, *, skip: Iterable[str] = (), required: Iterable[str] = ()) -> list[Report]:
        """Start every service not in ``skip``; write the env file for all that answer."""
        skipped, needed = set(skip), set(required)
        self._state.create()
        reports = self._each(lambda service: self._up(service, skipped, needed))
        envfile.write(self._state.env_file, self.exports())
        return reports

    def down(self) -> list[Report]:
        """Stop what ``bh dev`` started; leave everything else running."""
        reports = self._each(self._down)
        self._state.env_file.unlink(missing_ok=True)
        return reports

    def status(self, *, required: Iterable[str] = ()) -> list[Report]:
        needed = set(required)
        return [replace(r, required=r.service in needed) for r in self._each(_inspect)]

    def restart(self, name: str) -> Report:
        """Stop and start one service afresh (for moto: empty again)."""
        service = self.get(name)
        if read_pidfile(service.pid_path) is None and service.ready():
            return _report(
                service, State.FAILED, "answering, but not started by bh dev: not restarting it"
            )
        self._down(service)
        report = self._up(service, set(), {name})
        envfile.write(self._state.env_file, self.exports())
        return report

    def exports(self) -> dict[str, str]:
        """The env of the services answering right now, whoever started them."""
        exports: dict[str, str] = {}
        for service, answers in zip(self._services.values(), self._each(_answers), strict=True):
            if answers:
                exports.update(service.exports)
        return exports

    def _each(self, action: Callable[[Service], T]) -> list[T]:
        with ThreadPoolExecutor(max_workers=len(self._services) or 1) as pool:
            return list(pool.map(action, self._services.values()))

    def _up(self, service: Service, skip: set[str], required: set[str]) -> Report:
        if service.name in skip:
            return _report(service, State.SKIPPED, required=False)
        report = self._ensure_up(service)
        return replace(report, required=service.name in required)

    def _ensure_up(self, service: Service) -> Report:
        record, stale = _live_record(service)
        note = "removed a stale pidfile; " if stale else ""
        if service.ready():
            if record is None:
                return _report(service, State.EXTERNAL, _external_detail(service))
            return self._refreshed(service, record)
        try:
            if record is not None and self._reuse(service, record):
                return _report(service, State.ALREADY_RUNNING, _running_detail(service, record))
            _check_ports_free(service)
            service.prepare()
            launches = service.launches()
        except DevstackError as exc:
            return _report(service, State.FAILED, note + str(exc))
        return self._start(service, launches, note)

    def _refreshed(self, service: Service, record: PidRecord) -> Report:
        """Our process answers: keep it, with this version's config (``refresh``)."""
        detail = _running_detail(service, record)
        try:
            done = service.refresh(record)
        except DevstackError as exc:
            return _report(service, State.FAILED, f"{detail}; {exc}")
        return _report(service, State.ALREADY_RUNNING, f"{detail}; {done}" if done else detail)

    def _reuse(self, service: Service, record: PidRecord) -> bool:
        """Our process runs but does not answer yet: wait for it, unless its command line
        is stale (ports changed) or it never answers; then stop it for a fresh start."""
        if record.argv in service.launches() and _await_ready(service, record):
            return True
        stop(record, timeout=service.stop_timeout)
        remove_pidfile(service.pid_path)
        return False

    def _start(self, service: Service, launches: Sequence[Argv], note: str) -> Report:
        failures: list[str] = []
        for attempt, argv in enumerate(launches):
            self._say(f"{service.name}: starting {shlex.join(argv)}")
            try:
                record = spawn(argv, log_path=service.log_path, env=self._child_env(service))
            except OSError as exc:
                return _report(service, State.FAILED, f"{note}cannot run {argv[0]}: {exc}")
            write_pidfile(service.pid_path, record)
            if _await_ready(service, record):
                fallback = f"; fell back to {argv[-1]}" if attempt else ""
                return _report(
                    service, State.STARTED, note + _running_detail(service, record) + fallback
                )
            failures.append(_why_not_ready(service, record, argv))
            stop(record, timeout=service.stop_timeout)
            remove_pidfile(service.pid_path)
        return replace(
            _report(service, State.FAILED, note + "; ".join(failures)),
            log_tail=log_tail(service.log_path),
        )

    def _child_env(self, service: Service) -> dict[str, str]:
        return {**self._env, **service.child_env}

    def _down(self, service: Service) -> Report:
        record = read_pidfile(service.pid_path)
        if record is None:
            remove_pidfile(service.pid_path)  # unreadable leftovers
            if service.ready():
                return _report(service, State.EXTERNAL, "not started by bh dev: left running")
            return _report(service, State.NOT_RUNNING)
        outcome = stop(record, timeout=service.stop_timeout)
        remove_pidfile(service.pid_path)
        if outcome is Stopped.ALREADY_GONE:
            return _report(service, State.NOT_RUNNING, "removed a stale pidfile")
        return _report(service, State.STOPPED, f"pid {record.pid} {outcome}")


def _inspect(service: Service) -> Report:
    """Status without side effects: a stale pidfile is reported, not removed."""
    record = read_pidfile(service.pid_path)
    running = record is not None and is_running(record)
    ready = service.ready()
    if record is not None and running:
        state = State.RUNNING if ready else State.NOT_ANSWERING
        detail = _running_detail(service, record) if ready else f"pid {record.pid}"
        return _report(service, state, detail)
    if ready:
        return _report(service, State.EXTERNAL, _external_detail(service))
    return _report(service, State.NOT_RUNNING, "stale pidfile" if record else "")


def _answers(service: Service) -> bool:
    return service.ready()


def _live_record(service: Service) -> tuple[PidRecord | None, bool]:
    """The pidfile record if its process runs; a stale pidfile is removed (-> stale=True)."""
    record = read_pidfile(service.pid_path)
    if record is not None and is_running(record):
        return record, False
    stale = service.pid_path.exists()
    remove_pidfile(service.pid_path)
    return None, stale


def _await_ready(service: Service, record: PidRecord) -> bool:
    return poll_until(
        service.ready, timeout=service.ready_timeout, give_up=lambda: not is_running(record)
    )


def _why_not_ready(service: Service, record: PidRecord, argv: Argv) -> str:
    if is_running(record):
        seconds = service.ready_timeout.total_seconds()
        return f"`{shlex.join(argv)}` not ready after {seconds:g}s"
    return f"`{shlex.join(argv)}` exited"


def _check_ports_free(service: Service) -> None:
    for port in service.ports:
        if probe.tcp_open(service.host, port):
            raise DevstackError(
                f"{service.host}:{port} is taken by a program that is not a {service.name} "
                "server bh dev can use: stop it, or pick other ports with BH_DEV_*_PORT"
            )


def _running_detail(service: Service, record: PidRecord) -> str:
    extra = service.detail()
    return f"pid {record.pid}" + (f", {extra}" if extra else "")


def _external_detail(service: Service) -> str:
    extra = service.detail()
    return "not started by bh dev" + (f", {extra}" if extra else "")


def _report(service: Service, state: State, detail: str = "", *, required: bool = True) -> Report:
    return Report(
        service=service.name,
        state=state,
        address=service.address,
        log_path=service.log_path,
        detail=detail,
        required=required,
    )
