"""The tool catalog: registered tool definitions, create-once per ``name@version``.

Registering the same image again under the same version changes nothing; another image
under an existing version is refused (``AlreadyExists``): a version, once registered,
always means the same code. Both services read it — the Brain for schemas and replay
policies, the Hands for what to run.
"""

from __future__ import annotations

from contracts import AlreadyExists, ReadOnlyStore
from contracts.tool import ToolDefinition
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.codec import decode, encode


class ToolCatalog:
    def __init__(self, backend: Backend, *, max_record_bytes: int, read_only: bool) -> None:
        self._backend = backend
        self._limit = max_record_bytes
        self._read_only = read_only

    async def register(self, definition: ToolDefinition) -> ToolDefinition:
        """Record ``definition``; the one already on record if it is the same image."""
        if self._read_only:
            raise ReadOnlyStore("this store was opened read-only; tools cannot be registered")
        data = encode(definition, limit=self._limit, what=f"tool {definition.ref}")
        item = layout.tool_item(definition.name, definition.version)
        try:
            await self._backend.create(layout.TOOLS_PARTITION, item, data)
        except ItemExists:
            current = await self.get(definition.name, definition.version)
            if current is not None and current.same_image(definition):
                return current
            raise AlreadyExists(
                f"tool {definition.ref} is already registered with image "
                f"{current.image_id if current else '?'}; register the new image under a "
                "new version",
                tool=definition.ref,
            ) from None
        return definition

    async def get(self, name: str, version: int | None = None) -> ToolDefinition | None:
        """``name@version``, or the newest version of ``name`` when ``version`` is None."""
        if version is None:
            versions = [d for d in await self.definitions() if d.name == name]
            return versions[-1] if versions else None
        item = layout.tool_item(name, version)
        data = await self._backend.get(layout.TOOLS_PARTITION, item)
        if data is None:
            return None
        return decode(data, ToolDefinition, where=f"{layout.TOOLS_PARTITION}/{item}")

    async def definitions(self) -> list[ToolDefinition]:
        """Every registered definition, by name, then version."""
        return [
            decode(data, ToolDefinition, where=f"{layout.TOOLS_PARTITION}/{item}")
            for item, data in await self._backend.items(layout.TOOLS_PARTITION)
        ]
