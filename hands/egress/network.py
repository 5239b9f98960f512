"""The internal Docker network of egress-allowed containers (created idempotently).

``internal=True``: Docker installs no route out of it; inter-container traffic is off
(``enable_icc=false``) so two operations never talk to each other; masquerading is
off. What remains reachable is the host on the bridge, which ``BridgeFirewall`` limits
to the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
import requests

from contracts import InvalidInput, StoreUnavailable

log = logging.getLogger(__name__)

_ICC = "com.docker.network.bridge.enable_icc"
_MASQUERADE = "com.docker.network.bridge.enable_ip_masquerade"
_BRIDGE_NAME = "com.docker.network.bridge.name"
LABEL_EGRESS = "io.brainhands.egress"


@dataclass(frozen=True, kw_only=True, slots=True)
class EgressNetwork:
    name: str
    id: str
    #: the host interface of the bridge (``br-<id[:12]>`` unless named)
    bridge: str
    #: the host's address on the bridge: where the proxy listens
    gateway: str
    subnet: str


async def ensure_egress_network(
    *, docker_url: str, name: str = "bh-egress", api_timeout: float = 120.0
) -> EgressNetwork:
    """The internal network ``name``, created when absent; refuses one that exists with
    weaker settings (not internal, or containers allowed to talk to each other)."""
    return await asyncio.to_thread(_ensure, docker_url, name, api_timeout)


async def remove_egress_network(*, docker_url: str, name: str, api_timeout: float = 120.0) -> None:
    """Remove every network called ``name``, or the one whose id it is (absent is fine;
    fails while containers are attached)."""
    await asyncio.to_thread(_remove, docker_url, name, api_timeout)


def _ensure(docker_url: str, name: str, api_timeout: float) -> EgressNetwork:
    """The engine's duplicate check is not atomic: Hands starting together on one host
    can each create a network called ``name``, and then the engine refuses to start a
    container on either, even one named by its full id (Docker 20.10: "network … is
    ambiguous"). So every Hands takes the oldest network of the name and removes the
    other ones; the engine refuses to remove a network a container uses, so a twin in
    use stays (and is logged), and none that is idle outlives this call.

    A network is stamped when its creation starts and listed when it ends, so a Hands
    may list only its own network while an older twin is still being set up; the Hands
    that lists both removes this one. The choice is therefore made again until the
    network chosen is still there, and still the oldest, after it was inspected — and,
    when this call created a network or met twins (Hands are starting together), still
    so ``_SETTLE_S`` later, when creations begun meanwhile have been listed."""
    with _client(docker_url, api_timeout) as api:
        for attempt in range(_ATTEMPTS):
            oldest, raced = _settle(api, name)
            network: dict[str, Any] | None = None
            if oldest is not None:
                with contextlib.suppress(docker.errors.NotFound):  # another Hands removed it
                    network = api.inspect_network(oldest["Id"])
            stable = network is not None and _oldest_id(_called(api, name)) == network["Id"]
            if network is not None and stable and not raced:
                return _described(network)
            time.sleep(_SETTLE_S if stable else 0.05 * (attempt + 1))
        raise StoreUnavailable(
            f"egress network {name}: Hands on this engine kept replacing it "
            f"({_ATTEMPTS} attempts); try again"
        )


_ATTEMPTS = 8
#: how long Hands that raced wait before trusting their choice: longer than a network's
#: creation takes from its stamp to its listing, even on a loaded engine
_SETTLE_S = 1.0


def _settle(api: Any, name: str) -> tuple[dict[str, Any] | None, bool]:
    """The oldest network called ``name`` (created when there is none), the younger
    ones removed where the engine allows; and whether this raced (it created one, or
    met twins)."""
    called = _called(api, name)
    raced = len(called) > 1
    if not called:
        raced = True
        _create(api, name)
        called = _called(api, name)
        if not called:
            return None, True  # removed at once by a Hands that had listed it as a twin
    oldest, *twins = sorted(called, key=_age)
    for twin in twins:
        try:
            api.remove_network(twin["Id"])
        except docker.errors.NotFound:
            pass  # another Hands removed it first
        except docker.errors.APIError as error:
            log.warning("egress network %s: a twin stays: %s", name, error)
    return oldest, raced


def _create(api: Any, name: str) -> None:
    """Create the network; one that another Hands created meanwhile is as good (an
    engine that refuses a duplicate name answers 409: Docker 25 and later always, older
    ones when asked to check), and the caller lists the networks again."""
    try:
        api.create_network(
            name,
            driver="bridge",
            internal=True,
            options={_ICC: "false", _MASQUERADE: "false"},
            labels={LABEL_EGRESS: "1"},
        )
    except docker.errors.APIError as error:
        if error.status_code != 409:
            raise
        log.info("egress network %s: created by another Hands meanwhile", name)


def _oldest_id(called: list[dict[str, Any]]) -> str | None:
    return min(called, key=_age)["Id"] if called else None


def _called(api: Any, name: str) -> list[dict[str, Any]]:
    """The networks named exactly ``name`` (the engine's filter matches substrings)."""
    return [n for n in api.networks(names=[name]) if n["Name"] == name]


def _age(network: dict[str, Any]) -> tuple[str, str, str]:
    """A sort key of creation time: RFC 3339 from one engine, whose fraction of a second
    drops trailing zeros (so it is padded before comparing), then the id."""
    stamp = network.get("Created") or ""
    fraction = stamp[20:] if stamp[19:20] == "." else ""
    digits = fraction[: len(fraction) - len(fraction.lstrip("0123456789"))]
    return stamp[:19], digits.ljust(9, "0"), network["Id"]


def _remove(docker_url: str, name: str, api_timeout: float) -> None:
    with _client(docker_url, api_timeout) as api:
        for network in [n["Id"] for n in _called(api, name)] or [name]:
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_network(network)


def _described(network: dict[str, Any]) -> EgressNetwork:
    name, options = network["Name"], network.get("Options") or {}
    if not network.get("Internal") or options.get(_ICC) != "false":
        raise InvalidInput(
            f"docker network {name} exists but is not internal with inter-container "
            "traffic disabled; remove it or configure another egress network name"
        )
    subnet, gateway = _ipv4(network)
    bridge = options.get(_BRIDGE_NAME) or f"br-{network['Id'][:12]}"
    return EgressNetwork(
        name=name, id=network["Id"], bridge=bridge, gateway=gateway, subnet=str(subnet)
    )


def bridge_gateway(network: dict[str, Any]) -> str:
    """The host's address on a bridge network, from its ``inspect_network``: the IPv4
    config's ``Gateway``, or the subnet's first address when the engine left it out (a
    fresh dockerd's default bridge does)."""
    return _ipv4(network)[1]


def _ipv4(network: dict[str, Any]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]:
    configs = (network.get("IPAM") or {}).get("Config") or []
    subnets = [c for c in configs if ipaddress.ip_network(c["Subnet"]).version == 4]
    if not subnets:
        raise InvalidInput(f"docker network {network.get('Name')} has no IPv4 subnet")
    subnet = ipaddress.ip_network(subnets[0]["Subnet"])
    return subnet, subnets[0].get("Gateway") or str(next(subnet.hosts()))


@contextlib.contextmanager
def _client(docker_url: str, api_timeout: float) -> Iterator[Any]:
    """A short-lived API client whose errors leave as the project's errors."""
    api = docker.APIClient(base_url=docker_url, version="1.41", timeout=api_timeout)
    try:
        yield api
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as error:
        raise StoreUnavailable(f"docker engine unreachable: {error}") from error
    except docker.errors.APIError as error:
        message = f"docker refused the egress network: {error.explanation or error}"
        if (error.status_code or 500) >= 500:
            raise StoreUnavailable(message) from error
        raise InvalidInput(message) from error
    except docker.errors.DockerException as error:
        raise StoreUnavailable(f"docker engine unreachable: {error}") from error
    finally:
        api.close()
