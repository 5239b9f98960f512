"""Registering an image for a caller who must learn what happened: created, already
there identically, or refused (no web framework here: the CLI uses it directly too).

The catalog keeps the first registration of an image under a version; a request that
grants that image other destinations or config would be silently reduced to the first
one's, so it is refused (``AlreadyExists``) instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from contracts import AlreadyExists, InvalidInput, utcnow
from contracts.tool import ToolDefinition
from hands.api.views import RegisterRequest
from hands.labels import ToolCaps
from hands.registry import register_image
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
    try:
        return RegisterRequest.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInput(f"{where} is invalid: {first['msg']}", field=where) from None


async def register_request(
    store: SessionStore,
    sandbox: Sandbox,
    request: RegisterRequest,
    *,
    caps: ToolCaps | None = None,
) -> tuple[ToolDefinition, bool]:
    """The definition on record, and whether this request created it; an image that
    declares more than ``caps`` (the operator's) is refused."""
    before = utcnow()
    stored = await register_image(
        store,
        sandbox,
        request.image,
        allow=request.allow,
        config=request.config,
        registered_by=request.registered_by,
        caps=caps,
    )
    if stored.registered_at >= before:
        return stored, True
    differs = [
        what
        for what, same in (
            ("allow", not request.allow or stored.network.allow == tuple(request.allow)),
            ("config", stored.config == request.config),
        )
        if not same
    ]
    if differs:
        raise AlreadyExists(
            f"tool {stored.ref} is already registered from this image with another "
            f"{' and '.join(differs)}; register the image under a new version to change "
            "what it is granted",
            tool=stored.ref,
            differs=differs,
        )
    return stored, False
