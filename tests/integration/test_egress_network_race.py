"""Several Hands share one egress network by name and may start at the same moment: the
engine's duplicate check is not atomic, so two of them can create two networks of the
same name, and then the engine refuses to start a container on either — even one named by
its full id (Docker 20.10: "network … is ambiguous"). Every Hands takes the oldest and
removes the empty twins, so one network of the name is left and containers start on it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from hands.egress.network import ensure_egress_network, remove_egress_network
from tests.support.images import tool_images

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


def _starts_on(engine: Any, network: str) -> None:
    """A container joins ``network`` (by id, as the sandbox names it) and runs."""
    image = tool_images()["brainhands/base:bookworm"]
    container = engine.create_container(
        image, command=["true"], host_config=engine.create_host_config(network_mode=network)
    )
    try:
        engine.start(container)
        assert engine.wait(container, timeout=60)["StatusCode"] == 0
    finally:
        engine.remove_container(container, force=True)


async def test_of_two_networks_of_one_name_the_oldest_is_taken_and_the_twin_removed(
    engine: Any, name: str
) -> None:
    first, second = _twin(engine, name), _twin(engine, name)

    network = await ensure_egress_network(docker_url=DOCKER, name=name)

    assert network.id == first
    assert _named(engine, name) == [first]
    _starts_on(engine, network.id)
    assert second not in {n["Id"] for n in engine.networks()}
    await remove_egress_network(docker_url=DOCKER, name=name)
    assert _named(engine, name) == []


async def test_a_network_another_hands_removed_after_it_was_listed_is_looked_for_again(
    engine: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine stamps a network's creation before it is listed: a Hands can list only
    its own network while a twin created a moment earlier is still being set up, and the
    other Hands, which lists both, removes the younger one — this Hands' choice — before
    this Hands inspects it (the clean-clone run: "network … not found")."""
    import hands.egress.network as egress

    chosen = _twin(engine, name)
    listed = egress._called
    calls = 0

    def racing(api: Any, wanted: str) -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        found = listed(api, wanted)
        if calls == 1:
            engine.remove_network(chosen)  # the other Hands, between list and inspect
        return found

    monkeypatch.setattr(egress, "_called", racing)

    network = await ensure_egress_network(docker_url=DOCKER, name=name)

    assert network.id != chosen and _named(engine, name) == [network.id]
    _starts_on(engine, network.id)


async def test_an_older_twin_listed_only_after_this_hands_chose_its_own_is_taken(
    engine: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another Hands' network, stamped first, is still being set up while this Hands
    creates its own, lists it alone and confirms it: the other then removes this one as
    the younger twin (the clean-clone run: the four Hands came back with two networks,
    one gone). A Hands that created a network checks again a settling moment later."""
    import hands.egress.network as egress

    older = _twin(engine, name)  # stamped first, listed only from the fourth listing on
    listed = egress._called
    calls = 0

    def late(api: Any, wanted: str) -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        found = listed(api, wanted)
        return [n for n in found if n["Id"] != older] if calls <= 3 else found

    monkeypatch.setattr(egress, "_called", late)

    network = await ensure_egress_network(docker_url=DOCKER, name=name)

    assert network.id == older and _named(engine, name) == [older]


async def test_hands_starting_together_each_get_a_network_they_can_use(
    engine: Any, name: str
) -> None:
    for _ in range(3):
        networks = await asyncio.gather(
            *(ensure_egress_network(docker_url=DOCKER, name=name) for _ in range(4))
        )
        assert {network.id for network in networks} == set(_named(engine, name))
        assert len(_named(engine, name)) == 1
        inspected = engine.inspect_network(networks[0].id)
        assert inspected["Name"] == name and inspected["Internal"]
        _starts_on(engine, networks[0].id)
        later = await ensure_egress_network(docker_url=DOCKER, name=name)
        assert later.id in {n.id for n in networks}
        await remove_egress_network(docker_url=DOCKER, name=name)
        assert _named(engine, name) == []
