"""Reading a session's model usage and budget (the kernel writes the totals, a client
the budget)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from contracts import USAGE_DOCUMENT, Budget
from contracts.usage import BUDGET, SessionUsage
from session_store.state import SessionState
from session_store.submissions import control_member


def session_usage(body: Any) -> SessionUsage:
    """The totals in a ``usage`` document's body (empty when absent or unreadable)."""
    try:
        return SessionUsage.model_validate(body or {})
    except ValidationError:
        return SessionUsage()


def usage_of(state: SessionState) -> SessionUsage:
    document = state.documents.get(USAGE_DOCUMENT)
    return session_usage(document.body if document is not None else None)


def budget_of(state: SessionState) -> Budget | None:
    """The session's budget (control document member ``budget``), if one is set."""
    said = control_member(state, BUDGET)
    if said is None:
        return None
    try:
        return Budget.model_validate(said)
    except ValidationError:
        return None
