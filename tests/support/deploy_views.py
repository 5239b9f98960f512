"""What each output of the service table (``bh.deploy.services``) says about a service,
in one shape, so a test can compare them: the rendered Kubernetes manifests, a compose
file, and the table itself.

A ``View`` holds the command, every environment variable (name → how its value is
given), the ports, the probes and the secret files. ``differences`` names what one view
says otherwise than the table, one line each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bh.deploy import SECRETS_DIR, Service, Source, Variable

#: a value the table leaves to the deployment (a setting written in place)
ANY = "<any>"


@dataclass(frozen=True)
class View:
    command: tuple[str, ...]
    #: name → ("value", literal) | ("configmap", key) | ("secret", key)
    env: Mapping[str, tuple[str, str]]
    ports: Mapping[str, int] = field(default_factory=dict)
    #: "live"/"ready" → (path, port number)
    probes: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    secrets: frozenset[str] = frozenset()


def table_view(service: Service, *, configmap: bool = True) -> View:
    """The table's view; ``configmap``: settings are ConfigMap keys (Kubernetes), else
    literal values of the deployment's own (compose)."""
    ports = {port.name: port.number for port in service.ports}
    probes = {}
    if service.probe is not None:
        number = ports[service.probe.port]
        probes = {"live": (service.probe.live, number), "ready": (service.probe.ready, number)}
    env = {v.name: _given(v, configmap) for v in service.env}
    return View(service.command, env, ports, probes, service.secrets)


def _given(variable: Variable, configmap: bool) -> tuple[str, str]:
    if variable.source is Source.SECRET_VALUE:
        return ("secret", variable.key or "") if configmap else ("value", ANY)
    if variable.source is Source.SETTING:
        if configmap and variable.key is not None:
            return ("configmap", variable.key)
        return ("value", ANY)
    return ("value", variable.value)


def differences(expected: View, found: View, where: str) -> list[str]:
    """What ``found`` (at ``where``) says otherwise than ``expected``, a line each."""
    lines: list[str] = []
    if found.command != expected.command:
        lines.append(f"{where}: command {found.command}, the table says {expected.command}")
    for name in sorted(expected.env.keys() - found.env.keys()):
        lines.append(f"{where}: {name} is missing")
    for name in sorted(found.env.keys() - expected.env.keys()):
        lines.append(f"{where}: {name} is not in the service table")
    for name in sorted(expected.env.keys() & found.env.keys()):
        want, got = expected.env[name], found.env[name]
        if want != got and not (want == ("value", ANY) and got[0] == "value"):
            lines.append(f"{where}: {name} is given as {got}, the table says {want}")
    for what in ("ports", "probes", "secrets"):
        want_any, got_any = getattr(expected, what), getattr(found, what)
        if want_any != got_any:
            lines.append(f"{where}: {what} {_show(got_any)}, the table says {_show(want_any)}")
    return lines


def _show(value: object) -> str:
    if isinstance(value, frozenset):
        return str(sorted(value))
    return str(dict(value)) if isinstance(value, Mapping) else str(value)


# -- Kubernetes ------------------------------------------------------------------------


def k8s_views(documents: Iterable[Mapping[str, Any]]) -> dict[str, View]:
    """component label → the view of its Deployment's or Job's service container."""
    views: dict[str, View] = {}
    for document in documents:
        if document.get("kind") not in {"Deployment", "Job"}:
            continue
        component = document["metadata"]["labels"]["app.kubernetes.io/component"]
        pod = document["spec"]["template"]["spec"]
        container = next(c for c in pod["containers"] if c["name"] == component)
        views[component] = _container_view(container, pod.get("volumes", []))
    return views


def _container_view(container: Mapping[str, Any], volumes: list[Mapping[str, Any]]) -> View:
    ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
    probes = {}
    for kind, key in (("live", "livenessProbe"), ("ready", "readinessProbe")):
        if key in container:
            get = container[key]["httpGet"]
            port = get["port"]
            probes[kind] = (get["path"], ports.get(port, port) if isinstance(port, str) else port)
    env = {item["name"]: _k8s_given(item) for item in container.get("env", [])}
    return View(tuple(container.get("args", ())), env, ports, probes, _secrets(container, volumes))


def _k8s_given(item: Mapping[str, Any]) -> tuple[str, str]:
    source = item.get("valueFrom")
    if source is None:
        return ("value", str(item.get("value", "")))
    if "configMapKeyRef" in source:
        return ("configmap", source["configMapKeyRef"]["key"])
    if "secretKeyRef" in source:
        return ("secret", source["secretKeyRef"]["key"])
    return ("other", str(source))


def _secrets(container: Mapping[str, Any], volumes: list[Mapping[str, Any]]) -> frozenset[str]:
    """The files of the volume mounted at ``SECRETS_DIR``."""
    mounted = [
        m["name"] for m in container.get("volumeMounts", []) if m["mountPath"] == SECRETS_DIR
    ]
    files: set[str] = set()
    for volume in volumes:
        if volume["name"] not in mounted:
            continue
        sources = volume.get("projected", {}).get("sources", [])
        for source in sources:
            files |= {item["path"] for item in source.get("secret", {}).get("items", [])}
    return frozenset(files)


# -- compose ---------------------------------------------------------------------------


def compose_views(document: Mapping[str, Any], image: str) -> dict[str, list[tuple[str, View]]]:
    """The table command (``brain``...) → (compose service name, view) of each service
    that runs ``image`` with that command."""
    found: dict[str, list[tuple[str, View]]] = {}
    for name, spec in (document.get("services") or {}).items():
        if image not in str(spec.get("image", "")) or not spec.get("command"):
            continue
        command = spec["command"]
        words = tuple(command.split() if isinstance(command, str) else command)
        env = {key: ("value", value) for key, value in _compose_env(spec).items()}
        secrets = frozenset(_compose_secret(item) for item in spec.get("secrets", []))
        view = View(words, env, {}, _compose_probes(spec), secrets)
        found.setdefault(words[0], []).append((name, view))
    return found


def _compose_env(spec: Mapping[str, Any]) -> dict[str, str]:
    env = spec.get("environment") or {}
    if isinstance(env, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in env.items()}
    return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)


def _compose_secret(item: str | Mapping[str, Any]) -> str:
    if isinstance(item, str):
        return item
    return str(item.get("target") or item["source"])


def _compose_probes(spec: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """The readiness path and port a compose healthcheck asks (compose has no liveness
    probe of its own: its healthcheck is the readiness one)."""
    test = spec.get("healthcheck", {}).get("test")
    text = " ".join(test) if isinstance(test, list) else str(test or "")
    for word in text.replace("'", " ").replace('"', " ").split():
        if "/readyz" in word and ":" in word:
            port = word.rsplit("/readyz", 1)[0]
            # a setting's default (``${BH_HANDS_PROBE_PORT:-8081}``) is the port it asks
            port = port.removesuffix("}").rsplit(":-" if port.endswith("}") else ":", 1)[-1]
            if port.isdigit():
                return {"ready": ("/readyz", int(port))}
    return {}
