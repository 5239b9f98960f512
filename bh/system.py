"""``bh up`` / ``bh down``: the whole system on one machine, each service its own process.

``bh up`` brings up the infrastructure (``bh dev up --require docker``), then the
scheduler, the Session API, the Hands API, N Brain workers and M Hands — each a separate
detached process of a ``bh.fleet.Fleet`` (the launcher the demo, the chaos harness and
the benchmarks use too), with its own log and pidfile under ``<dev home>/system/`` — waits for
the APIs to answer, writes ``<dev home>/system/env`` (API URLs and tokens, store URL,
namespace) and prints a status table. Running it again starts only what is not running;
``--brains``/``--hands`` grow or shrink the fleet. ``bh down`` stops them (SIGTERM, so
Brains hand their leases back; SIGKILL after a grace period).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bh import terminal
from bh.deploy import SERVICES, Kind, service
from bh.devstack.config import DevConfig
from bh.example_stack import EXAMPLES
from bh.fleet import Component, Fleet, from_table
from coordination import redis_client
from runtime.credentials import write_secret

console = terminal.console()
SESSION_API_PORT = service("session-api").port("api").number
HANDS_API_PORT = service("hands-api").port("api").number


@dataclass(frozen=True)
class Layout:
    root: Path

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def pidfile(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    @property
    def env_file(self) -> Path:
        return self.root / "env"

    @property
    def secrets_file(self) -> Path:
        return self.root / "secrets.json"

    def create(self) -> None:
        for sub in ("logs", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)


def layout() -> Layout:
    return Layout(DevConfig.from_env(os.environ).home / "system")


def up(
    brains: Annotated[int, typer.Option(help="Brain worker processes", min=0, max=99)] = 2,
    hands: Annotated[int, typer.Option(help="Hands processes", min=0, max=99)] = 1,
    store: Annotated[
        str | None, typer.Option(help="Session Store URL (default: SQLite in the dev home)")
    ] = None,
    plugin: Annotated[list[str] | None, typer.Option(help="Brain plugin, repeatable")] = None,
    sandboxed: Annotated[
        list[str] | None, typer.Option(help="registered tool the Brains run on the Hands")
    ] = None,
    sandbox: Annotated[str, typer.Option(help="the Hands' sandbox: docker or process")] = "docker",
    namespace: Annotated[str, typer.Option(help="bus and Redis prefix")] = "bh",
    infra: Annotated[bool, typer.Option(help="run `bh dev up` first")] = True,
    example: Annotated[
        str | None,
        typer.Option(help="also run an example's services and tools: five-emails or coding"),
    ] = None,
    approve: Annotated[
        list[str] | None,
        typer.Option(help="a tool (or JSON rule) whose calls need approval, repeatable"),
    ] = None,
) -> None:
    """Start the whole system on this machine (idempotent) and print its status."""
    place = layout()
    place.create()
    if infra:
        dev_up()
    env = system_env(
        {**os.environ, **dev_env()}, place, store=store, namespace=namespace, sandbox=sandbox
    )
    plugins, tools, extra = list(plugin or []), list(sandboxed or []), []
    if example is not None:
        if example not in EXAMPLES:
            raise typer.BadParameter(f"unknown example {example!r} (known: {', '.join(EXAMPLES)})")
        chosen = EXAMPLES[example](place.root, env)
        env |= chosen.env
        plugins += chosen.plugins
        tools += chosen.sandboxed
        extra = [Component(name, argv, health) for name, (argv, health) in chosen.services.items()]
        docker_url = env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        for reference in chosen.register(env["BH_STORE_URL"], docker_url):
            console.print(f"registered {reference}")
    rules = [arg for rule in approve or [] for arg in ("--approve", rule)]
    wanted = extra + _components(brains, hands, plugins, tools, sandbox, rules)
    fleet = Fleet(place.root, env, wanted, detached=True)
    fleet.ensure()
    fleet.retire()  # scaling down: brain-N / hands-N beyond the numbers asked for
    fleet.await_healthy()
    if brains:
        await_routes(env["BH_REDIS_URL"], namespace)
    exports = {
        "BH_STORE_URL": env["BH_STORE_URL"],
        "BH_NAMESPACE": namespace,
        "BH_SESSION_API_URL": f"http://127.0.0.1:{SESSION_API_PORT}",
        "BH_SESSION_API_TOKEN": env["BH_SESSION_API_TOKEN"],
        "BH_HANDS_API_URL": f"http://127.0.0.1:{HANDS_API_PORT}",
        "BH_HANDS_API_TOKEN": env["BH_HANDS_API_TOKEN"],
        "BH_METRICS_TOKEN": env["BH_METRICS_TOKEN"],
        # the workers' probe URLs (``/metrics`` is beside ``/readyz``), for ``bh doctor``
        "BH_PROBE_URLS": " ".join(
            c.health.removesuffix("/readyz") for c in wanted if c.health and c.env
        ),
    }
    # it holds the API tokens: 0600 from its first byte (write_secret), never printed
    write_secret(place.env_file, "".join(f"export {k}='{v}'\n" for k, v in exports.items()))
    _show(place)
    console.print(f'env written to {place.env_file}; load it with: eval "$(cat {place.env_file})"')


def down() -> None:
    """Stop every process `bh up` started (the infrastructure stays: `bh dev down`)."""
    for name, outcome in Fleet(layout().root, {}, [], detached=True).stop_detached().items():
        console.print(f"{name}: {outcome.value}")


def status() -> None:
    """Which system processes run, with their logs."""
    _show(layout())


def system_env(
    base: dict[str, str], place: Layout, *, store: str | None, namespace: str, sandbox: str
) -> dict[str, str]:
    """What every process gets: ``base`` (the environment, ``bh dev env``), the
    namespace, the sandbox, the store and the secrets ``bh up`` keeps."""
    env = {**base, "PYTHONUNBUFFERED": "1", "BH_NAMESPACE": namespace}
    env["BH_HANDS_SANDBOX"] = sandbox
    # No supervisor restarts what `bh up` started: a process that stays unready (Redis
    # down a while) waits for it to come back rather than exit (webapi.probes).
    env.setdefault("BH_UNREADY_LIMIT_S", "0")
    env["BH_STORE_URL"] = store or env.get("BH_STORE_URL") or f"sqlite:///{place.root}/store.db"
    return env | _secrets(place)


def _components(
    brains: int,
    hands: int,
    plugins: list[str],
    sandboxed: list[str],
    sandbox: str,
    approvals: list[str] | None = None,
) -> list[Component]:
    """The service table's long-running services as processes (the init job's work is
    done as they start: the store, the streams; tools are registered by ``--example``)."""
    brain_args: list[str] = []
    for path in plugins:
        brain_args += ["--plugin", path]
    for name in sandboxed:
        brain_args += ["--sandboxed", name]
    brain_args += approvals or []
    args = {"brain": tuple(brain_args), "hands": ("--sandbox", sandbox)}
    counts = {"brain": brains, "hands": hands}
    found: list[Component] = []
    for served in SERVICES:
        extra = args.get(served.name, ())
        if served.kind is Kind.JOB:
            continue
        if not served.scales:
            found.append(from_table(served, served.name, extra))
            continue
        found += [
            from_table(served, f"{served.name}-{n}", extra, n)
            for n in range(1, counts[served.name] + 1)
        ]
    return found


def await_routes(redis_url: str, namespace: str) -> None:
    """Brains take wakes once they advertised what they run: wait for the first."""

    client = redis_client.connect_sync(redis_url)
    try:
        deadline = time.monotonic() + 60
        while not client.hlen(f"{namespace}:routes"):
            if time.monotonic() > deadline:
                raise SystemExit("no Brain advertised what it runs within 60 s (see bh ps)")
            time.sleep(0.2)
    finally:
        client.close()


def _show(place: Layout) -> None:
    table = Table("process", "state", "pid", "log", title=f"bh up ({place.root})")
    for name, pid in Fleet(place.root, {}, [], detached=True).running().items():
        table.add_row(
            name,
            "[green]running[/]" if pid is not None else "[red]stopped[/]",
            str(pid or ""),
            str(place.log(name)),
        )
    console.print(table)


def _secrets(place: Layout) -> dict[str, str]:
    """API tokens, the Hands' proxy secret and the examples' tokens: made once, kept
    (0600) beside the pids; one missing from an older file is added."""
    saved: dict[str, str] = (
        json.loads(place.secrets_file.read_text()) if place.secrets_file.exists() else {}
    )
    made = {
        "BH_SESSION_API_TOKEN": secrets.token_urlsafe(24),
        "BH_HANDS_API_TOKEN": secrets.token_urlsafe(24),
        # the workers' /metrics (Brain, Hands, scheduler: beside their probes)
        "BH_METRICS_TOKEN": secrets.token_urlsafe(24),
        "BH_HANDS_SECRET": secrets.token_hex(32),
        "BH_EMAIL_SERVICE_TOKEN": secrets.token_urlsafe(24),
        "BH_SCRIPTED_MODEL_TOKEN": secrets.token_urlsafe(24),
    }
    if made.keys() <= saved.keys():
        return saved
    kept = made | saved
    write_secret(place.secrets_file, json.dumps(kept))
    return kept


def dev_up() -> None:
    """``bh dev up --require docker``: the infrastructure, started where not running."""
    done = subprocess.run(
        [sys.executable, "-m", "bh.cli", "dev", "up", "--require", "docker"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        console.print(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit("the infrastructure did not come up (bh dev up)")


def dev_env() -> dict[str, str]:
    """What ``bh dev env`` exports: the infrastructure's addresses."""
    text = subprocess.run(
        [sys.executable, "-m", "bh.cli", "dev", "env"], capture_output=True, text=True, check=True
    ).stdout
    values = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            values[key] = value.strip("'\"")
    return values
