"""A pipeline as a small HTTP JSON service, for teams that call it from something other than Python.

    POST /        {"ticket": "The app crashes on login"}   -> {"output": ..., "error": null, "usage": {...}}
    POST /?trace=1                                          -> the same, plus every node's prompt and reply
                                                               (only when the operator allowed it: --allow-trace)
    GET  /health                                            -> {"status": "ok", "pipeline": ..., "inputs": [...]}

/health says the process is up and what it serves; it calls no model (a probe every few
seconds would cost money), so a model server that is down shows as 502s on POST, not here.
Bad input is the client's to fix: 400 with the reason (413 past the size limit, 408 for a
body that trickles in). A model call that failed is the upstream's fault: 502 with its cause.
Hostile clients are bounded: headers must arrive within HEADER_TIMEOUT, and at MAX_CONNECTIONS open
connections a new one takes the place of the oldest that is in no request (half-sent, or idle between
requests), as a server under a slow-headers flood must; only when every connection is in a request is it
answered 503 with Retry-After (never reset) and closed within BUSY_LINGER. So half-sent requests can neither
lock others out nor use up the file descriptors. Refusals, places taken, and accept() finding no free
descriptor are logged once a burst.
Every request is logged on stderr, one line each (address, request line, status, size, seconds).
Bytes that are not HTTP get aiohttp's plain-text 400 (there is no request to answer in JSON) and a
log line with the parser's reason.
Nothing here answers 500 for something a client sent; every error is a JSON {"error": ...}.
Calls in flight are bounded by the pipeline's concurrency; further requests wait their turn.
A client that hangs up cancels its request's model calls: nobody pays for an answer nobody reads.
SIGTERM (or Ctrl-C) stops taking requests and lets those in flight finish.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict

from aiohttp import web

from .api import BudgetExceeded, CallFailed, LLMError, Pipeline, Prediction
from .errors import SbpcError
from .language.diagnostics import json_text
from .language.nodes.outputs import output_kind
from .runtime.inputs import InputError

MAX_BODY = 1 << 20  # 1 MiB of inputs is far past any prompt a model takes
BODY_TIMEOUT = 30.0  # seconds to send a body: a client trickling bytes does not hold a connection forever
GRACE = 30.0  # seconds requests in flight get to finish once the server is told to stop
HEADER_TIMEOUT = 10.0  # seconds a connection may sit without a whole request line and headers (or idle)
MAX_CONNECTIONS = 256  # open connections at most: well below the process's file descriptors (1,024 here)
RETRY_AFTER = 1  # seconds a client past MAX_CONNECTIONS is told to wait: half-open ones go by HEADER_TIMEOUT
BUSY_LINGER = 1.0  # seconds a connection past the cap stays open for its client to read the 503, at most
IN_REQUEST = web.AppKey("in_request", set)  # the transports of connections whose request is being handled
BURST_QUIET = 1.0  # seconds without a refusal that end a burst of them: one log line as it starts, one as it ends
ACCESS_FORMAT = '%a "%r" %s %b %Tfs'


def app(pipeline: Pipeline, allow_trace: bool = False, mcp_host: str | None = None) -> web.Application:
    """The aiohttp application serving `pipeline` (`mcp_host`: the address it listens on, when it also answers
    MCP clients at MCP_PATH)."""
    usage = f"POST / takes a JSON object of inputs ({', '.join(pipeline.inputs)}); GET /health says what is served"

    @web.middleware
    async def json_errors(request: web.Request, handler) -> web.StreamResponse:
        """aiohttp's own refusals (404, 405, 413) as JSON, saying what the service takes."""
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            reason = f"{exc.reason}: {usage}" if exc.status in (404, 405) else exc.text or exc.reason
            return web.json_response(
                {"error": reason}, status=exc.status, headers={k: v for k, v in exc.headers.items() if k == "Allow"}
            )

    busy: set[asyncio.BaseTransport] = set()
    application = web.Application(client_max_size=MAX_BODY, middlewares=[_marking(busy), json_errors])
    application[IN_REQUEST] = busy

    async def health(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "pipeline": pipeline.graph.pipeline.name,
                "file": pipeline.path,
                "inputs": list(pipeline.inputs),
                "output": pipeline.graph.output,
                "checks": "the process is up and serving; no model is called",
            }
        )

    async def predict(request: web.Request) -> web.Response:
        wants_trace = request.query.get("trace", "").lower() in ("1", "true", "yes")
        if wants_trace and not allow_trace:  # every prompt and reply, to anyone who reaches the port: opt-in
            return _error(403, "traces are off on this server: its operator can start it with --allow-trace")
        try:
            body = await asyncio.wait_for(request.read(), BODY_TIMEOUT)
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
            return _error(408, f"the body did not arrive within {BODY_TIMEOUT:g} seconds")
        except ConnectionError:  # the client went away: nobody reads an answer
            return _error(400, "the client closed the connection before its body arrived")
        try:
            inputs = json.loads(body)  # JSON is UTF-8 (or -16/-32, detected), whatever charset a header claims
        except ValueError as exc:
            return _error(400, f"the body is not JSON: {exc}")
        except RecursionError:
            return _error(400, "the body nests too deeply to be inputs")
        if not isinstance(inputs, dict):
            return _error(
                400,
                f"the body must be a JSON object of inputs ({', '.join(pipeline.inputs)}), not {type(inputs).__name__}",
            )
        try:
            prediction = await predict_for_client(pipeline, inputs)
        except InputError as exc:  # unknown, missing or unsendable inputs; another ValueError is no client's doing
            return _error(400, str(exc))
        except (CallFailed, LLMError) as exc:
            return _error(502, f"the model call failed: {getattr(exc, 'cli', exc)}")  # the hint names sbpc's flags
        except BudgetExceeded as exc:
            return _error(503, exc.cli)
        reply = {"output": prediction.output, "error": prediction.error, "usage": asdict(prediction.usage)}
        if wants_trace:
            reply["trace"] = prediction.trace.to_json()
        return web.json_response(reply, dumps=json_text)  # replies are strangers' text: nothing to steer a terminal

    async def close(application: web.Application) -> None:
        await pipeline.aclose()

    application.router.add_get("/health", health)
    application.router.add_post("/", predict)
    if mcp_host is not None:
        mount_mcp(application, pipeline, mcp_host)
    application.on_cleanup.append(close)
    return application


async def predict_for_client(pipeline: Pipeline, inputs: dict) -> Prediction:
    """`pipeline.acall(**inputs)`, its model calls cancelled when this request is (its client left);
    a call it shares with other requests goes on for them (llm.py)."""
    work = asyncio.ensure_future(pipeline.acall(**inputs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:  # this request's client left (or the server stopped waiting for it)
        work.cancel()
        await asyncio.wait([work])  # its calls are stopped before the handler is done
        raise


def _marking(busy: set[asyncio.BaseTransport]):
    """A middleware that keeps in `busy` the connections whose request is being handled: `_CappedSite` never
    gives their places to new ones."""

    @web.middleware
    async def in_request(request: web.Request, handler) -> web.StreamResponse:
        transport = request.transport
        if transport is None:  # the client is already gone
            return await handler(request)
        busy.add(transport)
        try:
            return await handler(request)
        finally:
            busy.discard(transport)

    return in_request


class ServeError(SbpcError):
    """The service could not start: the address is taken, unknown, or not this machine's."""


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


class _CappedSite(web.TCPSite):
    """aiohttp's TCPSite, holding `most` connections open at most: a new one past them takes the place of the
    oldest in no request (a slow-headers flood holds hundreds of half-sent ones, and refusing newcomers let it
    keep ordinary clients out), else gets `_Busy`, not a request handler: a flood of half-open clients cannot use
    up the file descriptors (which stops accept() for everyone), and a client past the cap learns when to come
    back instead of being reset."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, most: int):
        super().__init__(runner, host, port)
        self.most, self.busy = most, runner.app[IN_REQUEST]
        self.opening = 0  # handlers made whose connection is not yet among the server's (registered a turn later)
        self.refused = _Burst("refused a connection past the limit")
        self.replaced = _Burst("closed a connection in no request to make room")

    def _make_room(self, server: web.Server) -> bool:
        """Whether a place is free, or was freed by closing the oldest connection in no request."""
        open_ = [handler for handler in server.connections if handler.transport is not None]  # closed: None
        if len(open_) + self.opening < self.most:
            return True
        oldest = next((handler for handler in open_ if handler.transport not in self.busy), None)  # in order opened
        if oldest is None:
            return False
        oldest.force_close()
        self.replaced.happened(f"{MAX_CONNECTIONS} connections open, the limit: closing the oldest in no request")
        return True

    def _opened(self) -> None:
        self.opening -= 1

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner, which stops it
        server = self._runner.server
        assert server is not None  # set by the runner's setup()
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.BaseProtocol:
            # connections accepted together (a loop that was busy finds them all at once) get their protocols
            # before the first is registered: counting only the registered ones would let them all past the cap
            if not self._make_room(server):
                return _Busy(self.refused)
            self.opening += 1
            loop.call_soon(self._opened)  # runs just before the transport's own connection_made registers it
            return server()

        self._server = await loop.create_server(
            protocol, self._host, self._port, backlog=self._backlog, reuse_address=self._reuse_address
        )


class _Busy(asyncio.Protocol):
    """A connection past the cap: answered 503 with Retry-After at once, closed once the client has read it.
    What the client sends is read and dropped: closing with it unread would reset the connection, and a
    reset can destroy the answer before the client reads it."""

    def __init__(self, refused: _Burst):
        self.refused = refused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a TCP connection
        body = json.dumps({"error": f"the server is at its limit of {MAX_CONNECTIONS} connections: try again"})
        transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: %d\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (RETRY_AFTER, len(body), body.encode())
        )
        transport.write_eof()  # the client reads the answer, then the end, and closes its side
        # one that never closes, at once: past the cap, each held its descriptor for the header timeout, and a
        # flood of them used up the process's (accept() failing for everyone: "Too many open files")
        asyncio.get_running_loop().call_later(BUSY_LINGER, transport.close)
        self.refused.happened(f"refusing connections: {MAX_CONNECTIONS} open, the limit (503 with Retry-After)")

    def data_received(self, data: bytes) -> None:
        """The request of a connection past the cap: dropped, its answer is already sent."""

    def eof_received(self) -> None:
        """The client is done: the transport closes (returning None says so)."""


class _Burst:
    """Something that happens many times a second under a flood (a refusal, accept() out of descriptors), logged
    as one line when it starts and one with its count when it stops: a line each was thousands a minute."""

    def __init__(self, what: str, quiet: float = BURST_QUIET):
        self.what, self.count, self.seconds = what, 0, quiet  # `quiet`: seconds without one that end a burst
        self.quiet: asyncio.TimerHandle | None = None

    def happened(self, first_line: str) -> None:
        if self.count == 0:
            _log("sbpc.serve").info("%s", first_line)
        self.count += 1
        if self.quiet is not None:
            self.quiet.cancel()
        self.quiet = asyncio.get_running_loop().call_later(self.seconds, self.ended)

    def ended(self) -> None:
        if self.count > 1:
            _log("sbpc.serve").info("%s %d times in this burst", self.what, self.count)
        self.count, self.quiet = 0, None


def _quiet_accept_failures() -> Callable[[asyncio.AbstractEventLoop, dict], None]:
    """A loop's exception handler: accept() out of file descriptors (asyncio then pauses accepting for a second,
    and tries up to 128 times at once) is one line a burst, not a traceback a try; anything else as asyncio says
    it."""
    out = _Burst("accept() found no free file descriptor", quiet=10.0)  # a burst outlasts asyncio's retries

    def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if context.get("message") == "socket.accept() out of system resource":
            reason = getattr(context.get("exception"), "strerror", None) or "out of system resource"
            out.happened(f"not accepting connections for a second: {reason}")
        elif isinstance(context.get("exception"), ValueError) and "_start_serving" in repr(context.get("handle")):
            pass  # that retry, due after the server stopped and closed its socket: nothing is lost
        else:
            loop.default_exception_handler(context)

    return handle


class _Stderr(logging.StreamHandler):
    """A line on whatever sys.stderr is when it is logged (an embedding program may replace it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class _OneLine(logging.Filter):
    """A client's malformed HTTP is its own business: one line with the parser's reason, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            reason = " ".join(str(record.exc_info[1]).split())
            record.msg, record.args, record.exc_info, record.exc_text = (
                f"{record.getMessage()}: {reason}",
                (),
                None,
                None,
            )
        return True


def _log(name: str) -> logging.Logger:
    """A logger writing one line a record on stderr, for the access log and aiohttp's own complaints."""
    log = logging.getLogger(name)
    if not log.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        handler.addFilter(_OneLine())
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


async def start(
    pipeline: Pipeline, host: str, port: int, allow_trace: bool = False, mcp: bool = False
) -> web.AppRunner:
    """The service, listening: its runner (`runner.addresses` says where; `runner.cleanup()` stops it). `mcp`:
    it also answers MCP clients at MCP_PATH."""
    # handler_cancellation: a client's disconnect cancels its handler, and so its model calls;
    # keepalive_timeout: aiohttp closes a connection idle that long, one whose headers never end included
    runner = web.AppRunner(
        app(pipeline, allow_trace, host if mcp else None),
        access_log=_log("sbpc.serve.access"),
        logger=_log("sbpc.serve"),
        access_log_format=ACCESS_FORMAT,
        shutdown_timeout=GRACE,
        handler_cancellation=True,
        keepalive_timeout=HEADER_TIMEOUT,
    )
    await runner.setup()
    try:
        await _CappedSite(runner, host, port, MAX_CONNECTIONS).start()
    except OSError as exc:  # in use, not this machine's address, a name that does not resolve
        await runner.cleanup()
        reason = exc.strerror or str(exc)
        raise ServeError(f"cannot listen on {host}:{port}: {reason.split(': ')[-1]}") from None
    return runner


def serve(pipeline: Pipeline, host: str, port: int, announce, allow_trace: bool = False, mcp: bool = False) -> None:
    """Serve until SIGTERM or Ctrl-C; `announce(url)` is told where, once the socket is bound (port 0 picks a free one)."""

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(_quiet_accept_failures())
        runner = await start(pipeline, host, port, allow_trace, mcp)
        host_bound, port_bound = runner.addresses[0][:2]  # the real port when 0 was asked
        announce(f"http://{host_bound}:{port_bound}")
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())


# --- the pipeline as an MCP tool (`sbpc serve FILE --mcp`) -------------------------------------------------------

MCP_PATH = "/mcp"  # where the HTTP service answers MCP clients, beside POST /


def input_schema(pipeline: Pipeline) -> dict:
    """The JSON Schema of the pipeline's inputs, as an MCP client sends them to its one tool."""
    properties = {}
    for item in pipeline.graph.pipeline.inputs:
        schema = output_kind(item.type).input_schema(item.type)
        properties[item.name] = {**schema, "description": f"the input {item.name} ({item.type})"}
    return {"type": "object", "properties": properties, "required": list(properties)}


def mcp_app(pipeline: Pipeline):
    """An MCP server (the `mcp` package's) whose one tool, named after the pipeline, runs it: its description is
    the pipeline's title, its input schema the pipeline's inputs. A failed run is the call's error, in words."""
    try:
        import mcp_types as types  # the mcp package's: ~300 ms to import, only `sbpc serve --mcp` pays it
        from mcp.server.lowlevel import Server
    except ImportError:
        raise ServeError("serving a pipeline as an MCP tool needs the mcp package: pip install 'sbpc[mcp]'") from None
    spec = pipeline.graph.pipeline
    tool = types.Tool(name=spec.name, description=spec.description or spec.name, input_schema=input_schema(pipeline))

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx, params) -> types.CallToolResult:
        def answer(text: str, error: bool = False) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)

        if params.name != spec.name:
            return answer(f"there is no tool '{params.name}'; the tool is {spec.name}", True)
        try:
            prediction = await predict_for_client(pipeline, dict(params.arguments or {}))
        except InputError as exc:
            return answer(str(exc), True)
        except (CallFailed, LLMError) as exc:
            return answer(f"the model call failed: {getattr(exc, 'cli', exc)}", True)
        except BudgetExceeded as exc:
            return answer(exc.cli, True)
        if prediction.error is not None:
            return answer(prediction.error, True)
        output = prediction.output
        return answer(output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))

    return Server(spec.name, on_list_tools=list_tools, on_call_tool=call_tool)


def serve_mcp_stdio(pipeline: Pipeline) -> None:
    """Answer one MCP client on stdin and stdout (what an IDE or a desktop assistant starts) until it leaves."""
    server = mcp_app(pipeline)
    from mcp.server.stdio import stdio_server  # the mcp package, imported by mcp_app above

    async def main() -> None:
        try:
            async with stdio_server() as (reading, writing):
                await server.run(reading, writing, server.create_initialization_options())
        finally:
            await pipeline.aclose()

    asyncio.run(main())


def mount_mcp(application: web.Application, pipeline: Pipeline, host: str) -> None:
    """The pipeline as an MCP tool at MCP_PATH of the HTTP service (streamable HTTP, stateless, JSON answers):
    the `mcp` package's ASGI handler, called from aiohttp."""
    server = mcp_app(pipeline)
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # imported by mcp_app above
    from mcp.server.transport_security import TransportSecuritySettings

    local = host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=local,  # a web page cannot reach a service on this machine by a name it owns
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )
    manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True, security_settings=security)
    stop = asyncio.Event()

    async def running(application: web.Application):
        """The manager's task group lives in a task of its own (it must end in the task that began it)."""
        ready = asyncio.Event()

        async def hold() -> None:
            async with manager.run():
                ready.set()
                await stop.wait()

        task = asyncio.ensure_future(hold())
        await ready.wait()
        yield
        stop.set()
        await task

    async def endpoint(request: web.Request) -> web.StreamResponse:
        return await asgi(manager.handle_request, request)

    application.cleanup_ctx.append(running)
    for method in ("GET", "POST", "DELETE"):
        application.router.add_route(method, MCP_PATH, endpoint)


async def asgi(handler, request: web.Request) -> web.StreamResponse:
    """One aiohttp request through an ASGI handler: its body in one message, the answer streamed back."""
    body = await asyncio.wait_for(request.read(), BODY_TIMEOUT)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.encode(),
        "query_string": request.query_string.encode(),
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()],
        "client": (request.remote or "", 0),
        "server": (request.host, 0),
    }
    sent = False
    response = web.StreamResponse()

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # until the request is done with (its task is cancelled)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            response.set_status(message["status"])
            for key, value in message.get("headers", ()):
                response.headers.add(key.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body":
            await response.write(message.get("body", b""))

    await handler(scope, receive, send)
    return response
