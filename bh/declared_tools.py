"""The tools a deployment declares (``bh init --tools FILE``), and bringing the catalog to
them.

The file is TOML (or JSON, by its ``.json`` suffix), one entry per image::

    [[tools]]
    image = "brainhands/tool-count:latest"     # a tag (or id) on the engine init sees
    allow = ["ledger.internal:8030"]           # egress destinations (host:port)
    config = { LEDGER_URL = "http://ledger.internal:8030" }   # non-secret settings

Applying an entry is idempotent and converges on the file: the image's labels say which
``name@version`` it is; an unregistered version is registered with exactly the declared
``allow`` (none: no network, whatever the image's ``network`` label names — that is
shown, never granted); the same image again changes nothing; an image rebuilt from the
same recipe is a revision (the catalog decides, ``session_store.catalog``); a grant
other than the declared one is changed to it first, recorded as a revision by ``bh
init`` with the file as the reason (so a grant given by hand with ``bh tools grant`` is
reverted by the next init: change the file instead). Config is part of a version: a
declared config other than the one on record is refused before anything is written.
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
from hands.api.registration import (
    differing,
    other_grants,
    read_request,
    record_request,
    ungranted_notice,
)
from hands.api.views import RegisterRequest, checked
from hands.labels import ToolCaps
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
    #: what the image's ``network`` label names that the tool is not granted
    ungranted: tuple[str, ...] = ()

    def line(self) -> str:
        allowed = ", ".join(self.tool.network.allow) or "no network"
        line = (
            f"tool {self.tool.ref}: {self.change} (revision {self.tool.revision}, "
            f"{self.tool.image}, allows {allowed})"
        )
        if self.ungranted:
            line += f"; {ungranted_notice(self.tool, self.ungranted)}"
        return line


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
    """Bring the catalog to ``entry`` (see the module's docstring): a registered
    version's grant is changed before its image is registered again, so registering
    never widens what is granted, not even for a moment."""
    reading = await read_request(sandbox, entry, caps=caps)
    offered = reading.definition
    current = await store.tools.get(offered.name, offered.version)
    changes = []
    if current is not None:
        if "config" in differing(current, entry):
            raise other_grants(current, ["config"])  # a new version, not a change of this one
        if current.network.allow != tuple(entry.allow):  # declaring none revokes them too
            changes.append(await _grant(store, current.ref, entry, reason))
    registered = await record_request(store, reading, entry)
    if registered.created:
        changes.append("registered" if registered.tool.revision == 1 else "rebuilt")
    return Applied(", ".join(changes) or "unchanged", registered.tool, registered.ungranted)


async def _grant(store: SessionStore, ref: str, entry: RegisterRequest, reason: str) -> str:
    name, _, version = ref.rpartition("@")
    wanted = NetworkPolicy(allow=tuple(entry.allow))
    await store.tools.grant(name, int(version), wanted, by=REGISTERED_BY, reason=reason)
    return "granted"
