"""Traces: a phase's spans on any Brain fall into the trace of its root task (derived,
the same everywhere), and the dispatch's carrier makes the Hands' span a child of the
Brain's ``execute_tool`` span; exported over OTLP to a receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from opentelemetry import trace

from runtime.tracing import carrier, from_carrier, phase_span_id, work_context
from tests.support.otlp import otlp_receiver
from tests.support.processes import ROOT

_PROCESS = """
import sys
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from runtime.tracing import TRACER, carrier, from_carrier, setup_tracing, work_context
assert setup_tracing(sys.argv[1])
if sys.argv[1] == "brain":
    with TRACER.start_as_current_span("invoke_agent agent", context=work_context("s1", "root.r1")):
        with TRACER.start_as_current_span("execute_tool send", kind=SpanKind.PRODUCER):
            print(carrier()["traceparent"])
else:
    parent = from_carrier({"traceparent": sys.argv[2]})
    with TRACER.start_as_current_span("execute_tool send", context=parent, kind=SpanKind.CONSUMER):
        pass
trace.get_tracer_provider().shutdown()
"""


def _run(receiver_url: str, *args: str) -> str:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url}
    done = subprocess.run(
        [sys.executable, "-c", _PROCESS, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_the_root_tasks_trace_is_the_same_on_every_brain() -> None:
    one = trace.get_current_span(work_context("s1", "root.r1")).get_span_context()
    again = trace.get_current_span(work_context("s1", "root.r1")).get_span_context()
    other = trace.get_current_span(work_context("s1", "root.r2")).get_span_context()
    assert (one.trace_id, one.span_id) == (again.trace_id, again.span_id)
    assert one.trace_id != other.trace_id and one.is_remote


def test_a_hands_span_joins_the_brains_trace_across_processes() -> None:
    assert carrier() == {} and from_carrier({}) is not None  # no span: nothing to carry
    with otlp_receiver() as receiver:
        traceparent = _run(receiver.url, "brain")
        _run(receiver.url, "hands", traceparent)
        spans = {(span.service, span.name): span for span in receiver.spans}
    agent = spans["brainhands-brain", "invoke_agent agent"]
    sent = spans["brainhands-brain", "execute_tool send"]
    ran = spans["brainhands-hands", "execute_tool send"]
    root = trace.get_current_span(work_context("s1", "root.r1")).get_span_context()
    assert agent.trace_id == sent.trace_id == ran.trace_id == f"{root.trace_id:032x}"
    assert agent.parent_span_id == f"{root.span_id:016x}"
    assert sent.parent_span_id == agent.span_id and ran.parent_span_id == sent.span_id


_PHASES = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from runtime.tracing import TRACER, WorkIds, phase_span
memory = InMemorySpanExporter()
provider = TracerProvider(id_generator=WorkIds())
provider.add_span_processor(SimpleSpanProcessor(memory))
trace.set_tracer_provider(provider)
ids = {"session_id": "s1", "root_task_id": "root.r1", "task_id": "root.r1", "attributes": {}}
with phase_span("invoke_agent agent", rev=3, attempts=1, **ids):  # the Brain that dies
    with TRACER.start_as_current_span("chat m"):
        pass
with phase_span("invoke_agent agent", rev=4, attempts=2, **ids):  # the one that resumes
    pass
print(json.dumps([
    {"name": s.name, "span": s.context.span_id, "trace": s.context.trace_id,
     "parent": s.parent.span_id if s.parent else None,
     "links": [link.context.span_id for link in s.links]}
    for s in memory.get_finished_spans()
]))
"""


def test_a_resumed_phase_links_to_the_earlier_attempt_not_parents_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PHASES], cwd=ROOT, capture_output=True, text=True, check=True
    )
    chat, first, second = json.loads(done.stdout)
    root = trace.get_current_span(work_context("s1", "root.r1")).get_span_context()
    assert first["span"] == phase_span_id("s1", "root.r1", 3)
    assert second["span"] == phase_span_id("s1", "root.r1", 4)
    assert first["trace"] == second["trace"] == chat["trace"] == root.trace_id
    assert first["parent"] == second["parent"] == root.span_id  # siblings, not parent-child
    assert second["links"] == [first["span"]] and first["links"] == []
    assert chat["parent"] == first["span"] and chat["span"] != first["span"]
