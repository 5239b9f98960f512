"""The own-agent example (``examples/own-agent``) in tests: its plugin loaded by name as
the Brain loads ``BH_BRAIN_PLUGINS``, and a ``greet`` session driven to its end with a
Hands executor in this process running the ``letter_count`` call on a given sandbox."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from brain.operations import operation_id
from brain.worker import load_plugin
from contracts import Task, TaskStatus
from contracts.tool import ResultEvent, ToolDefinition
from hands.executor import Executor
from hands.sandbox import Sandbox
from tests.support.kernel import Kernel
from tests.support.processes import ROOT

EXAMPLE = ROOT / "examples" / "own-agent"
#: the tag the example's README and tools.json name
IMAGE = "greeter/letter-count:1"
TASK = "root.r1"


def greeted(name: str) -> dict[str, object]:
    """What the ``greet`` task of session ``s1`` answers for ``name``."""
    return {
        "greeting": f"HELLO, {name.upper()}!",
        "letters": sum(character.isalpha() for character in name),
        "operations": {
            "shout": operation_id("s1", TASK, "shout"),
            "letter_count": operation_id("s1", TASK, "count"),
        },
    }


async def load_greeter(
    k: Kernel,
    monkeypatch: pytest.MonkeyPatch,
    resources: AsyncExitStack,
    letter_count: ToolDefinition,
) -> None:
    """``greeter.tasks:plugin`` loaded into ``k`` and ``letter_count`` registered and run
    on the Hands (the Brain's ``--sandboxed letter_count``)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))  # what `pip install examples/own-agent` does
    await load_plugin("greeter.tasks:plugin")(k.registry, k.tools, resources)
    await k.store.tools.register(letter_count)
    k.tools.add_sandboxed(letter_count)


async def greet(k: Kernel, sandbox: Sandbox, name: str) -> Task:
    """Drive a ``greet`` of ``name`` in session s1: the Brain shouts and commits the
    ``letter_count`` call, a Hands runs that call once, the Brain finishes the task."""
    await k.submit_task("greet", {"name": name})
    await k.run()
    waiting = await k.task(TASK)
    count = operation_id("s1", TASK, "count")
    assert waiting.wait is not None and waiting.wait.operations == (count,), waiting
    events = await run_on_the_hands(k, sandbox)
    assert [event.operation_id for event in events] == [count]
    await k.run()
    done = await k.task(TASK)
    assert done.status is TaskStatus.TERMINAL, done
    return done


async def run_on_the_hands(k: Kernel, sandbox: Sandbox) -> list[ResultEvent]:
    """Run each call session s1 committed once, as a Hands; the result events."""
    events: list[ResultEvent] = []

    async def publish(event: ResultEvent) -> None:
        events.append(event)

    hands = Executor(store=k.store, sandbox=sandbox, publish=publish, executor_id="hands-test")
    for intent in (await k.store.session("s1")).state.intents.values():
        result = await hands.handle(intent.dispatch)
        assert result is not None and result.succeeded, result
    return events


async def ran_once(k: Kernel, *keys: str) -> None:
    """Each operation ``key`` of the task was started exactly once."""
    for key in keys:
        record = await k.store.get_operation(operation_id("s1", TASK, key))
        assert record is not None and record.attempts == 1, (key, record)
