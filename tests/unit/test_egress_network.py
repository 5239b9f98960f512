"""Finding a Docker bridge's host address from ``inspect_network``, as a fresh engine
reports it: on the first start after installing docker.io the bridge's IPAM config may
hold a subnet and no ``Gateway`` (the host then has the subnet's first address)."""

from __future__ import annotations

from typing import Any

import docker.errors  # type: ignore[import-untyped]
import requests

from hands.egress.network import _settle, bridge_gateway
from tests.integration.test_sandbox_hardening import docker_bridge_gateway

FRESH_BRIDGE: dict[str, Any] = {
    "Name": "bridge",
    "Id": "0123456789abcdef0123",
    "IPAM": {"Driver": "default", "Options": None, "Config": [{"Subnet": "172.17.0.0/16"}]},
    "Options": {"com.docker.network.bridge.name": "docker0"},
}


class FreshEngine:
    def inspect_network(self, name: str) -> dict[str, Any]:
        assert name == "bridge"
        return FRESH_BRIDGE


def test_a_bridge_without_a_gateway_key_has_its_subnets_first_address() -> None:
    assert bridge_gateway(FRESH_BRIDGE) == "172.17.0.1"


def test_the_hardening_tests_find_the_bridge_address_the_way_the_product_does() -> None:
    assert docker_bridge_gateway(FreshEngine()) == "172.17.0.1"


def test_a_configured_gateway_wins() -> None:
    configured = {
        **FRESH_BRIDGE,
        "IPAM": {"Config": [{"Subnet": "10.9.0.0/24", "Gateway": "10.9.0.254"}]},
    }
    assert bridge_gateway(configured) == "10.9.0.254"


class RefusingEngine:
    """An engine that refuses a duplicate name (409, as Docker 25+ always does): another
    Hands created the network between this one's listing and its create."""

    def __init__(self) -> None:
        self.listed: list[dict[str, Any]] = []
        self.created = 0

    def networks(self, names: list[str]) -> list[dict[str, Any]]:
        return list(self.listed)

    def create_network(self, name: str, **options: Any) -> dict[str, str]:
        self.created += 1
        self.listed = [{"Name": name, "Id": "f" * 64, "Created": "2026-12-06T10:00:00.5Z"}]
        answer = requests.Response()
        answer.status_code = 409
        raise docker.errors.APIError(
            "409 Client Error: Conflict", response=answer, explanation=f"network {name} exists"
        )


def test_a_network_another_hands_created_meanwhile_is_taken_not_an_error() -> None:
    """Issue 31, finding 11: a 409 from the create is the race lost, not a failure."""
    engine = RefusingEngine()
    oldest, raced = _settle(engine, "bh-egress")
    assert oldest is not None and oldest["Id"] == "f" * 64
    assert raced and engine.created == 1
