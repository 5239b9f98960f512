"""The tool catalog: registered tool definitions and their revisions, all create-once.

Two kinds of item (``session_store.layout``):

* ``catalog/tools`` / ``<name>@<version>``: the definition as first registered. Creating
  it decides who registered the version; listing the partition lists the catalog.
* ``catalog/revisions/<name>@<version>`` / ``<rev>``: ``ToolRevision`` records, one per
  revision number; the greatest is the current definition. Registering writes revision
  1 there too, so reading the current definition is one ``last`` call.

A definition registered before revisions existed has the first item only: it reads as
revision 1 (one call more), its first change is revision 2, and registering its image
again copies it to revision 1.

Registering a registered version again: the same image changes nothing; an image built
from the same recipe (``ToolDefinition.same_recipe``: rebuilt, e.g. on a new base) is a
revision with the new image id, grant and config kept; anything else is refused
(``AlreadyExists``): a version always means the same code. An operator's grant change
is a revision too. A revision is written only if its number is free, so of two changes
made at once one wins and the other is a ``ConflictError`` (reload, decide, retry): no
read-modify-write can lose a change.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from contracts import AlreadyExists, ConflictError, InvalidInput, NotFound, ReadOnlyStore
from contracts.tool import NetworkPolicy, ToolChange, ToolDefinition, ToolRevision
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.codec import decode, encode

#: Tries of a registration that keeps losing races to other changes of the same tool.
_ATTEMPTS: Final = 5


class ToolCatalog:
    def __init__(self, backend: Backend, *, max_record_bytes: int, read_only: bool) -> None:
        self._backend = backend
        self._limit = max_record_bytes
        self._read_only = read_only

    # -- registering -----------------------------------------------------------------

    async def register(self, definition: ToolDefinition) -> ToolDefinition:
        """Record ``definition``; the definition on record from now on."""
        return (await self.registration(definition))[0]

    async def registration(
        self, definition: ToolDefinition
    ) -> tuple[ToolDefinition, ToolChange | None]:
        """The definition on record, and what registering ``definition`` changed:
        ``REGISTERED``, ``REBUILT`` (same recipe, new image) or None (the same image)."""
        self._writable("registered")
        first = definition.model_copy(update={"revision": 1})
        item = layout.tool_item(first.name, first.version)
        try:
            await self._backend.create(layout.TOOLS_PARTITION, item, self._encode(first))
        except ItemExists:
            return await self._register_again(first)
        await self._copy_first(_registered(first))
        return first, ToolChange.REGISTERED

    async def _register_again(
        self, offered: ToolDefinition
    ) -> tuple[ToolDefinition, ToolChange | None]:
        for _ in range(_ATTEMPTS):
            current = await self.current(offered.name, offered.version)
            assert current is not None  # its first item exists, and items are never removed
            if current.definition.same_image(offered):
                await self._copy_first(current)
                return current.definition, None
            if not current.definition.same_recipe(offered):
                raise _other_code(current.definition, offered)
            rebuilt = _next(
                current,
                ToolChange.REBUILT,
                image=offered.image,
                image_id=offered.image_id,
                build=offered.build,
                by=offered.registered_by,
                reason="rebuilt from the same recipe",
                detail=f"image: {current.definition.image_id} -> {offered.image_id}",
            )
            try:
                await self._append(rebuilt)
            except ItemExists:
                continue  # another change took the number: decide again on what is there
            return rebuilt.definition, ToolChange.REBUILT
        raise ConflictError(
            f"tool {offered.ref} kept changing while it was registered again; retry",
            tool=offered.ref,
        )

    # -- grants ----------------------------------------------------------------------

    async def grant(
        self,
        name: str,
        version: int,
        network: NetworkPolicy,
        *,
        by: str,
        reason: str,
        expected: int | None = None,
    ) -> tuple[ToolRevision, bool]:
        """Change what ``name@version`` may reach, as a new revision; the revision now
        current, and whether this call made it (False: it was granted so already).
        ``expected``: the revision the change is based on (else the current one)."""
        self._writable("changed")
        if not by.strip() or not reason.strip():
            raise InvalidInput("a grant change needs who makes it (by) and why (reason)")
        current = await self.current(name, version)
        ref = f"{name}@{version}"
        if current is None:
            raise NotFound(f"tool {ref} is not registered; nothing was changed", tool=ref)
        if expected is not None and current.rev != expected:
            raise ConflictError(
                f"tool {ref} is at revision {current.rev}, not {expected}: it changed since "
                "it was read; nothing was changed: read it again and retry",
                tool=ref,
                revision=current.rev,
            )
        if current.definition.network == network:
            return current, False
        changed = _next(
            current,
            ToolChange.GRANT,
            network=network,
            by=by,
            reason=reason,
            detail=f"allow: {_allowed(current.definition.network)} -> {_allowed(network)}",
        )
        try:
            await self._append(changed)
        except ItemExists:
            raise ConflictError(
                f"tool {ref} was changed by someone else at the same time (revision "
                f"{changed.rev} exists now); nothing was changed: read it again and retry",
                tool=ref,
                revision=changed.rev,
            ) from None
        return changed, True

    # -- reading ---------------------------------------------------------------------

    async def get(self, name: str, version: int | None = None) -> ToolDefinition | None:
        """The current definition of ``name@version``, or of the newest version of
        ``name`` when ``version`` is None."""
        if version is None:
            version = await self._newest_version(name)
            if version is None:
                return None
        current = await self.current(name, version)
        return None if current is None else current.definition

    async def current(self, name: str, version: int) -> ToolRevision | None:
        """The current revision of ``name@version``; None when it is not registered."""
        partition = layout.tool_revisions_partition(name, version)
        found = await self._backend.last(partition)
        if found is None:
            return await self._first(name, version)
        item, data = found
        return decode(data, ToolRevision, where=f"{partition}/{item}")

    async def history(self, name: str, version: int) -> list[ToolRevision]:
        """Every revision of ``name@version``, oldest first; empty when not registered."""
        partition = layout.tool_revisions_partition(name, version)
        revisions = [
            decode(data, ToolRevision, where=f"{partition}/{item}")
            for item, data in await self._backend.items(partition)
        ]
        if revisions and revisions[0].rev == 1:
            return revisions
        first = await self._first(name, version)  # written before revisions existed
        return revisions if first is None else [first, *revisions]

    async def definitions(self) -> list[ToolDefinition]:
        """The current definition of every registered version, by name, then version."""
        firsts = [
            decode(data, ToolDefinition, where=f"{layout.TOOLS_PARTITION}/{item}")
            for item, data in await self._backend.items(layout.TOOLS_PARTITION)
        ]
        currents = await asyncio.gather(*(self.current(d.name, d.version) for d in firsts))
        return [
            first if now is None else now.definition
            for first, now in zip(firsts, currents, strict=True)
        ]

    # -- records ---------------------------------------------------------------------

    async def _first(self, name: str, version: int) -> ToolRevision | None:
        item = layout.tool_item(name, version)
        data = await self._backend.get(layout.TOOLS_PARTITION, item)
        if data is None:
            return None
        return _registered(decode(data, ToolDefinition, where=f"{layout.TOOLS_PARTITION}/{item}"))

    async def _newest_version(self, name: str) -> int | None:
        prefix = f"{name}@"
        items = [
            i for i in await self._backend.keys(layout.TOOLS_PARTITION) if i.startswith(prefix)
        ]
        return int(items[-1].removeprefix(prefix)) if items else None

    async def _append(self, revision: ToolRevision) -> None:
        """Create ``revision``; ``ItemExists`` when its number is taken."""
        definition = revision.definition
        await self._backend.create(
            layout.tool_revisions_partition(definition.name, definition.version),
            layout.rev_item(revision.rev),
            self._encode(revision),
        )

    async def _copy_first(self, first: ToolRevision) -> None:
        """Revision 1 beside the first item, so that reading it is one call."""
        if first.rev == 1:
            with contextlib.suppress(ItemExists):
                await self._append(first)

    def _encode(self, record: ToolDefinition | ToolRevision) -> bytes:
        definition = record if isinstance(record, ToolDefinition) else record.definition
        return encode(record, limit=self._limit, what=f"tool {definition.ref}")

    def _writable(self, what: str) -> None:
        if self._read_only:
            raise ReadOnlyStore(f"this store was opened read-only; tools cannot be {what}")


def _registered(definition: ToolDefinition) -> ToolRevision:
    return ToolRevision(
        definition=definition,
        change=ToolChange.REGISTERED,
        by=definition.registered_by,
        at=definition.registered_at,
    )


def _next(
    current: ToolRevision,
    change: ToolChange,
    *,
    by: str,
    reason: str,
    detail: str,
    **fields: object,
) -> ToolRevision:
    definition = current.definition.model_copy(update={**fields, "revision": current.rev + 1})
    return ToolRevision(definition=definition, change=change, by=by, reason=reason, detail=detail)


def _allowed(network: NetworkPolicy) -> str:
    return ", ".join(network.allow) or "no network"


def _other_code(current: ToolDefinition, offered: ToolDefinition) -> AlreadyExists:
    if current.recipe is None or offered.recipe is None:
        why = (
            f"with image {current.image_id}, and nothing says image {offered.image_id} is the "
            "same code (a recipe label on both)"
        )
    elif current.recipe != offered.recipe:
        why = (
            f"from another recipe ({current.recipe}; image {offered.image_id} is {offered.recipe})"
        )
    else:
        why = (
            f"with image {current.image_id}, and image {offered.image_id} has its recipe and "
            "build hash but is another image: built FROM it (labels are inherited), not rebuilt"
        )
    return AlreadyExists(
        f"tool {offered.ref} is already registered {why}; a version always means the same "
        "code: register changed code under a new version (its io.brainhands.tool.version "
        "label)",
        tool=offered.ref,
        image_id=current.image_id,
    )
