"""The five-emails example's invariants, shared by its crash tests (in-process tools and
sandboxed on the Hands): the submission is answered, each email was sent once and
requested once, the summary lists five receipts, each result entered the session once."""

from __future__ import annotations

from collections import Counter

from contracts import Outcome, SubmissionStatus
from examples.emails import scenario
from examples.emails.client import EmailClient
from examples.emails.tasks import notice_operation_id
from session_store import SessionStore
from session_store.submissions import SessionClient

BATCH = "root.req.r1.c0.run"


async def submit(store: SessionStore, session_id: str) -> None:
    await SessionClient(store).submit(session_id, "req", {"text": scenario.REQUEST})


def expected_operations(session_id: str) -> dict[str, str]:
    return {
        to: notice_operation_id(session_id, BATCH, index)
        for index, to in enumerate(scenario.recipients())
    }


async def check_invariants(
    store: SessionStore, email: EmailClient, session_id: str, where: str
) -> list[dict[str, object]]:
    session = await store.session(session_id)
    submission = session.state.submissions["req"]
    assert submission.status is SubmissionStatus.ANSWERED, f"{where}: {submission.status}"
    operations = expected_operations(session_id)
    ledger = await email.ledger()
    sent = Counter(m.operation_id for m in ledger.messages)
    for to, operation_id in operations.items():
        assert sent[operation_id] == 1, f"{where}: {to} was sent {sent[operation_id]} times"
        asked = ledger.requests.get(operation_id)
        assert asked == 1, f"{where}: {to} was requested {asked} times (blind re-send?)"
    batch = session.state.tasks[BATCH]
    receipts: list[dict[str, object]] = batch.result["receipts"]  # type: ignore[index]
    assert batch.outcome is Outcome.SUCCEEDED and len(receipts) == 5, where
    assert [r["to"] for r in receipts] == list(operations), where
    applied: Counter[str] = Counter()
    async for record in store.history(session_id):
        applied.update(record.commit.applied_operations)
    assert all(count == 1 for count in applied.values()), f"{where}: applied twice: {applied}"
    assert set(operations.values()) <= set(applied), f"{where}: a result was never applied"
    return receipts
