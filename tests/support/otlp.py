"""A small OTLP/HTTP trace receiver for tests: processes started with
``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``receiver.url`` send it their spans (protobuf), kept
as ``Span`` records; nothing leaves this machine."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    attributes: dict[str, Any]
    links: tuple[str, ...] = ()
    #: when it started and ended (ns since the epoch, the emitting host's clock)
    start_ns: int = 0
    end_ns: int = 0


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@dataclass
class Receiver:
    url: str
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, data: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(data)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            service=service,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=tuple(link.span_id.hex() for link in span.links),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def tree(self, trace_id: str, keys: tuple[str, ...] = (), root: str = "") -> str:
        """The spans of one trace as an indented tree (children under parents, in the
        order they arrived), with the attributes named by ``keys``. A span whose parent
        never arrived, and is not ``root`` (the trace's virtual root), is marked: its
        parent was lost with a killed process."""
        with self.lock:
            spans = [span for span in self.spans if span.trace_id == trace_id]
        ids = {span.span_id for span in spans}
        children: dict[str, list[Span]] = {}
        for span in spans:
            parent = span.parent_span_id if span.parent_span_id in ids else ""
            children.setdefault(parent, []).append(span)
        lines: list[str] = [f"trace {trace_id}"]

        def walk(parent: str, depth: int) -> None:
            for span in children.get(parent, []):
                shown = ", ".join(
                    f"{key}={span.attributes[key]}" for key in keys if key in span.attributes
                )
                lost = parent == "" and span.parent_span_id not in ("", root)
                if lost:
                    shown += "  (its parent span was lost with a killed process)"
                lines.append(f"{'  ' * depth}{span.name}  [{span.service}]  {shown}".rstrip())
                walk(span.span_id, depth + 1)

        walk("", 1)
        return "\n".join(lines) + "\n"

    def named(self, prefix: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.name.startswith(prefix)]


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            holder["receiver"].take(self.rfile.read(size))
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder["receiver"] = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder["receiver"]
    finally:
        server.shutdown()
        server.server_close()
