"""A pipeline as a small HTTP JSON service, for teams that call it from something other than Python.

    POST /        {"ticket": "The app crashes on login"}   -> {"output": ..., "error": null, "usage": {...}}
    POST /?trace=1                                          -> the same, plus every node's prompt and reply
    GET  /health                                            -> {"status": "ok", "pipeline": ..., "inputs": [...]}

Bad input is the client's to fix: 400 with the reason (413 past the size limit). A model
call that failed is the upstream's fault: 502 with its cause. Nothing here answers 500
for something a client sent. Calls in flight are bounded by the pipeline's concurrency;
further requests wait their turn.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from aiohttp import web

from .api import BudgetExceeded, CallFailed, LLMError, Pipeline

MAX_BODY = 1 << 20  # 1 MiB of inputs is far past any prompt a model takes


def app(pipeline: Pipeline) -> web.Application:
    """The aiohttp application serving `pipeline`."""
    application = web.Application(client_max_size=MAX_BODY)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "pipeline": pipeline.graph.pipeline.name, "file": pipeline.path,
                                  "inputs": list(pipeline.inputs), "output": pipeline.graph.output})

    async def predict(request: web.Request) -> web.Response:
        try:
            inputs = json.loads(await request.text())
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"the body is not JSON: {exc}")
        except RecursionError:
            return _error(400, "the body nests too deeply to be inputs")
        if not isinstance(inputs, dict):
            return _error(400, f"the body must be a JSON object of inputs ({', '.join(pipeline.inputs)}), "
                               f"not {type(inputs).__name__}")
        try:
            prediction = await pipeline.acall(**inputs)
        except ValueError as exc:  # unknown or missing inputs
            return _error(400, str(exc))
        except (CallFailed, LLMError) as exc:
            return _error(502, f"the model call failed: {exc}")
        except BudgetExceeded as exc:
            return _error(503, str(exc))
        body = {"output": prediction.output, "error": prediction.error, "usage": asdict(prediction.usage)}
        if request.query.get("trace", "").lower() in ("1", "true", "yes"):
            body["trace"] = prediction.trace.to_json()
        return web.json_response(body, dumps=lambda value: json.dumps(value, ensure_ascii=False))

    async def close(application: web.Application) -> None:
        await pipeline.aclose()

    application.router.add_get("/health", health)
    application.router.add_post("/", predict)
    application.on_cleanup.append(close)
    return application


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def serve(pipeline: Pipeline, host: str, port: int, announce) -> None:
    """Serve until interrupted; `announce(url)` is told where, once the socket is bound (port 0 picks a free one)."""
    import asyncio

    async def main() -> None:
        runner = web.AppRunner(app(pipeline), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        host_bound, port_bound = runner.addresses[0][:2]  # the real port when 0 was asked
        announce(f"http://{host_bound}:{port_bound}")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
