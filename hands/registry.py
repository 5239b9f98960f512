"""Registering tool images: read the labels, pin the image by id, record the definition.

The record is create-once per ``name@version`` in the store's catalog: registering the
same image again is a no-op, another image under a registered version is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contracts.tool import ToolDefinition
from hands.labels import ToolCaps, definition_from_labels
from hands.sandbox import Sandbox
from session_store import SessionStore


async def register_image(
    store: SessionStore,
    sandbox: Sandbox,
    image: str,
    *,
    allow: Sequence[str] = (),
    config: Mapping[str, str] | None = None,
    registered_by: str = "",
    caps: ToolCaps | None = None,
) -> ToolDefinition:
    """Register ``image`` (a local tag or id); ``allow`` grants egress destinations;
    limits past ``caps`` (the operator's, default ``ToolCaps()``) are refused."""
    image_id = await sandbox.image_id(image)
    labels = await sandbox.image_labels(image)
    definition = definition_from_labels(
        image,
        image_id,
        {str(k): str(v) for k, v in labels.items()},
        allow=allow,
        config=config,
        registered_by=registered_by,
        caps=caps,
    )
    return await store.tools.register(definition)
