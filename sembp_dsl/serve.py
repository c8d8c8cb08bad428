"""A pipeline as a small HTTP JSON service, for teams that call it from something other than Python.

    POST /        {"ticket": "The app crashes on login"}   -> {"output": ..., "error": null, "usage": {...}}
    POST /?trace=1                                          -> the same, plus every node's prompt and reply
    GET  /health                                            -> {"status": "ok", "pipeline": ..., "inputs": [...]}

Bad input is the client's to fix: 400 with the reason (413 past the size limit, 408 for a
body that trickles in). A model call that failed is the upstream's fault: 502 with its cause.
Nothing here answers 500 for something a client sent; every error is a JSON {"error": ...}.
Calls in flight are bounded by the pipeline's concurrency; further requests wait their turn.
A client that hangs up cancels its request's model calls: nobody pays for an answer nobody reads.
SIGTERM (or Ctrl-C) stops taking requests and lets those in flight finish.
"""

from __future__ import annotations

import asyncio
import json
import signal
from dataclasses import asdict

from aiohttp import web

from .api import BudgetExceeded, CallFailed, InputError, LLMError, Pipeline, Prediction
from .errors import SbpcError
from .language.diagnostics import json_text

MAX_BODY = 1 << 20  # 1 MiB of inputs is far past any prompt a model takes
BODY_TIMEOUT = 30.0  # seconds to send a body: a client trickling bytes does not hold a connection forever
GRACE = 30.0  # seconds requests in flight get to finish once the server is told to stop


def app(pipeline: Pipeline) -> web.Application:
    """The aiohttp application serving `pipeline`."""
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

    application = web.Application(client_max_size=MAX_BODY, middlewares=[json_errors])

    async def health(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "pipeline": pipeline.graph.pipeline.name,
                "file": pipeline.path,
                "inputs": list(pipeline.inputs),
                "output": pipeline.graph.output,
            }
        )

    async def predict(request: web.Request) -> web.Response:
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                body = await request.read()
        except TimeoutError:
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
        if request.query.get("trace", "").lower() in ("1", "true", "yes"):
            reply["trace"] = prediction.trace.to_json()
        return web.json_response(reply, dumps=json_text)  # replies are strangers' text: nothing to steer a terminal

    async def close(application: web.Application) -> None:
        await pipeline.aclose()

    application.router.add_get("/health", health)
    application.router.add_post("/", predict)
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


class ServeError(SbpcError):
    """The service could not start: the address is taken, unknown, or not this machine's."""


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def serve(pipeline: Pipeline, host: str, port: int, announce) -> None:
    """Serve until SIGTERM or Ctrl-C; `announce(url)` is told where, once the socket is bound (port 0 picks a free one)."""

    async def main() -> None:
        # handler_cancellation: a client's disconnect cancels its handler, and so its model calls
        runner = web.AppRunner(app(pipeline), access_log=None, shutdown_timeout=GRACE, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:  # in use, not this machine's address, a name that does not resolve
            await runner.cleanup()
            reason = exc.strerror or str(exc)
            raise ServeError(f"cannot listen on {host}:{port}: {reason.split(': ')[-1]}") from None
        host_bound, port_bound = runner.addresses[0][:2]  # the real port when 0 was asked
        announce(f"http://{host_bound}:{port_bound}")
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
