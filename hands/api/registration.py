"""Registering an image for a caller who must learn what happened: created, rebuilt
from the same recipe (a new revision), already there identically, or refused (no web
framework here: the CLI uses it directly too).

A request that grants a registered version other destinations or config than it has
would be silently reduced to what is on record, so it is refused (``AlreadyExists``)
before anything is written: a grant is changed with ``bh tools grant`` (the catalog's
``grant``), config by registering a new version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contracts import AlreadyExists
from contracts.tool import ToolDefinition
from hands.api.views import RegisterRequest, checked
from hands.labels import ToolCaps
from hands.registry import image_definition
from hands.sandbox import Sandbox
from session_store import SessionStore


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
) -> tuple[ToolDefinition, bool]:
    """The definition on record, and whether this request changed the catalog (a new
    tool, or a new revision for an image rebuilt from the same recipe); an image that
    declares more than ``caps`` (the operator's) is refused."""
    offered = await image_definition(
        sandbox,
        request.image,
        allow=request.allow,
        config=request.config,
        registered_by=request.registered_by,
        caps=caps,
    )
    current = await store.tools.get(offered.name, offered.version)
    if current is not None:
        _refuse_other_grants(current, request)
    stored, change = await store.tools.registration(offered)
    return stored, change is not None


def _refuse_other_grants(current: ToolDefinition, request: RegisterRequest) -> None:
    differs = [
        what
        for what, same in (
            ("allow", not request.allow or current.network.allow == tuple(request.allow)),
            ("config", current.config == request.config),
        )
        if not same
    ]
    if differs:
        raise AlreadyExists(
            f"tool {current.ref} is already registered with another "
            f"{' and '.join(differs)}; change its grant with `bh tools grant {current.ref}` "
            "(POST /v1/tools/{name}/grant), its config by registering a new version",
            tool=current.ref,
            differs=differs,
        )
