"""Bad submissions are refused at the door or fail alone; they never wedge a session
(issue 6, defect 2)."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain.context import PhaseContext
from brain.outcome import Done
from brain.registry import Registry
from contracts import Commit, InvalidInput, Submission, SubmissionStatus
from tests.support.kernel import Kernel, kernel, kind


def calc_registry() -> Registry:
    async def double(ctx: PhaseContext) -> Done:
        return Done(result=2 * int(ctx.input["n"]))

    registry = Registry()
    registry.add(kind("calc", {"start": double}))
    return registry


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"task": {"kind": "calc", "version": 0}}, "version"),
        ({"task": {"kind": "calc", "colour": "red"}}, "colour"),
        ({"task": {"kind": "calc", "id": "root.r0"}}, "id"),
        ({"task": {"kind": ""}}, "kind"),
        ({"task": "calc"}, "task"),
        ({"text": "hi", "task": {"kind": "calc"}}, "task"),
    ],
)
async def test_a_bad_task_request_is_refused_at_submit_and_stores_nothing(
    tmp_path: Path, value: dict[str, Any], named: str
) -> None:
    async with kernel(tmp_path, calc_registry()) as k:
        await k.submit_task("calc", {"n": 1}, request_id="r0")
        before = (await k.store.session("s1")).seq
        with pytest.raises(InvalidInput) as refused:
            await k.client.submit("s1", "bad", value)
        assert named in refused.value.message
        assert (await k.store.session("s1")).seq == before, "a refused submission stores nothing"


@pytest.mark.parametrize(
    ("request_id", "conversation_id"), [("r" * 199, "main"), ("ok", "no spaces allowed")]
)
async def test_ids_that_the_kernel_could_not_use_are_refused_at_submit(
    tmp_path: Path, request_id: str, conversation_id: str
) -> None:
    async with kernel(tmp_path, calc_registry()) as k:
        with pytest.raises(InvalidInput) as refused:
            await k.client.submit(
                "s1", request_id, {"text": "hello"}, conversation_id=conversation_id
            )
        assert ("request_id" if request_id != "ok" else "conversation_id") in refused.value.message
        assert (await k.store.session("s1")).seq == 0


async def test_a_submission_the_kernel_cannot_turn_into_a_task_fails_alone(
    tmp_path: Path,
) -> None:
    # Accepted by an older or foreign ingress that did not check it: the kernel answers
    # it as failed with the reason, and the session's other work goes on.
    async with kernel(tmp_path, calc_registry()) as k:
        handle = await k.store.session("s1")
        bad = Submission(request_id="bad", input={"task": {"kind": "calc", "version": 0}})
        await handle.commit(Commit(submissions=(bad,)), fence=None)
        await k.submit_task("calc", {"n": 21}, request_id="good")
        await k.run()
        failed, good = await k.submission("bad"), await k.submission("good")
        assert failed.status is SubmissionStatus.FAILED and failed.error is not None
        assert "version" in failed.error.message
        assert (good.status, good.answer) == (SubmissionStatus.ANSWERED, 42)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
task_requests = st.dictionaries(
    st.sampled_from(["kind", "version", "input", "id", "phase", "extra"]),
    st.sampled_from(["calc", "mystery", "", 0, 1, -3, "root.good"]) | json_values,
    max_size=4,
)
inputs = (
    json_values
    | st.builds(lambda t: {"task": t}, task_requests)
    | st.builds(lambda t: {"text": t}, json_values)
)
request_ids = st.text(alphabet="abcXYZ019._:@- ", min_size=0, max_size=210)


async def submit_all(k: Kernel, submissions: list[tuple[str, Any]]) -> None:
    for request_id, value in submissions:
        if request_id == "good":
            continue
        with contextlib.suppress(InvalidInput):
            await k.client.submit("s1", request_id, value)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(submissions=st.lists(st.tuples(request_ids, inputs), max_size=4))
def test_a_good_submission_completes_whatever_else_was_submitted(
    submissions: list[tuple[str, Any]],
) -> None:
    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as workdir:
            async with kernel(Path(workdir), calc_registry()) as k:
                await submit_all(k, submissions)
                await k.submit_task("calc", {"n": 4}, request_id="good")
                await asyncio.wait_for(k.run(), 30)
                good = await k.submission("good")
                assert (good.status, good.answer) == (SubmissionStatus.ANSWERED, 8)

    asyncio.run(scenario())
