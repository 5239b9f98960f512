"""OpenTelemetry traces of brainhands, on the GenAI semantic conventions.

Exported over OTLP (HTTP/protobuf) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; otherwise the API's no-op tracer costs
next to nothing. The standard ``OTEL_*`` variables (headers, timeouts, sampler) apply.

One trace per piece of work a person asked for: a submission's root task and every task
under it, whichever Brain runs each phase — the trace id is derived from the session and
the root task's id, so a Brain that takes the session over after a crash writes into the
same trace (its spans are siblings under the same virtual root, not children of the dead
Brain's). Spans:

* ``invoke_agent {kind}`` / ``run_task {kind}``: one phase run of a task (an agent's, or
  another kind's), on a Brain. Its span id is derived from the task and the revision
  that started the run, so a later start of the same phase (after a crash: another
  Brain, or this one again) links to the earlier one's span — a link, not a parent;
* ``wait {what}``: a task's wait, from the commit that began it to the commit that ended
  it (``operations``, ``tasks``, ``question`` or ``sleep``), written by the Brain that
  ends it — a wait often outlives the Brain that began it. Its start is the waiting
  revision's time on the clock of the Brain that wrote it: across hosts the span's length
  is as good as their clocks' agreement (it never ends before it starts);
* ``chat {model}``: one model call, with ``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens``/``output_tokens``, ``gen_ai.response.finish_reasons``;
* ``execute_tool {tool}``: on the Brain when a sandboxed call is committed as an intent,
  and on each Hands that handles the operation (its claim and sandbox run as children),
  with ``gen_ai.tool.call.id`` = the operation id. The intent's dispatch carries the
  Brain span's W3C ``traceparent``: a Hands on another host, or a later attempt after a
  crash, joins the same trace.

Spans still in a batch when a process is SIGKILLed are lost (the batch is sent every
half second); what the store holds is never lost with them. One kind is not left to the
batch: a dispatch names the Brain's ``execute_tool`` span as the Hands' parent, so the
Brain sends its spans (``flush``) before it commits the intent — a Brain killed right
after that commit leaves no Hands span without its parent. That costs one export per
tool call, only when tracing is on.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import hashlib
import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

TRACER: Final = trace.get_tracer("brainhands")
_ENDPOINTS: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


#: how long ``flush`` waits for the exporter before the Brain goes on without it
FLUSH_TIMEOUT_MS: Final = 500
_PROVIDER: list[TracerProvider] = []  # the one this process set up, if any

_NEXT_SPAN_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "bh_next_span_id", default=None
)


class WorkIds(RandomIdGenerator):
    """Random ids, except a span id chosen for the next span (``phase_span``)."""

    def generate_span_id(self) -> int:
        chosen = _NEXT_SPAN_ID.get()
        if chosen is not None:
            _NEXT_SPAN_ID.set(None)
            return chosen
        return super().generate_span_id()


def setup_tracing(service: str) -> bool:
    """Export this process's spans over OTLP when an endpoint is configured; whether so."""
    if not any(os.environ.get(name) for name in _ENDPOINTS):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": f"brainhands-{service}"})
    provider = TracerProvider(resource=resource, id_generator=WorkIds())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=500))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    _PROVIDER[:] = [provider]
    return True


async def flush() -> None:
    """Send the spans this process has ended so far, before a commit that other
    processes' spans will name as a parent (bounded: ``FLUSH_TIMEOUT_MS``; an exporter
    that is away costs that wait, never the commit). Nothing when tracing is off."""
    if _PROVIDER:
        await asyncio.to_thread(_PROVIDER[0].force_flush, FLUSH_TIMEOUT_MS)


def work_context(session_id: str, root_task_id: str) -> otel_context.Context:
    """The context whose (virtual, remote) parent span is the root of the trace of
    ``root_task_id``'s work in ``session_id``: the same on every Brain."""
    digest = hashlib.sha256(f"{session_id}\x00{root_task_id}".encode()).digest()
    parent = SpanContext(
        trace_id=int.from_bytes(digest[:16], "big") or 1,
        span_id=int.from_bytes(digest[16:24], "big") or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def phase_span_id(session_id: str, task_id: str, rev: int) -> int:
    """The span id of the phase run of ``task_id`` started by its revision ``rev``."""
    digest = hashlib.sha256(f"{session_id}\x00{task_id}\x00{rev}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


@contextlib.contextmanager
def phase_span(
    name: str,
    *,
    session_id: str,
    root_task_id: str,
    task_id: str,
    rev: int,
    attempts: int,
    attributes: dict[str, Any],
) -> Iterator[trace.Span]:
    """The span of one phase run: in the trace of ``root_task_id``'s work, with its
    derived span id, linked to the run the previous revision started when this is not
    the phase's first start (that one crashed or was retried). With tracing off
    nothing is derived: a phase pays nothing for it."""
    if _tracing_off():
        yield trace.INVALID_SPAN
        return
    parent = work_context(session_id, root_task_id)
    trace_id = trace.get_current_span(parent).get_span_context().trace_id
    links = []
    if attempts > 1 and rev > 1:
        earlier = SpanContext(
            trace_id=trace_id,
            span_id=phase_span_id(session_id, task_id, rev - 1),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        links.append(trace.Link(earlier, {"brainhands.link": "earlier attempt"}))
    token = _NEXT_SPAN_ID.set(phase_span_id(session_id, task_id, rev))
    try:
        with TRACER.start_as_current_span(
            name,
            context=parent,
            links=links,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            _NEXT_SPAN_ID.set(None)  # a no-op tracer took no id: none for the next span
            yield span
    finally:
        _NEXT_SPAN_ID.reset(token)


def wait_span(
    what: str,
    *,
    session_id: str,
    root_task_id: str,
    since: datetime,
    until: datetime,
    attributes: dict[str, Any],
) -> None:
    """Record a finished wait (see the module docstring) in the trace of
    ``root_task_id``'s work; nothing with tracing off."""
    if _tracing_off():
        return
    end = int(until.timestamp() * 1e9)
    span = TRACER.start_span(
        f"wait {what}",
        context=work_context(session_id, root_task_id),
        start_time=min(int(since.timestamp() * 1e9), end),
        attributes=attributes,
    )
    span.end(end_time=end)


def _tracing_off() -> bool:
    """No tracer provider was set in this process: every span would be a no-op."""
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def carrier() -> dict[str, str]:
    """The current span's context as W3C headers (``traceparent``), to travel in a
    message; empty when there is no span."""
    headers: dict[str, str] = {}
    inject(headers)
    return headers


def from_carrier(headers: Mapping[str, str]) -> otel_context.Context:
    return extract(dict(headers))
