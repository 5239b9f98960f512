"""A deployment's sandbox namespace: carried by its containers' names and labels, the
same for every Hands of one deployment, different for two deployments on one engine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.tool import DispatchMode
from hands.sandbox import container_name
from hands.settings import HandsSettings


def settings(store_url: str, **fields: object) -> HandsSettings:
    return HandsSettings.model_validate({"store_url": store_url, "nats_url": "nats://x", **fields})


def test_by_default_the_namespace_is_derived_from_where_the_store_is() -> None:
    one = settings("redis://:secret@Store.example:6379/0").owner
    assert one == settings("redis://store.example:6379/0").owner  # credentials left out
    assert one != settings("redis://store.example:6379/1").owner
    assert settings("sqlite:///var/a.db").owner == settings("sqlite:////var/./a.db").owner
    assert settings("sqlite:///var/a.db").owner != settings("sqlite:///var/b.db").owner
    assert one.startswith("store-")


def test_a_configured_namespace_wins_and_must_be_name_safe() -> None:
    assert settings("sqlite:///a.db", owner="team-a").owner == "team-a"
    with pytest.raises(ValidationError, match="namespace"):
        settings("sqlite:///a.db", owner="team_a")


def test_names_carry_the_namespace_and_never_collide() -> None:
    assert container_name("op-1", namespace="team-a") == "bh-team-a_op-1"
    assert container_name("op-1", DispatchMode.QUERY, namespace="a") == "bh-a_op-1-query"
    assert container_name("op-1", namespace="a") != container_name("op-1", namespace="b")
