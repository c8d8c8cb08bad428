"""Spans for OpenTelemetry: the one door through which the stages tell what they do, a no-op unless a run asked
for spans (`--otel`, `otel=True`).

Each stage opens its spans where its events happen, through `span(name, attributes)`: models/llm.py a model
call, runtime/forward.py a sample's forward pass and each node, language/kinds/agent/toolbox.py a tool call,
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

import atexit
import contextlib
import logging
import os
import threading
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
PROTOCOL = "http/protobuf"  # the one OTLP protocol sbpc's exporter speaks
DEFAULT_ENDPOINT = "http://localhost:4318"  # OTLP/HTTP's, as the exporter takes it when no variable names one
# each prompt, reply or tool text in a span is cut here: the exporter drops a batch (512 spans) over 64 MiB whole,
# small spans and all, and the queue holds up to 2048 spans in memory until they are sent
CONTENT_CHARS = 32_768
OTHER = "_OTHER"  # the conventions' error.type for a failure with no better name
FLUSH_MILLIS = 15_000  # what the SDK's flush is given (it sends every batch regardless: see `flush`)
FLUSH_SECONDS = 15.0  # the longest the end of a command, or of the process, waits for its last spans
QUICK_SECONDS = 2.0  # the same after Ctrl-C: the user asked to stop
_OTEL = Option("otel=True", "--otel")


class TelemetryError(OptionError):
    """Spans were asked for (otel=True, --otel) but OpenTelemetry is not installed, or the exporter's variables
    (endpoint, headers) cannot be used."""


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


def capped(text: str) -> str:
    """Prompt, reply or tool text as a span carries it: cut at CONTENT_CHARS, saying how much was left out."""
    if len(text) <= CONTENT_CHARS:
        return text
    return f"{text[:CONTENT_CHARS]}… [{len(text) - CONTENT_CHARS} more characters]"


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
    """The OTLP exporter, counting the spans it delivered and why the last batch was not, so that a command can say
    so at its end. Once a flush is under way, a receiver that failed a batch gets no more: the SDK's flush sends every
    batch still queued, each waiting up to the exporter's timeout, and ignores the time it is given."""

    def __init__(self, exporter: Any, success: Any, failure: Any):
        self.exporter, self.success, self.failure = exporter, success, failure
        self.delivered, self.flushing, self.gave_up = 0, False, False
        self.sending: threading.Thread | None = None  # the last flush's thread (`flush`)
        self.cause: str | None = None  # the last failure's cause: an HTTP status or an error's class, never its text

    def export(self, spans: Sequence[Any]) -> Any:
        if self.gave_up:
            return self.failure
        result = self.exporter.export(spans)
        if result == self.success:
            self.delivered += len(spans)
        elif self.flushing:
            self.gave_up = True
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = FLUSH_MILLIS) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))


class _Ended:
    """A span processor in all but name that counts the spans that ended: those not delivered are the difference,
    whether the receiver refused them or the batch queue dropped them when full (which the SDK only logs)."""

    def __init__(self) -> None:
        self.count = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to count until the span ends."""

    def _on_ending(self, span: Any) -> None:
        """Nothing to count until the span has ended (the SDK calls this on every processor)."""

    def on_end(self, span: Any) -> None:
        self.count += 1

    def shutdown(self) -> None:
        """Nothing held."""

    def force_flush(self, timeout_millis: int = FLUSH_MILLIS) -> bool:
        return True


class _Cause(logging.Handler):
    """Keeps the cause of the exporter's failures from its log records: the HTTP status, or the error's class. The
    records' text is not kept and not shown: a connection error's message holds the URL, credentials and all."""

    def __init__(self, delivery: _Delivery):
        super().__init__(logging.WARNING)  # a retried failure says its cause only in the retry's warning
        self.delivery = delivery

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        statuses = [f"HTTP {arg}" for arg in args if type(arg) is int and 100 <= arg < 600]  # not a size in bytes
        errors = [type(arg).__name__ for arg in args if isinstance(arg, BaseException)]
        if statuses or errors:
            self.delivery.cause = (statuses or errors)[0]


@dataclass(frozen=True)
class _Own:
    """sbpc's own TracerProvider, made once per process when the application set none."""

    provider: Any
    delivery: _Delivery
    ended: _Ended


_OWN: list[_Own] = []  # at most one
# loggers of OpenTelemetry that print what sbpc says itself: the exporter's failures (with the URL), the batch
# queue's drops, and a malformed header (with its value, a key perhaps); refused before the run (`_check_variables`)
_QUIET = ("opentelemetry.exporter.otlp", "opentelemetry.sdk._shared_internal", "opentelemetry.util.re")


def start(content: bool = False) -> Tracing:
    """Spans on, to the application's TracerProvider when it set one (sbpc's spans then join its traces), else to
    sbpc's own, which sends them by OTLP/HTTP where the standard variables say (OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, ..._HEADERS; default http://localhost:4318). TelemetryError when
    OpenTelemetry is not installed, or when those variables cannot be used."""
    try:
        # the `otel` extra, about 160 ms to import with its exporter: only a run that asked for spans pays it
        from opentelemetry import trace
    except ImportError:
        raise TelemetryError(
            _OTEL,
            " exports spans with OpenTelemetry, which is not installed: pip install 'sbpc[otel]'",
        )
    given = trace.get_tracer_provider()
    if isinstance(given, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        given = _own_provider()
    tracer = given.get_tracer("sbpc", __version__)
    return Tracing(tracer, content, trace.StatusCode, trace.get_current_span)


def _own_provider() -> Any:
    if not _OWN:
        _check_variables()
        try:  # its API alone is often installed (other libraries need it), without the SDK and exporter sbpc needs
            # the `otel` extra (see start): imported only when spans are on and the application set no provider
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
        except ImportError as exc:
            raise TelemetryError(
                _OTEL,
                f" exports spans with OpenTelemetry's SDK and OTLP/HTTP exporter, and {exc.name or 'a part'} is not "
                "installed: pip install 'sbpc[otel]'",
            )

        named = "OTEL_SERVICE_NAME" in os.environ or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
        resource = Resource.create({"service.version": __version__, **({} if named else {"service.name": "sbpc"})})
        delivery = _Delivery(OTLPSpanExporter(), SpanExportResult.SUCCESS, SpanExportResult.FAILURE)
        ended = _Ended()
        # the SDK's own shutdown at exit would wait for a batch in flight (up to the exporter's timeout) and then
        # send the rest: `flush`, bounded, does it instead
        provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        atexit.register(flush)
        provider.add_span_processor(ended)  # type: ignore[arg-type]  # a span processor in all but name
        provider.add_span_processor(BatchSpanProcessor(delivery))  # type: ignore[arg-type]  # an exporter, likewise
        for name in _QUIET:  # what was lost, and why, is said once, by `finish`
            logging.getLogger(name).addHandler(logging.NullHandler())
        logging.getLogger(_QUIET[0]).addHandler(_Cause(delivery))
        _OWN.append(_Own(provider, delivery, ended))
    return _OWN[0].provider


def _check_variables() -> None:
    """The exporter's variables refused before any call, named without their values: a protocol other than OTLP/HTTP
    (protobuf), or an endpoint that is no http(s) URL, would fail every batch (or, with a port that is no number, fail sbpc's own warning), and a header that is
    not name=value would be dropped with its value printed."""
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = os.environ.get(variable, PROTOCOL).strip().lower() or PROTOCOL
        if protocol != PROTOCOL:  # gRPC's port (4317) answers no HTTP: every batch would be lost
            raise TelemetryError(
                _OTEL,
                f": {variable} is {protocol!r}, but sbpc sends OTLP over HTTP ({PROTOCOL}): unset it, and point "
                "the endpoint at the receiver's OTLP/HTTP port (4318 by default)",
            )
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        url = os.environ.get(variable)
        if url is not None and not _usable(url):
            raise TelemetryError(
                _OTEL, f": {variable} is not an http:// or https:// URL with a host and a numeric port"
            )
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"):
        entries = [entry.strip() for entry in os.environ.get(variable, "").split(",")]
        for number, entry in enumerate(entries, 1):
            if entry and ("=" not in entry or not entry.partition("=")[0].strip()):
                raise TelemetryError(_OTEL, f": {variable}'s entry {number} is not name=value (its text is not shown)")


def _usable(url: str) -> bool:
    try:
        parts = urlsplit(url.strip())
        return parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # a port that is no number, or out of range
        return False


def flush(seconds: float = FLUSH_SECONDS) -> None:
    """Send the spans sbpc's own provider still holds (the application's provider is the application's to flush),
    waiting `seconds` at most: a receiver that failed a batch gets no more, but the batch it holds may wait out the
    exporter's timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default). What was not sent by then is lost, and
    counted so (`finish`): the sending goes on in a daemon thread, which the process does not wait for."""
    for own in _OWN:
        if own.delivery.sending is not None and own.delivery.sending.is_alive():
            continue  # an earlier flush still waits on the receiver: waiting again would only wait on it too
        own.delivery.flushing = True
        sending = own.delivery.sending = threading.Thread(
            target=own.provider.force_flush, args=(FLUSH_MILLIS,), daemon=True
        )
        sending.start()
        sending.join(seconds)
        if not sending.is_alive():  # else what is left fails at once, should anything wait on it
            own.delivery.flushing = own.delivery.gave_up = False


def finish(quick: bool = False) -> str | None:
    """Deliver the spans still waiting (`quick`: after Ctrl-C, for QUICK_SECONDS at most); what could not be
    delivered, in words (None: every span was, or no span was made here)."""
    flush(QUICK_SECONDS if quick else FLUSH_SECONDS)
    lost = sum(own.ended.count - own.delivery.delivered for own in _OWN)
    if lost <= 0:
        return None
    causes = sorted({own.delivery.cause for own in _OWN if own.delivery.cause})
    for own in _OWN:
        own.ended.count, own.delivery.delivered, own.delivery.cause = 0, 0, None
    why = f" ({', '.join(causes)})" if causes else " (is an OTLP/HTTP receiver listening there?)"
    return f"{lost} spans could not be delivered to {endpoint()}{why}"


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
