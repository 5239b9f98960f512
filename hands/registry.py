"""Registering tool images: read the labels, pin the image by id, record the definition.

The store's catalog decides (``session_store.catalog``): registering the same image
again is a no-op, an image of the same recipe (``RECIPE_LABEL``, set by ``bh images
build``) is a revision with the new image id, another image under a registered version
is refused. The definition is granted only the destinations the operator allows; what
the image's ``network`` label names is read for showing (``ImageReading.declared``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

from contracts import InvalidInput
from contracts.tool import BUILD_HASH_LABEL, RECIPE_LABEL, NetworkPolicy, ToolDefinition
from hands.labels import ToolCaps, declared_network, definition_from_labels
from hands.sandbox import Sandbox
from session_store import SessionStore

#: Longest recipe or build hash label accepted (a digest is 71 characters).
MAX_DIGEST_CHARACTERS = 200


class ImageOptions(TypedDict, total=False):
    """What registering an image takes besides the image (``definition_from_labels``)."""

    #: egress destinations granted (``host:port``)
    allow: Sequence[str]
    #: non-secret settings passed to its containers as environment
    config: Mapping[str, str] | None
    registered_by: str
    #: the operator's caps on what an image may declare (default ``ToolCaps()``)
    caps: ToolCaps | None


@dataclass(frozen=True)
class ImageReading:
    """What an image's labels say: its definition, granted only the operator's
    ``allow``, and the destinations its ``network`` label names (never granted)."""

    definition: ToolDefinition
    declared: NetworkPolicy


async def register_image(
    store: SessionStore, sandbox: Sandbox, image: str, **options: Unpack[ImageOptions]
) -> ToolDefinition:
    """Register ``image`` (a local tag or id) with ``allow`` as its only destinations;
    limits past the caps are refused."""
    return await store.tools.register((await read_image(sandbox, image, **options)).definition)


async def read_image(sandbox: Sandbox, image: str, **options: Unpack[ImageOptions]) -> ImageReading:
    """The definition ``image`` declares, pinned by its id, with its recipe digest and
    build hash (how the catalog tells a rebuilt image from other code), and what its
    ``network`` label names."""
    image_id = await sandbox.image_id(image)
    labels = {str(k): str(v) for k, v in (await sandbox.image_labels(image)).items()}
    definition = definition_from_labels(image, image_id, labels, **options)
    pinned = definition.model_copy(
        update={"recipe": _digest(labels, RECIPE_LABEL), "build": _digest(labels, BUILD_HASH_LABEL)}
    )
    return ImageReading(pinned, declared_network(labels))


def _digest(labels: Mapping[str, str], label: str) -> str | None:
    value = labels.get(label, "").strip()
    if len(value) > MAX_DIGEST_CHARACTERS:
        raise InvalidInput(
            f"label {label} is {len(value)} characters; at most {MAX_DIGEST_CHARACTERS} are "
            "allowed (a digest such as sha256:…)",
            label=label,
        )
    return value or None  # empty: the image says nothing
