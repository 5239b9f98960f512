"""Several Hands share one egress network by name and may start at the same moment: the
engine's duplicate check is not atomic, so two of them can create two networks of the
same name, and then every lookup by name is ambiguous. A Hands keeps the network it
created, one that finds several takes the oldest, and each uses its network by id."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from hands.egress.network import ensure_egress_network, remove_egress_network

DOCKER = "unix:///var/run/docker.sock"


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.APIClient(base_url=DOCKER, timeout=120)
    yield client
    client.close()


@pytest.fixture
def name(engine: Any) -> Iterator[str]:
    name = f"bh-race-{uuid.uuid4().hex[:8]}"
    yield name
    for network in engine.networks(names=[name]):
        engine.remove_network(network["Id"])


def _twin(engine: Any, name: str) -> str:
    return engine.create_network(
        name,
        driver="bridge",
        internal=True,
        options={"com.docker.network.bridge.enable_icc": "false"},
        check_duplicate=False,
    )["Id"]


def _named(engine: Any, name: str) -> list[str]:
    return [n["Id"] for n in engine.networks(names=[name]) if n["Name"] == name]


async def test_of_two_networks_of_one_name_the_oldest_is_taken_and_none_removed(
    engine: Any, name: str
) -> None:
    first, second = _twin(engine, name), _twin(engine, name)

    network = await ensure_egress_network(docker_url=DOCKER, name=name)

    assert network.id == first
    assert set(_named(engine, name)) == {first, second}
    await remove_egress_network(docker_url=DOCKER, name=name)
    assert _named(engine, name) == []


async def test_hands_starting_together_each_get_a_network_they_can_use(
    engine: Any, name: str
) -> None:
    for _ in range(3):
        networks = await asyncio.gather(
            *(ensure_egress_network(docker_url=DOCKER, name=name) for _ in range(4))
        )
        for network in networks:
            inspected = engine.inspect_network(network.id)
            assert inspected["Name"] == name and inspected["Internal"]
        later = await ensure_egress_network(docker_url=DOCKER, name=name)
        assert later.id in {n.id for n in networks}
        await remove_egress_network(docker_url=DOCKER, name=name)
        assert _named(engine, name) == []
