"""A loopback OTLP/HTTP trace receiver: what a collector (Jaeger, Phoenix, Langfuse, Tempo) is to `--otel`.

It takes `POST /v1/traces` bodies (binary protobuf, the exporter's default), keeps every body's bytes as received,
and decodes them with opentelemetry-proto into plain spans: name, ids, parent, attributes, status, events.
Tests and bench/otel.py use it in a thread of their process.

    with Receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, ...}
        ...
        spans = receiver.spans()
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Span:
    name: str
    span_id: str
    parent_id: str
    trace_id: str
    attributes: dict
    status: int  # 0 unset, 1 ok, 2 error
    message: str
    events: list[tuple[str, dict]] = field(default_factory=list)
    resource: dict = field(default_factory=dict)
    scope: str = ""


def value(any_value):
    """An OTLP AnyValue as Python."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind) if kind else None


def attributes(pairs) -> dict:
    return {kv.key: value(kv.value) for kv in pairs}


def decode(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                found.append(
                    Span(
                        s.name,
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        s.trace_id.hex(),
                        attributes(s.attributes),
                        s.status.code,
                        s.status.message,
                        [(e.name, attributes(e.attributes)) for e in s.events],
                        resource,
                        scope_spans.scope.name,
                    )
                )
    return found


class Receiver:
    """An OTLP/HTTP endpoint on 127.0.0.1 in a thread; `url` is what OTEL_EXPORTER_OTLP_ENDPOINT takes."""

    def __init__(self, status: int = 200):
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.bodies.append(body)
                    receiver.paths.append(self.path)
                    receiver.headers.append(dict(self.headers))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def raw(self) -> bytes:
        """Every byte received, headers included: what must hold no secret."""
        with self.lock:
            return b"".join(self.bodies) + repr(self.headers).encode()

    def spans(self) -> list[Span]:
        with self.lock:
            return [span for body in self.bodies for span in decode(body)]


if (
    __name__ == "__main__"
):  # a receiver in a process of its own (bench/otel.py): prints its URL, serves until stdin closes
    import sys

    with Receiver() as served:
        print(served.url, flush=True)
        sys.stdin.read()
        print(len(served.bodies), sum(map(len, served.bodies)), flush=True)
