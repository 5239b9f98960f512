"""The tool catalog on every backend: registrations, rebuilt images of the same recipe,
grant changes as revisions, their history, races between changes, and records written
before revisions existed.

Run against SQLite, S3 (moto, and radosgw where it runs) and DynamoDB through the
``location`` fixture, like the rest of the store's conformance suite.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts import AlreadyExists, ConflictError, NotFound, ReadOnlyStore
from contracts.tool import NetworkPolicy, ToolChange, ToolDefinition
from session_store import SessionStore, layout
from session_store.codec import encode
from tests.support.stores import SUITE_BACKENDS, StoreLocation, location_fixture

pytestmark = pytest.mark.store

location = location_fixture(SUITE_BACKENDS)  # also on radosgw

RECIPE = "sha256:" + "a" * 64
OTHER_RECIPE = "sha256:" + "b" * 64


def tool(image_id: str = "sha256:" + "1" * 64, **fields: Any) -> ToolDefinition:
    values: dict[str, Any] = {
        "name": "send_email",
        "version": 1,
        "image": "brainhands/tool-send-email:latest",
        "image_id": image_id,
        "recipe": RECIPE,
        "network": NetworkPolicy(allow=("127.0.0.1:8025",)),
        "registered_by": "test",
        **fields,
    }
    return ToolDefinition.model_validate(values)


REBUILT = "sha256:" + "2" * 64
BUILD = "sha256:" + "c" * 64
EMAIL = NetworkPolicy(allow=("mail.internal:8025",))


# --- registering ------------------------------------------------------------------


async def test_the_same_image_again_changes_nothing(location: StoreLocation) -> None:
    store = await location.open()
    first, created = await store.tools.registration(tool())
    again, changed = await store.tools.registration(tool())
    assert (created, changed) == (ToolChange.REGISTERED, None)
    assert again == first and first.revision == 1
    assert [r.change for r in await store.tools.history("send_email", 1)] == [ToolChange.REGISTERED]


async def test_a_rebuilt_image_of_the_same_recipe_is_a_new_revision(
    location: StoreLocation,
) -> None:
    store = await location.open()
    await store.tools.register(tool())
    revised, change = await store.tools.registration(tool(REBUILT))
    assert change is ToolChange.REBUILT
    assert (revised.image_id, revised.revision) == (REBUILT, 2)
    current = await (await location.open()).tools.get("send_email", 1)
    assert current == revised  # what the Hands run from now on
    history = await store.tools.history("send_email", 1)
    assert [(r.definition.revision, r.change) for r in history] == [
        (1, ToolChange.REGISTERED),
        (2, ToolChange.REBUILT),
    ]
    assert REBUILT in history[1].detail and history[0].definition.image_id in history[1].detail
    again, unchanged = await store.tools.registration(tool(REBUILT))
    assert (again, unchanged) == (revised, None)


async def test_a_rebuild_keeps_the_grant_an_operator_changed(location: StoreLocation) -> None:
    store = await location.open()
    await store.tools.register(tool())
    await store.tools.grant("send_email", 1, EMAIL, by="ops", reason="the mail host moved")
    revised = await store.tools.register(tool(REBUILT, build=BUILD))
    assert (revised.revision, revised.image_id, revised.network) == (3, REBUILT, EMAIL)
    assert revised.build == BUILD


async def test_another_recipe_under_a_registered_version_is_refused(
    location: StoreLocation,
) -> None:
    store = await location.open()
    first = await store.tools.register(tool())
    with pytest.raises(AlreadyExists, match="send_email@1") as refused:
        await store.tools.register(tool(REBUILT, recipe=OTHER_RECIPE))
    assert "\n" not in refused.value.message and "new version" in refused.value.message
    assert await store.tools.get("send_email", 1) == first
    assert len(await store.tools.history("send_email", 1)) == 1


async def test_an_image_built_from_the_registered_one_is_not_a_rebuild(
    location: StoreLocation,
) -> None:
    """Same recipe and build hash, another image: not made by a build (it skips), but by
    a ``FROM`` the registered image, whose labels it inherited."""
    store = await location.open()
    first = await store.tools.register(tool(build=BUILD))
    with pytest.raises(AlreadyExists, match="built FROM it"):
        await store.tools.register(tool(REBUILT, build=BUILD))
    rebuilt = await store.tools.register(tool(REBUILT, build="sha256:" + "d" * 64))
    assert (rebuilt.revision, first.revision) == (2, 1)


@pytest.mark.parametrize(("stored", "offered"), [(None, RECIPE), (RECIPE, None), (None, None)])
async def test_without_a_recipe_on_both_sides_only_the_same_image_is_accepted(
    location: StoreLocation, stored: str | None, offered: str | None
) -> None:
    store = await location.open()
    first = await store.tools.register(tool(recipe=stored))
    assert await store.tools.register(tool(recipe=offered)) == first
    with pytest.raises(AlreadyExists, match="send_email@1"):
        await store.tools.register(tool(REBUILT, recipe=offered))


async def test_racing_registrations_of_one_rebuilt_image_make_one_revision(
    location: StoreLocation,
) -> None:
    await (await location.open()).tools.register(tool())
    stores = [await location.open() for _ in range(4)]
    results = await asyncio.gather(*(s.tools.registration(tool(REBUILT)) for s in stores))
    assert sorted(change is ToolChange.REBUILT for _, change in results) == [
        False,
        False,
        False,
        True,
    ]
    assert {definition.revision for definition, _ in results} == {2}
    assert len(await stores[0].tools.history("send_email", 1)) == 2


# --- grants -------------------------------------------------------------------------


async def test_a_grant_change_is_a_revision_with_who_when_what_and_why(
    location: StoreLocation,
) -> None:
    store = await location.open()
    await store.tools.register(tool())
    revision, changed = await store.tools.grant(
        "send_email", 1, EMAIL, by="ada", reason="typo in --allow"
    )
    assert changed and revision.change is ToolChange.GRANT
    assert (revision.by, revision.reason, revision.definition.revision) == (
        "ada",
        "typo in --allow",
        2,
    )
    assert "127.0.0.1:8025" in revision.detail and "mail.internal:8025" in revision.detail
    none, _ = await store.tools.grant("send_email", 1, NetworkPolicy(), by="bob", reason="off")
    reader = await location.open(read_only=True)
    current = await reader.tools.get("send_email", 1)
    assert current is not None and current.network.is_none and current.revision == 3
    assert await reader.tools.get("send_email") == current
    assert [d.revision for d in await reader.tools.definitions()] == [3]
    history = await reader.tools.history("send_email", 1)
    assert [(r.definition.revision, r.change, r.by) for r in history] == [
        (1, ToolChange.REGISTERED, "test"),
        (2, ToolChange.GRANT, "ada"),
        (3, ToolChange.GRANT, "bob"),
    ]
    assert history[1].at <= history[2].at and history[2] == none


async def test_granting_what_is_already_granted_writes_nothing(location: StoreLocation) -> None:
    store = await location.open()
    await store.tools.register(tool())
    current, changed = await store.tools.grant(
        "send_email", 1, tool().network, by="ada", reason="again"
    )
    assert not changed and current.definition.revision == 1
    assert len(await store.tools.history("send_email", 1)) == 1


async def test_racing_grant_changes_on_one_revision_have_one_winner(
    location: StoreLocation,
) -> None:
    await (await location.open()).tools.register(tool())
    stores = [await location.open() for _ in range(4)]
    grants = [NetworkPolicy(allow=(f"mail-{n}.internal:8025",)) for n in range(4)]
    results = await asyncio.gather(
        *(
            s.tools.grant("send_email", 1, g, by=f"op-{n}", reason="race", expected=1)
            for n, (s, g) in enumerate(zip(stores, grants, strict=True))
        ),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    conflicts = [r for r in results if isinstance(r, ConflictError)]
    assert (len(winners), len(conflicts)) == (1, 3), results
    assert "revision" in conflicts[0].message and "retry" in conflicts[0].message
    current = await stores[0].tools.get("send_email", 1)
    assert current == winners[0][0].definition and current.revision == 2


async def test_unconditional_racing_grants_lose_no_change(location: StoreLocation) -> None:
    await (await location.open()).tools.register(tool())
    stores = [await location.open() for _ in range(4)]
    results = await asyncio.gather(
        *(
            s.tools.grant(
                "send_email", 1, NetworkPolicy(allow=(f"m{n}:25",)), by=f"op-{n}", reason="r"
            )
            for n, s in enumerate(stores)
        ),
        return_exceptions=True,
    )
    won = [r[0] for r in results if not isinstance(r, BaseException)]
    assert all(isinstance(r, ConflictError) for r in results if isinstance(r, BaseException))
    history = await stores[0].tools.history("send_email", 1)
    # every change that was answered is in the history once, each its own revision
    assert [r.definition.revision for r in history] == list(range(1, len(won) + 2))
    assert sorted(r.by for r in history[1:]) == sorted(r.by for r in won)


async def test_a_stale_expected_revision_is_a_conflict(location: StoreLocation) -> None:
    store = await location.open()
    await store.tools.register(tool())
    await store.tools.grant("send_email", 1, EMAIL, by="ada", reason="first")
    with pytest.raises(ConflictError, match="revision 2"):
        await store.tools.grant("send_email", 1, NetworkPolicy(), by="bob", reason="x", expected=1)
    current = await store.tools.get("send_email", 1)
    assert current is not None and current.network == EMAIL


async def test_bad_grants_change_nothing(location: StoreLocation) -> None:
    store = await location.open()
    with pytest.raises(NotFound, match="send_email@1 is not registered"):
        await store.tools.grant("send_email", 1, EMAIL, by="ada", reason="x")
    assert await store.tools.history("send_email", 1) == []
    assert await store.tools.definitions() == []
    await store.tools.register(tool())
    reader = await location.open(read_only=True)
    with pytest.raises(ReadOnlyStore):
        await reader.tools.grant("send_email", 1, EMAIL, by="ada", reason="x")
    assert len(await store.tools.history("send_email", 1)) == 1


# --- records written before revisions ---------------------------------------------


async def _legacy(store: SessionStore, definition: ToolDefinition) -> None:
    """A definition as stores held it before revisions: the catalog item alone."""
    item = layout.tool_item(definition.name, definition.version)
    data = encode(definition).replace(b',"revision":1', b"").replace(b',"recipe":null', b"")
    assert b"revision" not in data and b"recipe" not in data
    await store.backend.create(layout.TOOLS_PARTITION, item, data)


async def test_a_definition_without_revisions_reads_and_changes_as_revision_one(
    location: StoreLocation,
) -> None:
    store = await location.open()
    old = tool(recipe=None)
    await _legacy(store, old)
    assert await store.tools.get("send_email", 1) == old
    assert await store.tools.get("send_email") == old
    assert await store.tools.definitions() == [old]
    assert [r.change for r in await store.tools.history("send_email", 1)] == [ToolChange.REGISTERED]
    assert await store.tools.register(old) == old  # the same image: nothing changes
    with pytest.raises(AlreadyExists):  # no recipe on record: only the same image
        await store.tools.register(tool(REBUILT))
    await store.tools.grant("send_email", 1, EMAIL, by="ada", reason="moved")
    current = await store.tools.get("send_email", 1)
    assert current is not None and (current.revision, current.network) == (2, EMAIL)
    history = await store.tools.history("send_email", 1)
    assert [(r.definition.revision, r.by) for r in history] == [(1, "test"), (2, "ada")]


async def test_reading_a_current_definition_is_one_backend_call(
    location: StoreLocation,
) -> None:
    store = await location.open()
    await store.tools.register(tool())
    await store.tools.grant("send_email", 1, EMAIL, by="ada", reason="moved")
    counted = Counting(store.backend)
    reader = SessionStore(counted)  # type: ignore[arg-type]
    assert (await reader.tools.get("send_email", 1)) is not None
    assert counted.calls == ["last"]


class Counting:
    """A backend that counts the calls made through it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[str] = []
        self.max_item_bytes = inner.max_item_bytes
        self.description = inner.description
        self.clock = inner.clock

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await method(*args, **kwargs)

        return counted
