"""Outbox messages in commits: re-adding a message that is still pending is harmless.

Found by the chaos harness: a phase re-run after a takeover dispatched its operation
again while the first dispatch was still pending in the outbox (its relay had not
recorded it sent); the store refused the duplicate and the task failed with
``already_exists`` instead of waiting on its operation.
"""

from __future__ import annotations

from brain.builder import CommitBuilder
from brain.outcome import Effects
from contracts import OutboxMessage, utcnow
from session_store.state import SessionState


def test_a_message_still_pending_is_not_added_again() -> None:
    message = OutboxMessage(id="op-1", topic="tools.dispatch.act", payload={"a": 1})
    state = SessionState(session_id="s1", outbox={"op-1": message})
    builder = CommitBuilder(state, utcnow())
    builder.add(Effects(outbox=(message,)), parent_id="t1")
    assert builder.build().outbox == ()


def test_a_new_message_is_added() -> None:
    message = OutboxMessage(id="op-2", topic="tools.dispatch.act", payload={"a": 1})
    builder = CommitBuilder(SessionState(session_id="s1"), utcnow())
    builder.add(Effects(outbox=(message,)), parent_id="t1")
    assert builder.build().outbox == (message,)
