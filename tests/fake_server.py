"""Loopback OpenAI-compatible fake chat-completions server.

Test code: unit tests of the LLM layer use it in a background thread of the
test process; benchmarks add tests/ to their path and run it as a separate
process, so its CPU is not charged to the client being measured.

It is a deliberately small asyncio HTTP/1.1 server (keep-alive, Content-Length
and chunked request bodies) rather than aiohttp.web: one coroutine per
connection and no routing/middleware machinery keeps server CPU per request
low, so the server does not distort client-side measurements.  Every request
waits with ``asyncio.sleep`` so any number of concurrent requests overlap; the
listen backlog is large so hundreds of connections are accepted without
queueing.  A request whose client closes the connection while it waits is
dropped within 50 ms, as a real server aborts it (``in_flight`` goes down).

Endpoints
---------
``POST /v1/chat/completions`` and ``POST /chat/completions``
    OpenAI chat completion JSON (``stream: true`` is answered with SSE chunks).
``POST /v1/messages``
    Anthropic's Messages API, enough to see what an Anthropic model is sent (recorded in ``bodies``).
``GET /stats``
    ``{"requests", "connections", "in_flight", "max_in_flight",
    "cpu_seconds", "first_request_time"}`` -- lets a
    benchmark read counters from a server running in another process.
``POST /reset``
    Zero the counters (and re-arm scripted ``failures``).

Faults
------
``failures`` scripts the first requests; ``fault_rate`` injects faults at
random (seeded) into any request after that, drawn from ``fault_kinds``.
An entry is an HTTP status (answered with a JSON error) or one of
``FAULTS``: transient ones (``TRANSIENT_FAULTS``: 429 with and without
Retry-After, 500, 503, a hang, a body that is not JSON, a list body,
``choices: []``, no ``choices``, ``content: null``, a connection reset
mid-body, an HTML 502 page) and permanent ones (``PERMANENT_FAULTS``:
401 echoing the key it got, litellm's "Missing credentials" as a 500, an
HTML 404 page).  ``faults`` counts what was injected (``fault_counts`` by
kind); ``refused_url()`` is an address where nothing listens.

In-process use (tests)::

    from fake_server import FakeServer
    with FakeServer(delay=0.05, failures=[429, 500]) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="x")
        ...
        assert srv.requests == 3 and srv.max_in_flight <= 8

Subprocess use (benchmarks)::

    python tests/fake_server.py --delay 0.2 --port 0  # prints URL first

    from fake_server import spawn
    url, stop = spawn(0.2)
    try: ...
    finally: stop()
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["FakeServer", "spawn", "refused_url", "HANG", "FAULTS", "TRANSIENT_FAULTS", "PERMANENT_FAULTS"]

#: Put this in ``failures`` to make that request hang (sleep ``hang_seconds``).
HANG = "hang"
TRANSIENT_FAULTS = (
    "429",
    "429-retry-after",
    "500",
    "503",
    HANG,
    "malformed",
    "list-body",
    "empty-choices",
    "no-choices",
    "null-content",
    "reset",
    "html-502",
)
PERMANENT_FAULTS = ("401", "missing-credentials", "html-404")
FAULTS = TRANSIENT_FAULTS + PERMANENT_FAULTS
MISSING_CREDENTIALS = (
    "Missing credentials. Please pass an `api_key`, `workload_identity`, `admin_api_key`, "
    "or set the `OPENAI_API_KEY` or `OPENAI_ADMIN_KEY` environment variable."
)

Reply = None | str | Callable[[list], str]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Overloaded",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


def _count_tokens(text: str) -> int:
    """Cheap deterministic token estimate: whitespace-separated words."""
    return len(text.split())


def _message_text(message: Any) -> str:
    """Text of one chat message (string content or a list of content parts)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def default_reply(messages: list) -> str:
    """Deterministic reply: echoes the last message's text."""
    last = _message_text(messages[-1]) if messages else ""
    return f"echo: {last}"


class _State:
    """Server configuration and counters (shared by all connections)."""

    def __init__(
        self,
        delay: float,
        reply: Reply,
        failures: Sequence,
        hang: bool,
        hang_seconds: float,
        retry_after: float | str | None,
        record: bool = True,
        fault_rate: float = 0.0,
        fault_kinds: Sequence = TRANSIENT_FAULTS,
        seed: int = 0,
        slots: int = 0,
        rpm: int = 0,
        limit: int = 0,
        keep_alive: bool = True,
    ) -> None:
        self.keep_alive = keep_alive  # False: every answer says "Connection: close" and the connection ends
        self.routes: Callable | None = None  # more endpoints (fake_batch.py): a coroutine answering a request, or None
        self.limit = limit  # requests in flight at most (0: any number); one past it gets 429 at once
        self.refusal_delay = 0.0  # seconds that 429 takes (a provider's takes a network round trip), holding no place
        self.slots = slots  # requests served at once (0: any number); the others queue, as on a vLLM server
        self.rpm = rpm  # requests admitted in any 60 s (0: any number); the others get 429
        self.tpm = 0  # prompt tokens admitted per window of `tpm_window` s (0: any number); the others get 429
        self.tpm_window = 60.0
        self.cache_min, self.cache_step = 1024, 128  # OpenAI's prompt cache: prefixes of 1,024 tokens on, in 128s
        self.delay = delay
        self.record = record
        self.reply = reply
        self.failures = list(failures)
        self.hang = hang
        self.hang_seconds = hang_seconds
        self.retry_after = retry_after
        self.fault_rate = fault_rate
        self.fault_kinds = list(fault_kinds)
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        self.random = random.Random(self.seed)
        self.prefixes: set = set()  # hashes of the prompt prefixes seen (a provider's prompt cache)
        self.tpm_start: float | None = None  # time.monotonic() when the current token window began
        self.tpm_used = 0
        self.faults = 0  # faults injected (scripted or at random)
        self.fault_counts: dict = {}
        self.fault_times: list = []  # time.monotonic() of each injected fault
        self.requests = 0
        self.rate_limited = 0  # requests refused with 429 for going past rpm
        self.admitted: list = []  # time.monotonic() of the requests admitted within the last minute
        self._slots = None  # asyncio.Semaphore(slots), made on the server's loop
        self.first_request_time = None  # time.time() when the first chat request arrived
        self.connections = 0  # TCP connections accepted
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list = []  # parsed JSON request bodies, in arrival order
        self.headers: list = []  # their headers (lower-case names)
        self._ids = itertools.count(1)


# --------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------


def _response(
    status: int,
    body: bytes,
    *,
    keep_alive: bool,
    content_type: str = "application/json",
    extra_headers: Iterable[tuple] = (),
) -> bytes:
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: keep-alive" if keep_alive else "Connection: close",
    ]
    head.extend(f"{k}: {v}" for k, v in extra_headers)
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


async def _read_body(reader: asyncio.StreamReader, headers: dict) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                # Trailers (usually none) end with an empty line.
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)  # CRLF after each chunk
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


async def _handle_connection(state: _State, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    state.connections += 1
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = (lines[0].split(" ", 2) + ["", ""])[:3]
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    key, value = line.split(":", 1)
                    headers[key.strip().lower()] = value.strip()
            body = await _read_body(reader, headers)
            connection = headers.get("connection", "").lower()
            keep_alive = (
                state.keep_alive and connection != "close" and (version != "HTTP/1.0" or connection == "keep-alive")
            )
            path = target.split("?", 1)[0].rstrip("/")

            if method == "POST" and path in _CHAT_PATHS:
                if await _chat_completion(state, body, headers, reader, writer, keep_alive):
                    return  # the fault cut the connection
            elif method == "POST" and path == "/v1/messages":
                writer.write(_anthropic_message(state, body, keep_alive))
            elif method == "GET" and path == "/stats":
                stats = {
                    "requests": state.requests,
                    "connections": state.connections,
                    "in_flight": state.in_flight,
                    "max_in_flight": state.max_in_flight,
                    "cpu_seconds": time.process_time(),
                    "first_request_time": state.first_request_time,
                }
                writer.write(_response(200, json.dumps(stats).encode(), keep_alive=keep_alive))
            elif method == "POST" and path == "/reset":
                state.reset()
                writer.write(_response(200, b"{}", keep_alive=keep_alive))
            elif state.routes is not None and (more := await state.routes(method, path, body, headers, keep_alive)):
                writer.write(more)
            else:
                writer.write(_response(404, _error_body(404, "no such route"), keep_alive=keep_alive))
            await writer.drain()
            if not keep_alive:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def _error_body(status: int, message: str) -> bytes:
    return json.dumps(
        {
            "error": {
                "message": message,
                "type": _ERROR_TYPES.get(status, "server_error"),
                "code": status,
            }
        }
    ).encode()


# --------------------------------------------------------------------------
# Chat completions
# --------------------------------------------------------------------------


class _NoLimit:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


_NO_LIMIT = _NoLimit()


def _fault_for(state: _State, n: int):
    """The fault request number n gets, or None: the script first, then the dice."""
    if n < len(state.failures):
        failure = state.failures[n]
        return None if failure in (None, 200) else failure
    if state.fault_rate and state.random.random() < state.fault_rate:
        return state.random.choice(state.fault_kinds)
    return None


def _html(status: int) -> bytes:
    reason = f"{status} {_REASONS.get(status, 'Error')}"
    return (
        f'<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">\n<html><head>\n<title>{reason}</title>\n'
        f"</head><body>\n<h1>{reason}</h1>\n<p>The proxy server could not handle the request.</p>\n"
        "<hr><address>Apache/2.4.41 Server at 127.0.0.1</address>\n</body></html>\n"
    ).encode()


def _completion_body(text, finish: str = "stop", **usage: int) -> dict:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": finish}
        ],
        "usage": usage or {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _inject(state: _State, fault, headers: dict, keep_alive: bool) -> tuple[bytes, bool]:
    """A fault instead of a completion: the bytes to send, and whether the connection is cut after them."""

    def answer(status: int, body: bytes, content_type: str = "application/json", extra=()) -> tuple[bytes, bool]:
        return _response(status, body, keep_alive=keep_alive, content_type=content_type, extra_headers=extra), False

    if isinstance(fault, int) or (isinstance(fault, str) and fault.isdigit()):
        status = int(fault)
        extra = []
        if state.retry_after is not None and status in (429, 503, 529):
            extra.append(_retry_after(state.retry_after))
        message = f"scripted failure {status}"
        if status == 401:  # as some servers do: echo the key, which the client must never print
            message = f"Incorrect API key provided: {headers.get('authorization', '').removeprefix('Bearer ')}"
        return answer(status, _error_body(status, message), extra=extra)
    elif fault == "429-retry-after":
        wait = state.retry_after if state.retry_after is not None else 1
        return answer(429, _error_body(429, "Rate limit reached, please retry later"), extra=[_retry_after(wait)])
    elif fault == "missing-credentials":
        return answer(500, _error_body(500, MISSING_CREDENTIALS))
    elif fault in ("html-502", "html-404"):
        status = int(fault[-3:])
        return answer(status, _html(status), content_type="text/html")
    elif fault == "malformed":
        return answer(200, b'{"id": "chatcmpl-fake", "choices": [{"message": ')
    elif fault == "list-body":
        return answer(200, b"[]")
    elif fault == "empty-choices":
        return answer(200, json.dumps({**_completion_body("x"), "choices": []}).encode())
    elif fault == "no-choices":
        body = _completion_body("x")
        del body["choices"]
        return answer(200, json.dumps(body).encode())
    elif fault == "null-content":
        return answer(200, json.dumps(_completion_body(None)).encode())
    elif fault == "reset":  # promise a body, send half of it, drop the connection
        body = json.dumps(_completion_body("this reply never arrives whole")).encode()
        return _response(200, body, keep_alive=True)[: -len(body) // 2], True
    raise ValueError(f"unknown fault {fault!r}")


def _cached_prefix(state: _State, messages: list) -> int:
    """Prompt tokens a provider's cache would serve, as OpenAI's does: the longest prefix of the prompt (its
    messages' words in order), at least ``cache_min`` long (1,024) and a multiple of ``cache_step`` (128), that an
    earlier request began with. Every such prefix of this prompt is remembered for later ones."""
    words = [w for m in messages for w in _message_text(m).split()]
    cached = 0
    for end in range(max(state.cache_min, state.cache_step), len(words) + 1, state.cache_step):
        key = hash(tuple(words[:end]))
        if key in state.prefixes:
            cached = end
        state.prefixes.add(key)
    return cached


def _spend_tokens(state: _State, request: dict, keep_alive: bool) -> bytes | None:
    """Count a request's prompt tokens against ``tpm`` (a fixed window of ``tpm_window`` seconds from its first
    request, as OpenAI's limits reset whole); the 429 when they do not fit, else None."""
    tokens = sum(_count_tokens(_message_text(m)) for m in request.get("messages") or [])
    now = time.monotonic()
    if state.tpm_start is None or now >= state.tpm_start + state.tpm_window:
        state.tpm_start, state.tpm_used = now, 0
    if state.tpm_used + tokens <= state.tpm:
        state.tpm_used += tokens
        return None
    state.rate_limited += 1
    return _response(
        429,
        _error_body(429, f"rate limit: {state.tpm} tokens per {state.tpm_window:g} s"),
        keep_alive=keep_alive,
        extra_headers=[_retry_after(round(state.tpm_start + state.tpm_window - now, 3)), *_quota_headers(state)],
    )


def _quota_headers(state: _State) -> list[tuple[str, str]]:
    """OpenAI's rate-limit headers for ``tpm``: the limit, what is left, and when it is whole again."""
    if not state.tpm or state.tpm_start is None:
        return []
    reset = max(0.0, state.tpm_start + state.tpm_window - time.monotonic())
    return [
        ("x-ratelimit-limit-tokens", str(state.tpm)),
        ("x-ratelimit-remaining-tokens", str(max(0, state.tpm - state.tpm_used))),
        ("x-ratelimit-reset-tokens", f"{reset:.3f}s"),
    ]


def _retry_after(value: float | str) -> tuple[str, str]:
    """The header a refusal carries: a number is Retry-After's seconds; text is sent as it is (an HTTP date), and
    text of the form "name: value" names its own header ("retry-after-ms: 1e12")."""
    if not isinstance(value, str):
        return "Retry-After", f"{value:g}"
    name, colon, rest = value.partition(": ")
    return (name, rest) if colon else ("Retry-After", value)


async def _wait(seconds: float, reader: asyncio.StreamReader) -> None:
    """Sleep as if generating, but stop when the client hangs up, as vLLM aborts a
    request whose client left: ``in_flight`` then counts only requests someone awaits."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        if reader.at_eof():
            raise ConnectionResetError("the client closed the connection")
        await asyncio.sleep(min(left, 0.05))


async def _chat_completion(
    state: _State,
    body: bytes,
    headers: dict,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    keep_alive: bool,
) -> bool:
    """Answer one request; True when the connection was cut. The request is counted out of ``in_flight``
    before its answer is written, so a client (on another thread) that has the answer sees it done."""
    n = state.requests
    state.requests += 1
    if state.first_request_time is None:
        state.first_request_time = time.time()
    state.in_flight += 1
    if state.in_flight > state.max_in_flight:
        state.max_in_flight = state.in_flight
    try:
        answer, cut = await _answer(state, n, body, headers, reader, keep_alive)
    finally:
        state.in_flight -= 1
    writer.write(answer)
    if cut:
        writer.transport.abort()
    return cut


def _anthropic_message(state: _State, body: bytes, keep_alive: bool) -> bytes:
    """Anthropic's Messages API, as far as a test of what it is sent needs: the body recorded, the last user
    text echoed, a word a token."""
    request = json.loads(body) if body else {}
    if state.record:
        state.bodies.append(request)
    last = request["messages"][-1]["content"]
    text = last if isinstance(last, str) else " ".join(part.get("text", "") for part in last)
    reply = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "claude"),
        "content": [{"type": "text", "text": f"echo: {text}"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": len(text.split()), "output_tokens": len(text.split()) + 1},
    }
    return _response(200, json.dumps(reply).encode(), keep_alive=keep_alive)


async def _answer(
    state: _State, n: int, body: bytes, headers: dict, reader: asyncio.StreamReader, keep_alive: bool
) -> tuple[bytes, bool]:
    """Request number n's answer (after its delay): the bytes to send, and whether the connection is cut after them."""
    try:
        request = json.loads(body) if body else {}
    except ValueError:
        request = None
    if not isinstance(request, dict):
        return _response(400, _error_body(400, "body is not JSON"), keep_alive=keep_alive), False
    if state.record:
        state.bodies.append(request)
        state.headers.append(headers)

    failure = _fault_for(state, n)
    if failure is not None:
        state.faults += 1
        state.fault_counts[failure] = state.fault_counts.get(failure, 0) + 1
        state.fault_times.append(time.monotonic())
    if state.limit and state.in_flight > state.limit:
        state.rate_limited += 1
        wait = 0 if state.retry_after is None else state.retry_after
        if state.refusal_delay:
            state.in_flight -= 1  # a refused request holds no place while its answer travels
            try:
                await asyncio.sleep(state.refusal_delay)
            finally:
                state.in_flight += 1  # counted out by the caller
        return _response(
            429,
            _error_body(429, f"rate limit: {state.limit} requests in flight"),
            keep_alive=keep_alive,
            extra_headers=[_retry_after(wait)],
        ), False
    if state.rpm:
        now = time.monotonic()
        state.admitted = [t for t in state.admitted if t > now - 60]
        if len(state.admitted) >= state.rpm:
            state.rate_limited += 1
            return _response(
                429,
                _error_body(429, f"rate limit: {state.rpm} requests per minute"),
                keep_alive=keep_alive,
                extra_headers=[("Retry-After", "1")],
            ), False
        state.admitted.append(now)
    if state.tpm:
        refused = _spend_tokens(state, request, keep_alive)
        if refused is not None:
            return refused, False
    if state.slots and state._slots is None:
        state._slots = asyncio.Semaphore(state.slots)
    async with state._slots or _NO_LIMIT:
        if state.hang or failure == HANG:
            await _wait(state.hang_seconds, reader)
        elif state.delay > 0:
            await _wait(state.delay, reader)

    if failure not in (None, HANG):
        return _inject(state, failure, headers, keep_alive)

    messages = request.get("messages") or []
    reply = state.reply
    message: dict = {}  # a reply function may answer a whole message: {"content": None, "tool_calls": [...]}
    if reply is None:
        text = default_reply(messages)
    elif callable(reply):
        answered = reply(messages, request) if getattr(reply, "reads_request", False) else reply(messages)
        message = answered if isinstance(answered, dict) else {}
        text = str(message.get("content") or "") if message else str(answered)
    else:
        text = str(reply)
    prompt_tokens = sum(_count_tokens(_message_text(m)) for m in messages)
    finish = "stop"
    limit = request.get("max_tokens")
    if isinstance(limit, int) and _count_tokens(text) > limit:  # as a real server: cut off at max_tokens
        text, finish = "".join(re.findall(r"\s*\S+", text)[:limit]), "length"
    completion_tokens = _count_tokens(text)
    model = request.get("model", "fake")
    completion_id = f"chatcmpl-fake-{next(state._ids)}"
    created = int(time.time())
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": _cached_prefix(state, messages)},
    }
    if request.get("stream"):
        payload = _sse_body(completion_id, created, model, text, usage)
        return _response(200, payload, keep_alive=keep_alive, content_type="text/event-stream"), False
    payload = json.dumps(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, **message},
                    "logprobs": None,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else finish,
                }
            ],
            "usage": usage,
        }
    ).encode()
    return _response(200, payload, keep_alive=keep_alive, extra_headers=_quota_headers(state)), False


def _sse_body(completion_id: str, created: int, model: str, text: str, usage: dict) -> bytes:
    """Whole streamed answer as one SSE body (role, content, stop, usage)."""

    def chunk(delta: dict, finish: str | None, **extra: Any) -> str:
        data = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(data)}\n\n"

    events = [chunk({"role": "assistant", "content": ""}, None)]
    words = text.split(" ")
    events += [chunk({"content": w if i == 0 else " " + w}, None) for i, w in enumerate(words)]
    events.append(chunk({}, "stop", usage=usage))
    events.append("data: [DONE]\n\n")
    return "".join(events).encode()


# --------------------------------------------------------------------------
# In-process server (tests)
# --------------------------------------------------------------------------


class FakeServer:
    """Fake OpenAI-compatible server running in a background thread.

    Args:
        delay: seconds every request waits before answering (asyncio.sleep).
        reply: ``None`` (echo the last message), a fixed string, or a callable
            ``(messages) -> str`` called in the server thread (or ``-> dict``: the whole assistant message,
            such as ``{"content": None, "tool_calls": [...]}``); one with ``reads_request = True`` is called
            ``(messages, request)``, to answer by the request's ``tools`` or ``response_format``.
        failures: HTTP status codes answered to the first ``len(failures)``
            requests, in order (e.g. ``[429, 500, 503]`` then success).  An
            entry of ``200``/``None`` means "answer normally", ``HANG`` means
            "hang that request".
        hang: if true, every request hangs (sleeps ``hang_seconds``).
        hang_seconds: how long a hanging request sleeps (longer than any
            client timeout); hanging requests are cancelled on ``stop()``.
        retry_after: if set, 429/503/529 failures carry ``Retry-After``
            (and ``429-retry-after`` faults carry it instead of 1 s): seconds,
            or text sent as it is (an HTTP date), or "name: value" for
            another header ("retry-after-ms: 1e12").
        fault_rate: probability that a request after the script gets a
            fault, drawn from ``fault_kinds`` (statuses or ``FAULTS``).
        seed: seed of those draws (``reset()`` re-seeds).
        slots: requests served at once (0: no limit); the rest queue.
        rpm: requests admitted in any 60 s (0: no limit); the rest get 429
            (counted in ``rate_limited``).
        limit: requests in flight at most (0: no limit); one past it gets 429
            at once, with ``Retry-After`` (0 unless ``retry_after``).
        keep_alive: if false, every answer says ``Connection: close`` and the
            server ends the connection (a client keeps no idle connections).
        host, port: bind address; port 0 picks a free port.

    Attributes (read from any thread): ``url`` ("http://127.0.0.1:PORT/v1"),
    ``base_url`` (without ``/v1``), ``requests``, ``connections``,
    ``in_flight``, ``max_in_flight``, ``bodies`` (parsed JSON of every chat
    request), ``headers`` (theirs), ``faults``, ``fault_counts``,
    ``fault_times``.
    """

    def __init__(
        self,
        delay: float = 0.0,
        reply: Reply = None,
        failures: Sequence = (),
        hang: bool = False,
        hang_seconds: float = 3600.0,
        retry_after: float | str | None = None,
        fault_rate: float = 0.0,
        fault_kinds: Sequence = TRANSIENT_FAULTS,
        seed: int = 0,
        slots: int = 0,
        rpm: int = 0,
        limit: int = 0,
        keep_alive: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._state = _State(
            delay,
            reply,
            failures,
            hang,
            hang_seconds,
            retry_after,
            fault_rate=fault_rate,
            fault_kinds=fault_kinds,
            seed=seed,
            slots=slots,
            rpm=rpm,
            limit=limit,
            keep_alive=keep_alive,
        )
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    # Counters / configuration -------------------------------------------
    @property
    def requests(self) -> int:
        return self._state.requests

    @property
    def in_flight(self) -> int:
        return self._state.in_flight

    @property
    def connections(self) -> int:
        return self._state.connections

    @property
    def max_in_flight(self) -> int:
        return self._state.max_in_flight

    @property
    def bodies(self) -> list:
        return self._state.bodies

    @property
    def headers(self) -> list:
        return self._state.headers

    @property
    def rate_limited(self) -> int:
        return self._state.rate_limited

    @property
    def faults(self) -> int:
        return self._state.faults

    @property
    def fault_counts(self) -> dict:
        return dict(self._state.fault_counts)

    @property
    def fault_times(self) -> list:
        return list(self._state.fault_times)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1"

    def reset(self, failures: Sequence | None = None) -> None:
        """Zero counters; optionally install a new failure script."""
        if failures is not None:
            self._state.failures = list(failures)
        self._state.reset()

    def configure(self, **options: Any) -> None:
        """Change ``delay``, ``reply``, ``failures``, ``hang``,
        ``hang_seconds``, ``retry_after``, ``limit``, ``refusal_delay`` (seconds a 429 past ``limit``
        takes), ``tpm`` and ``tpm_window`` (prompt tokens admitted per window of that many seconds, told in
        OpenAI's ``x-ratelimit-*-tokens`` headers on every answer; past it, 429), ``cache_min`` and
        ``cache_step`` (the repeated prompt prefixes reported as ``cached_tokens``: at least that many words,
        in steps of that many; OpenAI's 1,024 and 128) or ``keep_alive`` while running."""
        for key, value in options.items():
            if key not in (
                "delay",
                "reply",
                "failures",
                "hang",
                "hang_seconds",
                "retry_after",
                "fault_rate",
                "fault_kinds",
                "limit",
                "tpm",
                "tpm_window",
                "cache_min",
                "cache_step",
                "refusal_delay",
                "keep_alive",
            ):
                raise TypeError(f"unknown option {key!r}")
            setattr(self._state, key, list(value) if key in ("failures", "fault_kinds") else value)

    # Lifecycle -----------------------------------------------------------
    def start(self) -> FakeServer:
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._thread = threading.Thread(target=self._run, name="FakeServer", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start within 10 s")
        if self._error is not None:
            raise RuntimeError("fake server failed to start") from self._error
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await _start_server(self._state, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await _shutdown(server)


async def _start_server(state: _State, host: str, port: int):
    async def handler(reader, writer):
        try:
            await _handle_connection(state, reader, writer)
        except asyncio.CancelledError:
            # Shutdown.  Swallowed: on 3.11 a cancelled connection task makes
            # asyncio's start_server callback log a spurious traceback.
            writer.close()

    return await asyncio.start_server(handler, host, port, backlog=4096, reuse_address=True)


async def _shutdown(server) -> None:
    server.close()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# --------------------------------------------------------------------------
# Subprocess server (benchmarks)
# --------------------------------------------------------------------------


def spawn(
    delay: float = 0.2,
    *,
    reply: str | None = None,
    failures: Sequence = (),
    host: str = "127.0.0.1",
    timeout: float = 20.0,
    slots: int = 0,
    rpm: int = 0,
):
    """Start the server in a separate Python process.

    Returns ``(url, stop)``: ``url`` is "http://HOST:PORT/v1" and ``stop()``
    terminates the process.  Blocks until the server is accepting
    connections (it prints its URL only after binding).
    """
    cmd = [sys.executable, os.path.abspath(__file__), "--delay", str(delay), "--host", host, "--port", "0"]
    if reply is not None:
        cmd += ["--reply", reply]
    if failures:
        cmd += ["--failures", ",".join(str(f) for f in failures)]
    if slots:
        cmd += ["--slots", str(slots)]
    if rpm:
        cmd += ["--rpm", str(rpm)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    with selectors.DefaultSelector() as waiting:  # not select(): a long test process may hold fds past 1024
        waiting.register(proc.stdout, selectors.EVENT_READ)
        ready = waiting.select(timeout)
    line = proc.stdout.readline().strip() if ready else ""
    if not line.startswith("http"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"fake server did not start (got {line!r})")

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()

    return line, stop


def refused_url() -> str:
    """An OpenAI-style base URL on a loopback port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _parse_failures(text: str) -> list:
    return [int(item) if item.strip().isdigit() else item.strip() for item in text.split(",") if item.strip()]


async def _main(args: argparse.Namespace) -> None:
    state = _State(
        args.delay,
        args.reply,
        _parse_failures(args.failures),
        args.hang,
        args.hang_seconds,
        args.retry_after,
        record=False,
        fault_rate=args.fault_rate,
        fault_kinds=_parse_failures(args.fault_kinds) or TRANSIENT_FAULTS,
        seed=args.seed,
        slots=args.slots,
        rpm=args.rpm,
    )
    server = await _start_server(state, args.host, args.port)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"http://{host}:{port}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await _shutdown(server)


def main(argv: list | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.2, help="seconds each request waits (default 0.2)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = pick a free port (default)")
    parser.add_argument("--reply", default=None, help="fixed reply text (default: echo last message)")
    parser.add_argument(
        "--failures",
        default="",
        help="comma-separated statuses or faults for the first requests, e.g. 429,500,hang,reset",
    )
    parser.add_argument("--hang", action="store_true", help="every request hangs")
    parser.add_argument("--hang-seconds", type=float, default=3600.0)
    parser.add_argument("--retry-after", type=float, default=None)
    parser.add_argument(
        "--fault-rate", type=float, default=0.0, help="probability of a fault per request after the scripted ones"
    )
    parser.add_argument(
        "--fault-kinds",
        default="",
        help=f"comma-separated faults to draw from (default: the transient ones: {','.join(TRANSIENT_FAULTS)})",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots", type=int, default=0, help="requests served at once; the rest queue (0: any)")
    parser.add_argument("--rpm", type=int, default=0, help="requests admitted per minute; the rest get 429")
    args = parser.parse_args(argv)
    try:
        import uvloop  # optional; only if already installed

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
