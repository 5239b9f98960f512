"""Finding a Docker bridge's host address from ``inspect_network``, as a fresh engine
reports it: on the first start after installing docker.io the bridge's IPAM config may
hold a subnet and no ``Gateway`` (the host then has the subnet's first address)."""

from __future__ import annotations

from typing import Any

from hands.egress.network import bridge_gateway
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
