"""Intents: the tool calls a session's committed log says may run.

A Brain commits an operation's intent in the same commit as the dispatch message and the
wait on it. The Hands run an operation only when the session's log holds its intent with
the same tool, version, argument digest, replay policy and workspace mount (mode, path,
base version, limits): the store decides, the bus only delivers. An intent leaves the
session's state when its result is applied or its task ends (``session_store.state.apply``).
"""

from __future__ import annotations

import hashlib
import json

from pydantic import JsonValue

from contracts.model import Frozen
from contracts.tool import Dispatch


def args_digest(args: JsonValue) -> str:
    """The digest of frozen arguments: canonical JSON (sorted keys, no spaces), SHA-256."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Intent(Frozen):
    """A committed tool call: the dispatch as committed, and its arguments' digest."""

    dispatch: Dispatch
    digest: str

    @classmethod
    def of(cls, dispatch: Dispatch) -> Intent:
        return cls(dispatch=dispatch, digest=args_digest(dispatch.args))

    @property
    def operation_id(self) -> str:
        return self.dispatch.operation_id

    @property
    def task_id(self) -> str | None:
        return self.dispatch.task_id

    def differences(self, dispatch: Dispatch) -> list[str]:
        """What of ``dispatch`` differs from this intent ([]: the message is this intent)."""
        mine = self.dispatch
        return [
            what
            for what, same in (
                ("operation", mine.operation_id == dispatch.operation_id),
                ("session", mine.session_id == dispatch.session_id),
                ("task", mine.task_id == dispatch.task_id),
                ("tool", mine.tool == dispatch.tool),
                ("version", mine.tool_version == dispatch.tool_version),
                ("arguments", self.digest == args_digest(dispatch.args)),
                ("replay policy", mine.replay == dispatch.replay),
                ("workspace mount", mine.workspace == dispatch.workspace),
            )
            if not same
        ]
