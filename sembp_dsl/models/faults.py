"""Why a model call failed, in words: the provider's own line, the HTTP status, the endpoint, what to set.

Every failed attempt becomes a `Failure`, and its `kind` decides what happens next:
- transient: worth another try (rate limits, timeouts, dropped connections, 5xx, malformed replies);
- request: this request cannot succeed, others may (bad request, context length): not retried;
- config: no request can succeed (no or bad key, unknown model, nothing listening at the address):
  the command stops at once, saying what to set.

Nothing here may print a secret: endpoints lose their user:password@ and query, and key-like
strings in providers' messages are masked.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import asdict, dataclass
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from socket import gaierror
from time import time
from urllib.parse import urlsplit

from ..errors import Option, OptionError, SbpcError, worded

TRANSIENT, REQUEST, CONFIG = "transient", "request", "config"
MAX_RETRY_AFTER = 30.0  # seconds: a server asking for longer is waited on this long, then asked again (retry.py)

KEY_HINT = (
    "set OPENAI_API_KEY (a local OpenAI-compatible server accepts any value, e.g. OPENAI_API_KEY=dummy), "
    "or name the variable that holds the key with api_key_env in the model block"
)
ADDRESS_HINT = Option(
    "start the server, or fix api_base / OPENAI_BASE_URL",  # api_base= or the model block's
    "start the server, or fix api_base / --api-base / OPENAI_BASE_URL",
)
PATH_HINT = "check api_base: an OpenAI-compatible server's base URL usually ends in /v1"
MODEL_HINT = Option(
    "check the model name (model= or name in the model block)",
    "check the model name (--model or name in the model block)",
)
CONTEXT_HINT = "the prompt is too long for the model: shorten the inputs, lower max_tokens, or use a larger model"

LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*|\w*(?:Error|Exception)\s*[:\-]\s*|Timeout Error:\s*)+")
TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
TAG = re.compile(r"<[^>]*>")
SECRET = re.compile(r"\b(sk-|key-|Bearer\s+|Basic\s+)[A-Za-z0-9_\-.+/=]{6,}")
MISSING_CREDENTIALS = re.compile(
    r"missing credentials|api[_ ]?key\b.{0,80}\b(?:must be set|not set|environment variable)"
    r"|no api key",
    re.I | re.S,
)
CONTEXT_LENGTH = re.compile(r"context[_ ]length|context window|maximum context|too many tokens", re.I)


#: The exception type litellm raises for each HTTP status (litellm.exception_type): the names a
#: failure on the fast path, which never imports litellm, is given (tests check them against litellm).
LITELLM_NAMES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    408: "Timeout",
    422: "BadRequestError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "Timeout",
}  # any other status: "APIError"
NO_REPLY = ("Timeout", "APIConnectionError")  # failures where no HTTP reply came back


class BadReply(SbpcError):
    """A 2xx reply that is not a chat completion (not JSON, no choices, null content): worth another try."""

    status_code = 200


class CallError(SbpcError):
    """A failed call on the fast path, named as litellm would name it."""

    def __init__(
        self, message: str, status_code: int | None = None, headers: dict | None = None, name: str | None = None
    ):
        super().__init__(message)
        self.message, self.status_code, self.headers = message, status_code, headers or {}
        self.name = name or (LITELLM_NAMES.get(status_code, "APIError") if status_code is not None else "APIError")


class NoConnection(CallError):
    """No connection within the connect timeout: a wrong address until the server has answered once."""

    def __init__(self, message: str):
        super().__init__(message, name="APIConnectionError")


class PlainHttp(CallError):
    """An https:// address whose server speaks plain http: no request can succeed until the URL says http://."""

    def __init__(self, url: str):
        super().__init__("the server speaks http, not https", name="APIConnectionError")
        self.hint = f"use {url}"


def is_call_error(exc: BaseException) -> bool:
    """A failed call (ours, or litellm's, whose errors all derive from openai's), not a bug."""
    openai = sys.modules.get("openai")  # never imported here: if it is not loaded, litellm raised nothing
    return isinstance(exc, (CallError, BadReply)) or (openai is not None and isinstance(exc, openai.OpenAIError))


@dataclass(frozen=True)
class Failure:
    kind: str  # transient | request | config
    error: str  # the exception's class name, e.g. RateLimitError
    status: int | None  # the HTTP status, when there was a reply
    endpoint: str | None  # scheme://host:port/path, never credentials
    message: str  # the provider's first meaningful line
    hint: str = ""  # what to set or do; an Option when it names one
    retry_after: float | None = None  # seconds the server asked us to wait, as asked (retry.py bounds the wait)

    @property
    def cause(self) -> str:
        """A short label to count failures by: '503 Service Unavailable', 'Timeout', 'BadReply: ...'."""
        if self.status and self.status != 200:
            return f"{self.status} {_phrase(self.status)}".strip()
        return self.error if self.error != "BadReply" else f"malformed reply: {self.message}"

    @property
    def kind_of_cause(self) -> str:
        """The cause by kind alone, as spans carry it without --otel-content: the HTTP status or the error's class,
        never what the server sent (a proxy's error page may repeat the prompt)."""
        if self.status and self.status != 200:
            return self.cause
        return self.error if self.error != "BadReply" else "malformed reply"

    def describe(self) -> Option:
        """One line: the cause, where, the provider's words, and what to do (in each front end's words)."""
        where = f" from {self.endpoint}" if self.endpoint else ""
        text = f"{self.cause}{where}"
        if self.message and self.message not in text:
            text += f": {self.message}"
        return worded(text, " (", self.hint, ")") if self.hint else worded(text)

    def to_json(self) -> dict:
        return asdict(self)


def redact(url: str | None) -> str | None:
    """scheme://host:port/path of a URL: no user:password@, no query (it may hold a key)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparseable URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else host + port + parts.path


def mask_secrets(text: str, secrets: tuple[str, ...] = ()) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return SECRET.sub(lambda m: m.group(1) + "***", text)


def first_line(text: str, status: int | None = None) -> str:
    """The provider's first meaningful line: an HTML page's <title> (or first text), never the page."""
    text = LITELLM_PREFIX.sub("", str(text).strip())
    title = TITLE.search(text)
    if title:
        text = title.group(1)
    elif text.lstrip().startswith("<"):
        text = TAG.sub("\n", text)
    line = next((" ".join(row.split()) for row in text.splitlines() if row.strip()), "")
    line = LITELLM_PREFIX.sub("", line)[:300]
    return line or (_phrase(status) if status else "") or "no message"


def retry_after(headers) -> float | None:
    """Seconds a Retry-After header (seconds or an HTTP date) or retry-after-ms asks for, as asked: a wait far
    past MAX_RETRY_AFTER tells a command it cannot work now (llm.py), so it is not cut here."""
    value = None
    for name, v in (headers or {}).items():
        if str(name).lower() in ("retry-after", "retry-after-ms"):
            value = (name.lower(), str(v).strip())
            break
    if value is None:
        return None
    name, text = value
    try:
        seconds = float(text) / (1000 if name == "retry-after-ms" else 1)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(text).timestamp() - time()
        except (TypeError, ValueError, IndexError):
            return None
    if not math.isfinite(seconds):  # NaN or infinity: no wait a record could hold (JSON has neither)
        return None
    return max(seconds, 0.0)


NO_PROVIDER = re.compile(r"LLM Provider NOT provided", re.IGNORECASE)  # litellm's words for a bare name it lacks


def classify(exc: BaseException, endpoint: str | None, reached: bool, secrets: tuple[str, ...] = ()) -> Failure:
    """What a failed attempt means. `reached`: a call to this endpoint has succeeded before, so a
    refused connection is a server restarting, not a wrong address. Judged by the HTTP status and
    litellm's exception names, so neither litellm nor openai need be imported."""
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    error = exc.name if isinstance(exc, CallError) else type(exc).__name__
    message = mask_secrets(first_line(getattr(exc, "message", None) or str(exc), status), secrets)
    if isinstance(exc, BadReply):
        return Failure(TRANSIENT, error, status, endpoint, message)
    if isinstance(exc, PlainHttp):
        return Failure(CONFIG, error, status, endpoint, message, exc.hint)
    if NO_PROVIDER.search(message):  # litellm refused the call itself: no server was asked, so none is named
        return Failure(CONFIG, error, None, None, message, "a model name is provider/model, e.g. openai/gpt-4o-mini")
    unreachable = _unreachable(exc)
    if unreachable:  # no reply came, so no status: the connection's failure is the message
        return Failure(
            TRANSIENT if reached else CONFIG, error, None, endpoint, unreachable, "" if reached else ADDRESS_HINT
        )
    if error in NO_REPLY or error == "APITimeoutError":
        no_status = status in (408, 500)  # litellm's stand-ins: no reply came, so no status either
        return Failure(TRANSIENT, error, None if no_status else status, endpoint, message)
    kind, hint = _answered(error, status, message)
    wait = retry_after(_headers(exc)) if kind == TRANSIENT and status in (429, 503, 529) else None
    return Failure(kind, error, status, endpoint, message, hint, wait)


def _answered(error: str, status: int | None, message: str) -> tuple[str, str]:
    """What a refusal the server answered with means: its kind, and what to set or do."""
    if status in (401, 403) or error in ("AuthenticationError", "PermissionDeniedError"):
        return CONFIG, KEY_HINT
    if MISSING_CREDENTIALS.search(message):
        return CONFIG, KEY_HINT
    if status == 404 or error == "NotFoundError":
        return CONFIG, MODEL_HINT if "model" in message.lower() else PATH_HINT
    if status in (408, 409, 425, 429) or (status is not None and status >= 500):
        return TRANSIENT, ""
    return REQUEST, CONTEXT_HINT if CONTEXT_LENGTH.search(message) else ""


def _headers(exc: BaseException):
    """The reply's headers: ours, or where litellm and openai keep them."""
    if isinstance(exc, CallError):
        return exc.headers
    return getattr(exc, "litellm_response_headers", None) or getattr(getattr(exc, "response", None), "headers", None)


def _unreachable(exc: BaseException | None) -> str | None:
    """'connection refused' or 'unknown host' somewhere in the exception's chain, else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        os_error = getattr(exc, "os_error", None)
        for e in (exc, os_error):
            if isinstance(e, ConnectionRefusedError):
                return "connection refused: nothing listens at this address"
            if isinstance(e, gaierror):
                return "unknown host"
            if isinstance(e, NoConnection):
                return e.message
        exc = exc.__cause__ or exc.__context__
    return None


def _phrase(status: int | None) -> str:
    if status is None:
        return ""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


# What a failure becomes for the caller: one call lost, or no call can work.


class CallFailed(SbpcError):
    """A call that failed for good after its retries: that sample is lost, the run goes on."""

    def __init__(self, failure: Failure, attempts: int):
        super().__init__(failure.describe() + (f" (after {attempts} attempts)" if attempts > 1 else ""))
        self.failure: Failure | None = failure  # None from Pipeline.predict when a prompt did not render


class LLMError(OptionError):
    """A call that cannot succeed (bad key, unknown model, no model): stop with this message, which names
    options as the caller gave them (`model=` in Python, `--model` on the command line). `model`: the named model
    whose calls cannot work, when they were on trial (stops.py `trying`) and the command goes on without it."""

    def __init__(self, *parts: str, model: str | None = None):
        super().__init__(*parts)
        self.model = model
