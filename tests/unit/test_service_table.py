"""One service table (``bh.deploy.services``), three outputs: the Kubernetes manifests
(every overlay, rendered), ``bh up``'s processes, and the compose file
(``infra/compose/compose.yaml``, when it exists) say the same about each service — its
command, environment variable names (and fixed values), ports, probes and secret
files — so none of them can drift from the others unnoticed."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from bh import system
from bh.deploy import SECRETS_DIR, SERVICES, Kind, Source, service
from bh.devstack.auth import ROLES
from bh.fleet import Fleet
from tests.support.deploy_views import View, compose_views, differences, k8s_views, table_view
from tests.support.k8s import OVERLAYS, documents
from tests.support.processes import ROOT

COMPOSE = ROOT / "infra" / "compose" / "compose.yaml"
IMAGE = "brainhands/service"


def test_the_table_holds_together() -> None:
    assert [s.name for s in SERVICES] == [
        "init", "scheduler", "session-api", "hands-api", "brain", "hands",
    ]  # fmt: skip
    for served in SERVICES:
        names = [v.name for v in served.env]
        assert len(names) == len(set(names)), served.name
        if served.probe is not None:
            assert served.port(served.probe.port).variable in names
        if served.kind is not Kind.JOB:
            assert served.probe is not None and served.module, served.name
        assert ("DOCKER_HOST" in names) == served.engine, served.name
        for variable in served.env:
            if variable.source is Source.SECRET_FILE:
                assert variable.value == f"{SECRETS_DIR}/{variable.secret}"
            if variable.secret is not None:
                assert variable.value.endswith(f"{SECRETS_DIR}/{variable.secret}"), variable
        if served.nats_role is None:
            assert "BH_NATS_URL" not in names
            continue
        assert served.nats_role in ROLES
        nats = served.variable("BH_NATS_URL")
        assert urlsplit(nats.value).username == served.nats_role
        assert nats.secret == f"nats-{served.nats_role}.pass"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_kubernetes_manifests_agree_with_the_table(overlay: str) -> None:
    drift = _k8s_drift(documents(overlay))
    assert not drift, "\n".join(drift)


def test_a_variable_dropped_from_a_manifest_is_caught() -> None:
    """The check fails on drift: the Brain's container without its Redis URL."""
    found = documents("prod")
    brain = next(
        d for d in found if d["metadata"].get("name") == "brain" and "template" in d["spec"]
    )
    container = brain["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [item for item in container["env"] if item["name"] != "BH_REDIS_URL"]
    assert _k8s_drift(found) == ["kubernetes brain: BH_REDIS_URL is missing"]


def _k8s_drift(found: list[dict[str, Any]]) -> list[str]:
    views = k8s_views(found)
    lines = [f"kubernetes: no workload for {s.name}" for s in SERVICES if s.name not in views]
    for served in SERVICES:
        if served.name in views:
            lines += differences(
                table_view(served), views[served.name], f"kubernetes {served.name}"
            )
    config = next(d for d in found if d["kind"] == "ConfigMap" and "store-url" in d["data"])
    for served in SERVICES:
        for variable in served.env:
            if variable.source is not Source.SETTING or variable.key is None:
                continue
            value = config["data"].get(variable.key)
            if value is None:
                lines.append(f"kubernetes: the ConfigMap has no {variable.key}")
            elif variable.secret and f"passfile={SECRETS_DIR}/{variable.secret}" not in value:
                lines.append(f"kubernetes: {variable.key} does not name {variable.secret}")
            elif variable.name == "BH_NATS_URL" and urlsplit(value).username != served.nats_role:
                lines.append(f"kubernetes: {variable.key} is not the {served.nats_role} user")
    return lines + _k8s_ports(found)


def _k8s_ports(found: list[dict[str, Any]]) -> list[str]:
    """Each API's Service and ingress policy open its table port."""
    lines = []
    for served in (s for s in SERVICES if s.kind is Kind.API):
        port = served.port("api").number
        services = [
            d for d in found if d["kind"] == "Service" and d["metadata"]["name"] == served.name
        ]
        if [p["port"] for s in services for p in s["spec"]["ports"]] != [port]:
            lines.append(f"kubernetes: the {served.name} Service does not serve {port}")
        opened = [
            p["port"]
            for d in found
            if d["kind"] == "NetworkPolicy"
            and d["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component")
            == served.name
            for rule in d["spec"].get("ingress", [])
            for p in rule.get("ports", [])
        ]
        if opened != [port]:
            lines.append(f"kubernetes: {served.name}'s ingress opens {opened}, not [{port}]")
    return lines


def test_bh_up_runs_the_table(tmp_path: Path) -> None:
    """``bh up``'s processes are the table's long-running services, started as their
    modules, probed on their readiness path, each given every variable the table says
    one host needs (under its local name), and NATS as the table's role."""
    components = system._components(2, 2, [], [], "process")
    dev = {
        "BH_REDIS_URL": "redis://127.0.0.1:16379/0?passfile=/x/redis.pass",
        "BH_NATS_URL": "nats://operator@127.0.0.1:14222?passfile=/x/nats-operator.pass",
        **{
            f"BH_NATS_URL_{role.upper()}": f"nats://{role}@127.0.0.1:14222?passfile=/x/{role}"
            for role in ROLES
        },
    }
    env = system.system_env(
        dev, system.Layout(tmp_path), store=None, namespace="bh", sandbox="process"
    )
    fleet = Fleet(tmp_path, env, components, detached=True)
    names = [c.name for c in components]
    assert names == [
        "scheduler",
        "session-api",
        "hands-api",
        "brain-1",
        "brain-2",
        "hands-1",
        "hands-2",
    ]
    for component in components:
        served = service(
            component.name.rsplit("-", 1)[0] if component.name[-1].isdigit() else component.name
        )
        assert component.argv[1 : 2 + len(served.module)] == ("-m", *served.module), component
        assert served.probe is not None and component.health is not None
        health = urlsplit(component.health)
        assert health.path == served.probe.ready
        if served.kind is Kind.API:
            port = served.port("api").number
            assert health.port == port and ("--port", str(port)) == component.argv[-2:]
        else:
            assert dict(component.env) == {"BH_PROBE_PORT": str(health.port)}
        given = fleet.environment(component.name)
        needed = {v.local_name for v in served.env if v.local_name is not None}
        assert needed - given.keys() == set(), component.name
        nats = given.get("BH_NATS_URL")
        assert (urlsplit(nats).username if nats else None) == served.nats_role, component.name


def test_the_compose_file_agrees_with_the_table() -> None:
    if not COMPOSE.exists():
        pytest.skip(f"{COMPOSE.relative_to(ROOT)} is not written yet (the compose deployment)")
    drift = compose_drift(yaml.safe_load(COMPOSE.read_text()))
    assert not drift, "\n".join(drift)


def test_the_compose_check_catches_drift() -> None:
    """The compose comparison on a file made from the table: clean, then with a secret
    and a variable gone and a probe on another port, each named."""
    document = _compose_from_table()
    assert compose_drift(document) == []
    hands = document["services"]["hands"]
    del hands["environment"]["BH_HANDS_SECRET_FILE"]
    hands["secrets"].remove("hands.secret")
    document["services"]["scheduler-1"]["healthcheck"]["test"][-1] = "http://127.0.0.1:9/readyz"
    assert compose_drift(document) == [
        "compose scheduler-1: probes {'ready': ('/readyz', 9)}, the table says "
        "{'ready': ('/readyz', 8081)}",
        "compose hands: BH_HANDS_SECRET_FILE is missing",
        "compose hands: secrets ['hands.credentials', 'metrics.tokens', 'nats-hands.pass', "
        "'store.credentials'], the table says ['hands.credentials', 'hands.secret', "
        "'metrics.tokens', 'nats-hands.pass', 'store.credentials']",
    ]


def compose_drift(document: dict[str, Any]) -> list[str]:
    views = compose_views(document, IMAGE)
    lines = []
    for served in SERVICES:
        if served.command[0] not in views:
            lines.append(f"compose: no service runs {IMAGE} {served.command[0]}")
            continue
        wanted = table_view(served, configmap=False)
        # compose probes readiness only (its healthcheck), and publishes no port of its own
        ready = {k: v for k, v in wanted.probes.items() if k == "ready"}
        wanted = View(wanted.command, wanted.env, {}, ready, wanted.secrets)
        for name, found in views[served.command[0]]:
            lines += differences(wanted, found, f"compose {name}")
    return lines


def _compose_from_table() -> dict[str, Any]:
    services: dict[str, Any] = {}
    for served in SERVICES:
        spec: dict[str, Any] = {
            "image": f"{IMAGE}:0.1.0",
            "command": list(served.command),
            "environment": {v.name: v.value for v in served.env},
            "secrets": sorted(served.secrets),
        }
        if served.probe is not None:
            port = served.port(served.probe.port).number
            url = f"http://127.0.0.1:{port}{served.probe.ready}"
            spec["healthcheck"] = {"test": ["CMD", "bh-probe", url]}
        names = ["scheduler-1", "scheduler-2"] if served.name == "scheduler" else [served.name]
        services |= {name: spec for name in names}
    return {"services": {name: yaml.safe_load(yaml.safe_dump(s)) for name, s in services.items()}}
