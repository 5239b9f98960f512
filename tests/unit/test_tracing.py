"""Traces: a phase's spans on any Brain fall into the trace of its root task (derived,
the same everywhere), and the dispatch's carrier makes the Hands' span a child of the
Brain's ``execute_tool`` span; exported over OTLP to a receiver."""

from __future__ import annotations

import os
import subprocess
import sys

from opentelemetry import trace

from runtime.tracing import carrier, from_carrier, work_context
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
