"""Spans for OpenTelemetry: the one door through which the stages tell what they do, a no-op unless a run asked
for spans (`--otel`, `otel=True`).

Each stage opens its spans where its events happen, through `span(name, attributes)`: models/llm.py a model
call, runtime/forward.py a sample's forward pass and each node, language/kinds/agent.py a tool call,
runtime/evaluate.py an evaluation and each sample, learning/ the run, each iteration, a backward pass, an
optimizer call and the gate. Whether spans are on travels in a context variable, as OpenTelemetry's current span
does, so spans nest across asyncio tasks (a task copies the context it was made in) and two pipelines in one
process keep their own setting. Off, a span is one context-variable read; opentelemetry (the `otel` extra) is
imported only by `start`, so a run that asked for no spans never imports it.

Model calls follow OpenTelemetry's GenAI semantic conventions (gen_ai.*); what is sbpc's own is named sbpc.*.
Prompt and reply text goes into spans only with `content` (an opt-in), and a key never does: every attribute is
chosen one by one, never copied from a request's settings. docs/telemetry.md lists the spans.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from . import __version__
from .errors import Option, OptionError

Value = str | bool | int | float | Sequence[str]
ON_WORDS = ("1", "true", "yes", "on")
# the GenAI instrumentations' own opt-in for prompt and reply text; its newer values name where the text goes
CONTENT_WORDS = (*ON_WORDS, "span_only", "span_and_event")
DEFAULT_ENDPOINT = "http://localhost:4318"  # OTLP/HTTP's, as the exporter takes it when no variable names one
OTHER = "_OTHER"  # the conventions' error.type for a failure with no better name
FLUSH_MILLIS = 15_000  # how long the end of a command waits for its last spans to be delivered


class TelemetryError(OptionError):
    """Spans were asked for (otel=True, --otel) but OpenTelemetry is not installed."""


class Span:
    """A span as the stages see it: attributes set as they become known, an event, a failure in words. This one is
    the span of a run that asked for none: it does nothing."""

    def set(self, attributes: Mapping[str, Value | None]) -> None:
        """Attributes known once the work is done (None values are left out)."""

    def event(self, name: str, attributes: Mapping[str, Value | None]) -> None:
        """Something that happened during the span (a retry)."""

    def fail(self, why: str, kind: str = OTHER) -> None:
        """The span's work failed; `why` is sbpc's own text, never an exception's message from a library (it may
        hold what was sent); `kind`, the conventions' low-cardinality error.type (an exception's class name)."""


OFF = Span()
_NOTHING = contextlib.nullcontext(OFF)


def clean(attributes: Mapping[str, Value | None]) -> dict[str, Value]:
    """Attributes as OpenTelemetry takes them: no None."""
    return {key: value for key, value in attributes.items() if value is not None}


class _Live(Span):
    def __init__(self, span: Any, status: Any):
        self._span, self._status, self.failed = span, status, False

    def set(self, attributes: Mapping[str, Value | None]) -> None:
        self._span.set_attributes(clean(attributes))

    def event(self, name: str, attributes: Mapping[str, Value | None]) -> None:
        self._span.add_event(name, clean(attributes))

    def fail(self, why: str, kind: str = OTHER) -> None:
        self._span.set_status(self._status.ERROR, why)
        self._span.set_attribute("error.type", kind)
        self.failed = True


@dataclass(frozen=True)
class Tracing:
    """Spans on: the tracer they go to, whether prompt and reply text goes with them, and OpenTelemetry's parts
    the spans need (imported by `start`)."""

    tracer: Any
    content: bool
    status: Any  # opentelemetry.trace.StatusCode
    current: Any  # opentelemetry.trace.get_current_span

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Value | None]) -> Iterator[Span]:
        with self.tracer.start_as_current_span(
            name, attributes=clean(attributes), record_exception=False, set_status_on_exception=False
        ) as span:
            live = _Live(span, self.status)
            try:
                yield live
            except BaseException as exc:  # named by its type alone: a library's message may hold what it was sent
                if not live.failed:
                    live.fail(type(exc).__name__, type(exc).__name__)
                raise


_ON: ContextVar[Tracing | None] = ContextVar("sbpc_tracing", default=None)


def span(name: str, attributes: Mapping[str, Value | None] | None = None) -> contextlib.AbstractContextManager[Span]:
    """A span around the work in the `with` block, a child of the current one; nothing when spans are off."""
    tracing = _ON.get()
    return _NOTHING if tracing is None else tracing.span(name, attributes or {})


def current() -> Span:
    """The innermost span open here (to add an event to), or one that does nothing."""
    tracing = _ON.get()
    return OFF if tracing is None else _Live(tracing.current(), tracing.status)


def content() -> bool:
    """Whether prompt and reply text goes into spans here: only when spans are on and the user opted in."""
    tracing = _ON.get()
    return tracing is not None and tracing.content


@contextlib.contextmanager
def exporting(tracing: Tracing | None) -> Iterator[None]:
    """Spans on (or off, with None) for the work in the `with` block and every task it starts."""
    token = _ON.set(tracing)
    try:
        yield
    finally:
        _ON.reset(token)


def asked(flag: bool | None) -> bool:
    """Whether spans are wanted: the flag, else SBPC_OTEL in the environment (the opt-in that goes with the
    standard OTEL_EXPORTER_OTLP_ENDPOINT)."""
    return flag if flag is not None else os.environ.get("SBPC_OTEL", "").strip().lower() in ON_WORDS


def content_asked(flag: bool | None) -> bool:
    """Whether prompt and reply text is wanted in spans: the flag, else the GenAI instrumentations' variable
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT."""
    if flag is not None:
        return flag
    return os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() in CONTENT_WORDS


class _Delivery:
    """The OTLP exporter, counting the spans it could not deliver, so that a command can say so at its end."""

    def __init__(self, exporter: Any, success: Any):
        self.exporter, self.success, self.lost = exporter, success, 0

    def export(self, spans: Sequence[Any]) -> Any:
        result = self.exporter.export(spans)
        if result != self.success:
            self.lost += len(spans)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = FLUSH_MILLIS) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))


@dataclass(frozen=True)
class _Own:
    """sbpc's own TracerProvider, made once per process when the application set none."""

    provider: Any
    delivery: _Delivery


_OWN: list[_Own] = []  # at most one


def start(content: bool = False) -> Tracing:
    """Spans on, to the application's TracerProvider when it set one (sbpc's spans then join its traces), else to
    sbpc's own, which sends them by OTLP/HTTP where the standard variables say (OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, ..._HEADERS; default http://localhost:4318). TelemetryError when
    OpenTelemetry is not installed."""
    try:
        # the `otel` extra, about 160 ms to import with its exporter: only a run that asked for spans pays it
        from opentelemetry import trace
    except ImportError:
        raise TelemetryError(
            Option("otel=True", "--otel"),
            " exports spans with OpenTelemetry, which is not installed: pip install 'sbpc[otel]'",
        )
    given = trace.get_tracer_provider()
    if isinstance(given, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        given = _own_provider()
    tracer = given.get_tracer("sbpc", __version__)
    return Tracing(tracer, content, trace.StatusCode, trace.get_current_span)


def _own_provider() -> Any:
    if not _OWN:
        # the `otel` extra (see start): imported only when spans are on and the application set no provider
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

        named = "OTEL_SERVICE_NAME" in os.environ or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
        resource = Resource.create({"service.version": __version__, **({} if named else {"service.name": "sbpc"})})
        delivery = _Delivery(OTLPSpanExporter(), SpanExportResult.SUCCESS)
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(delivery))  # type: ignore[arg-type]  # an exporter in all but name
        # the exporter's retries are logged on a logger of its own; what was lost is said once, by `finish`
        logging.getLogger("opentelemetry.exporter.otlp").addHandler(logging.NullHandler())
        _OWN.append(_Own(provider, delivery))
    return _OWN[0].provider


def flush() -> None:
    """Send the spans sbpc's own provider still holds (the application's provider is the application's to flush)."""
    for own in _OWN:
        own.provider.force_flush(FLUSH_MILLIS)


def finish() -> str | None:
    """Deliver the spans still waiting; what could not be delivered, in words (None: every span was, or no span
    was made here)."""
    flush()
    lost = sum(own.delivery.lost for own in _OWN)
    if not lost:
        return None
    for own in _OWN:
        own.delivery.lost = 0
    return f"{lost} spans could not be delivered to {endpoint()} (is an OTLP/HTTP receiver listening there?)"


def endpoint() -> str:
    """Where spans go, as the standard variables say, without credentials or query."""
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    parts = urlsplit(traces or f"{base}/v1/traces")
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"


def server(endpoint: str | None) -> dict[str, Value | None]:
    """The semantic conventions' server.address and server.port of a model's endpoint (never its credentials)."""
    if not endpoint or "://" not in endpoint:
        return {}
    try:
        parts = urlsplit(endpoint)
        return {"server.address": parts.hostname, "server.port": parts.port}
    except ValueError:  # a port that is no number: no address worth naming
        return {}
