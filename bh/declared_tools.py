"""The tools a deployment declares (``bh init --tools FILE``), and bringing the catalog to
them.

The file is TOML (or JSON, by its ``.json`` suffix), one entry per image::

    [[tools]]
    image = "brainhands/tool-count:latest"     # a tag (or id) on the engine init sees
    allow = ["ledger.internal:8030"]           # egress destinations (host:port)
    config = { LEDGER_URL = "http://ledger.internal:8030" }   # non-secret settings

Applying an entry is idempotent and converges on the file: the image's labels say which
``name@version`` it is; an unregistered version is registered; the same image again
changes nothing; an image rebuilt from the same recipe is a revision (the catalog
decides, ``session_store.catalog``); a grant other than the declared one is changed to
it, recorded as a revision by ``bh init`` with the file as the reason (so a grant given
by hand with ``bh tools grant`` is reverted by the next init: change the file instead).
Config is part of a version: a declared config other than the one on record is refused
before anything is written.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from contracts import InvalidInput
from contracts.model import Frozen
from contracts.tool import NetworkPolicy, ToolDefinition
from hands.api.views import RegisterRequest, checked
from hands.labels import ToolCaps
from hands.registry import image_definition
from hands.sandbox import Sandbox
from session_store import SessionStore

REGISTERED_BY = "bh init"


class DeclaredTools(Frozen):
    tools: list[RegisterRequest] = Field(default_factory=list, max_length=256)


@dataclass(frozen=True)
class Applied:
    """What applying one entry did: ``registered``, ``rebuilt``, ``granted`` or
    ``unchanged``, and the definition on record now."""

    change: str
    tool: ToolDefinition

    def line(self) -> str:
        allowed = ", ".join(self.tool.network.allow) or "no network"
        return (
            f"tool {self.tool.ref}: {self.change} (revision {self.tool.revision}, "
            f"{self.tool.image}, allows {allowed})"
        )


def read_declared(path: Path) -> list[RegisterRequest]:
    """The entries of ``path``, each checked; a bad one is named by its index and field."""
    try:
        text = path.read_text()
        document = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except OSError as error:
        raise InvalidInput(f"cannot read the tools file {path}: {error.strerror}") from None
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise InvalidInput(f"the tools file {path} does not parse: {error}") from None
    if not isinstance(document, dict):
        raise InvalidInput(f"the tools file {path} must hold a table with a `tools` list")
    entries = [
        {"registered_by": REGISTERED_BY, **entry} if isinstance(entry, dict) else entry
        for entry in document.get("tools", [])
    ]
    try:
        return checked(DeclaredTools, {**document, "tools": entries}).tools
    except InvalidInput as error:
        raise InvalidInput(f"the tools file {path}: {error.message}") from None


async def apply_declared(
    store: SessionStore,
    sandbox: Sandbox,
    entry: RegisterRequest,
    *,
    reason: str,
    caps: ToolCaps | None = None,
) -> Applied:
    """Bring the catalog to ``entry`` (see the module's docstring)."""
    offered = await image_definition(
        sandbox,
        entry.image,
        allow=entry.allow,
        config=entry.config,
        registered_by=entry.registered_by,
        caps=caps,
    )
    current = await store.tools.get(offered.name, offered.version)
    if current is not None and current.config != offered.config:
        raise InvalidInput(
            f"tool {current.ref} is registered with another config than {entry.image} "
            "declares; config is part of a version: declare a new version (its "
            "io.brainhands.tool.version label)",
            tool=current.ref,
        )
    stored, change = await store.tools.registration(offered)
    wanted = NetworkPolicy(allow=tuple(entry.allow))
    if stored.network == wanted:
        return Applied(change.value if change is not None else "unchanged", stored)
    revision, _ = await store.tools.grant(
        stored.name, stored.version, wanted, by=REGISTERED_BY, reason=reason
    )
    return Applied("granted", revision.definition)
