"""Registering an image for a caller who must learn what happened: created, rebuilt
from the same recipe (a new revision), already there identically, or refused (no web
framework here: the CLI uses it directly too).

A request that grants a registered version other destinations or config than it has
would be silently reduced to what is on record, so it is refused (``AlreadyExists``)
before anything is written: a grant is changed with ``bh tools grant`` (the catalog's
``grant``), config by registering a new version.

The operator, not the image, grants destinations: what the image's ``network`` label
names and the definition on record does not allow is answered as ``ungranted`` (the
Hands API: the ``UNGRANTED_HEADER`` response header) with how to grant it, never
granted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contracts import AlreadyExists
from contracts.tool import ToolDefinition
from hands.api.views import RegisterRequest, checked
from hands.labels import ToolCaps
from hands.registry import ImageReading, read_image
from hands.sandbox import Sandbox
from session_store import SessionStore

#: Response header of ``POST /v1/tools``: the destinations the image's ``network``
#: label names that the definition on record does not allow (``, ``-separated).
UNGRANTED_HEADER = "Brainhands-Ungranted-Network"


@dataclass(frozen=True)
class Registered:
    """The definition on record, whether this request changed the catalog (a new tool,
    or a new revision for an image rebuilt from the same recipe), and what the image
    names that the definition does not allow."""

    tool: ToolDefinition
    created: bool
    ungranted: tuple[str, ...] = ()


def request_of(
    image: str,
    *,
    allow: Sequence[str] = (),
    config: Mapping[str, str] | None = None,
    registered_by: str | None = None,
) -> RegisterRequest:
    """A checked request; a bad destination or config name is refused, named."""
    fields: dict[str, object] = {"image": image, "allow": list(allow), "config": dict(config or {})}
    if registered_by is not None:
        fields["registered_by"] = registered_by
    return checked(RegisterRequest, fields)


async def register_request(
    store: SessionStore,
    sandbox: Sandbox,
    request: RegisterRequest,
    *,
    caps: ToolCaps | None = None,
) -> Registered:
    """Register the image ``request`` names (see ``record_request``); an image that
    declares more than ``caps`` (the operator's) is refused."""
    return await record_request(store, await read_request(sandbox, request, caps=caps), request)


async def read_request(
    sandbox: Sandbox, request: RegisterRequest, *, caps: ToolCaps | None = None
) -> ImageReading:
    """What registering ``request`` offers: the image's definition with the request's
    grants, and what its ``network`` label names."""
    return await read_image(
        sandbox,
        request.image,
        allow=request.allow,
        config=request.config,
        registered_by=request.registered_by,
        caps=caps,
    )


async def record_request(
    store: SessionStore, reading: ImageReading, request: RegisterRequest
) -> Registered:
    """Record what ``reading`` offers, unless its version is on record with other grants
    than ``request`` gives (refused, nothing written)."""
    offered = reading.definition
    current = await store.tools.get(offered.name, offered.version)
    if current is not None and (differs := differing(current, request)):
        raise other_grants(current, differs)
    stored, change = await store.tools.registration(offered)
    ungranted = tuple(d for d in reading.declared.allow if d not in stored.network.allow)
    return Registered(stored, change is not None, ungranted)


def differing(current: ToolDefinition, request: RegisterRequest) -> list[str]:
    """Which of ``allow`` (when the request names any) and ``config`` the request gives
    otherwise than ``current`` has."""
    same = {
        "allow": not request.allow or current.network.allow == tuple(request.allow),
        "config": current.config == request.config,
    }
    return [what for what, equal in same.items() if not equal]


def other_grants(current: ToolDefinition, differs: list[str]) -> AlreadyExists:
    """The refusal of a request granting ``current`` otherwise (``differs``)."""
    return AlreadyExists(
        f"tool {current.ref} is already registered with another "
        f"{' and '.join(differs)}; change its grant with `bh tools grant {current.ref}` "
        "(POST /v1/tools/{name}/grant), its config by registering a new version",
        tool=current.ref,
        differs=differs,
    )


def ungranted_notice(tool: ToolDefinition, ungranted: Sequence[str]) -> str:
    """One line telling the operator what the image names and how to grant it."""
    allow = " ".join(f"--allow {destination}" for destination in ungranted)
    return (
        f"image declares network {', '.join(ungranted)}; not granted (the operator grants "
        f"destinations: bh tools grant {tool.ref} {allow} --by NAME --reason WHY)"
    )
