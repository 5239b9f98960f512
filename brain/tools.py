"""The tool boundary: what a tool declares, and the dispatcher that runs it.

A tool declares its replay policy — ``safe`` (re-running with the same operation id is
harmless) or ``unsafe`` — and whether it has a *query* entry point that reports the
outcome of a given operation id. The kernel uses both to recover an operation whose
outcome is unknown (``brain.operations``). Composite tools name a task kind instead of
running code: the kernel runs them as durable subtasks.

This module's ``LocalDispatcher`` runs tools as Python coroutines in the Brain's
process, and knows the sandboxed tools of the catalog (``add_sandboxed``): a call to one
of those commits an intent and a dispatch, and the Hands run it (``brain.operations``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from pydantic import Field, JsonValue

from contracts import BrainhandsError, InvalidInput, NotFound, OutcomeUnknown, ReplayPolicy
from contracts.arguments import argument_problem
from contracts.model import Frozen
from contracts.question import ApprovalRule
from contracts.tool import ToolDefinition
from contracts.workspace import WorkspaceAccess


class ToolSpec(Frozen):
    name: str
    version: int = 1
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    replay: ReplayPolicy = ReplayPolicy.UNSAFE
    queryable: bool = False
    task_kind: str | None = None
    timeout: timedelta = timedelta(seconds=60)
    #: run by the Hands in a sandbox: a call commits an intent and waits for the result
    sandboxed: bool = False
    #: calls need a person's approval before they run (``contracts.question``)
    approval: ApprovalRule | None = None
    #: how its calls mount the session's workspace (sandboxed tools only: an in-process
    #: tool has no sandbox to mount it in)
    workspace: WorkspaceAccess = WorkspaceAccess()


class QueryUnanswered(BrainhandsError):
    """A query entry point got no answer (a timeout, a dropped connection): that is no
    outcome of anything — the phase that asked is retried and asks again; nothing is
    sent, and no task fails for it."""

    code = "query_unanswered"
    retryable = True


class QueryAnswer(Frozen):
    """What a tool's query entry point knows about one operation id."""

    found: bool
    output: JsonValue = None


class ToolDispatcher(Protocol):
    def specs(self) -> Sequence[ToolSpec]: ...

    def spec(self, name: str) -> ToolSpec | None: ...

    async def run(self, name: str, args: dict[str, Any], *, operation_id: str) -> JsonValue:
        """Run the tool once; raises ``ToolFailed`` (did not happen) or ``OutcomeUnknown``."""
        ...

    async def query(self, name: str, args: dict[str, Any], *, operation_id: str) -> QueryAnswer:
        """Ask the tool whether the operation happened; only for queryable tools."""
        ...


RunFn = Callable[[dict[str, Any], str], Awaitable[JsonValue]]
QueryFn = Callable[[dict[str, Any], str], Awaitable[QueryAnswer]]


@dataclass(frozen=True)
class LocalTool:
    spec: ToolSpec
    run: RunFn | None = None
    query: QueryFn | None = None


class LocalDispatcher:
    """Tools as coroutines in this process: ``run(args, operation_id)``."""

    def __init__(self) -> None:
        self._tools: dict[str, LocalTool] = {}

    def register(
        self, spec: ToolSpec, run: RunFn | None = None, query: QueryFn | None = None
    ) -> None:
        if spec.name in self._tools:
            raise InvalidInput(f"tool {spec.name!r} is registered twice")
        if (run is None) == (spec.task_kind is None):
            raise InvalidInput(f"tool {spec.name!r} needs either code to run or a task kind")
        if spec.queryable and query is None:
            raise InvalidInput(f"tool {spec.name!r} is declared queryable but has no query")
        if spec.workspace.mounts:
            raise InvalidInput(
                f"tool {spec.name!r} runs in this process: only a tool run on the Hands "
                "mounts the workspace (register an image that declares it)"
            )
        self._tools[spec.name] = LocalTool(
            spec.model_copy(update={"queryable": query is not None}), run, query
        )

    def add_sandboxed(self, definition: ToolDefinition) -> None:
        """Run ``definition`` on the Hands; it replaces an in-process tool of that name
        (the choice is per tool)."""
        spec = ToolSpec(
            name=definition.name,
            version=definition.version,
            description=definition.description,
            parameters=definition.parameters,
            replay=definition.replay,
            queryable=definition.queryable,
            timeout=timedelta(seconds=definition.timeout_s),
            sandboxed=True,
            approval=definition.approval,
            workspace=definition.workspace,
        )
        self._tools[spec.name] = LocalTool(spec)

    def specs(self) -> Sequence[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def spec(self, name: str) -> ToolSpec | None:
        tool = self._tools.get(name)
        return None if tool is None else tool.spec

    async def run(self, name: str, args: dict[str, Any], *, operation_id: str) -> JsonValue:
        tool = self._tool(name)
        assert tool.run is not None, "composite tools run as tasks, not through run()"
        return await tool.run(args, operation_id)

    async def query(self, name: str, args: dict[str, Any], *, operation_id: str) -> QueryAnswer:
        """What the tool's query entry point knows; ``QueryUnanswered`` (retryable) when
        it got no answer — its ``OutcomeUnknown`` is about the query, not the action."""
        tool = self._tool(name)
        if tool.query is None:
            raise InvalidInput(f"tool {name!r} has no query entry point")
        try:
            return await tool.query(args, operation_id)
        except OutcomeUnknown as error:
            raise QueryUnanswered(
                f"operation {operation_id} ({name}): its query did not answer "
                f"({error.message}); asked again on a later attempt",
                operation_id=operation_id,
            ) from error

    def _tool(self, name: str) -> LocalTool:
        tool = self._tools.get(name)
        if tool is None:
            raise NotFound(f"unknown tool {name!r}")
        return tool


def validate_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """The arguments as a dict, or ``InvalidInput`` saying what is wrong and where."""
    problem = argument_problem(spec.name, spec.parameters, arguments)
    if problem is not None:
        raise InvalidInput(problem.message, **problem.details)
    assert isinstance(arguments, dict)
    return arguments
