"""Measure (and cut) litellm's per-call client CPU.

What it measures
----------------
``--calls`` chat completions (default 1200) are issued with at most
``--concurrency`` in flight (default 64) against a loopback OpenAI-compatible
fake server that answers every request after ``--delay`` seconds (default
0.2).  With zero client overhead the run would take

    ideal = calls / concurrency * delay          (3.75 s for the defaults)

so ``wall / ideal`` shows how much the client's own CPU stretches the run,
and ``client CPU / call`` (``time.process_time`` delta over the timed calls,
all threads of the client process) shows where it comes from.  A Python
client saturates one core once ``concurrency / delay * cpu_per_call``
approaches 1 -- at 64 / 0.2 s = 320 calls/s that is ~3 ms per call -- after
which the wall time is simply ``calls * cpu_per_call``.

Why
---
sbpc must (a) add at most 10 % over bare ``litellm.acompletion`` and (b) beat
it.  Bare litellm spends several ms of Python per call (logging objects, an
executor-thread hop, the OpenAI SDK, cost calculation, success logging);
this script measures which litellm settings or call paths reduce that without
giving up what sbpc needs: cost accounting from litellm's price table, our
own retries (litellm's must be off) and provider generality (any litellm
model string).

Method
------
* The fake server (``tests/fake_server.py``) runs in a separate process so
  its CPU is not counted; its own CPU per request and the maximum number of
  requests it saw in flight are read from its ``/stats`` endpoint and shown.
* Every variant runs in a fresh subprocess (``--worker NAME``): litellm's
  settings are module globals, it caches HTTP clients, and ``gc.freeze()`` is
  process-wide, so running variants in one process would leak state between
  them.  Every worker imports litellm (as the product does), warms up with
  two rounds of ``concurrency`` calls (imports, connection pool, caches),
  runs ``gc.collect()`` and then times the calls.
* ``--repeat N`` runs all variants N times, round-robin (so background load
  hits every variant alike), and reports the median run by CPU per call plus
  the best run; on a shared 2-core box single runs vary by +-15 %.

The fast path
-------------
``FastPath`` (sembp_dsl/models/transport.py) is the recipe for the LLM layer: for
``openai/`` models on any OpenAI-compatible server it sends the request body
litellm itself would send (the OpenAI passthrough) over a shared aiohttp
session, without importing litellm, prices it from litellm's packaged price
table (sembp_dsl/models/prices.py), names HTTP errors as ``litellm.exception_type``
does, and returns a ``Reply`` (text, tokens, cost). Everything else (other
providers, streaming, unknown params) falls back to
``litellm.acompletion(..., max_retries=0)``.

Usage::

    .venv/bin/python bench/litellm_overhead.py                 # all variants
    .venv/bin/python bench/litellm_overhead.py --calls 1200 --concurrency 64 \\
        --delay 0.2 --repeat 3 --only acompletion,fast
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # the fake model server is test code

# In litellm's price table; the fake server answers for it via api_base.
MODEL = "openai/gpt-4o-mini"
API_KEY = "sk-fake"


def messages_for(i: int) -> list:
    return [{"role": "user", "content": f"Say hello to request number {i}."}]


# ==========================================================================
# The fast path (recipe for the LLM layer)
# ==========================================================================

from sembp_dsl.language.messages import Message  # noqa: E402
from sembp_dsl.models.transport import FastPath  # noqa: E402  (the product's own call path)

# ==========================================================================
# Variants
# ==========================================================================
# Each variant: (description, async setup(url, concurrency) -> call(i)).

Call = Callable[[int], Awaitable[Any]]

QUIET_FLAGS = {
    "suppress_debug_info": True,
    "turn_off_message_logging": True,
    "disable_streaming_logging": True,
    "disable_token_counter": True,
    "disable_end_user_cost_tracking": True,
    "drop_params": False,
    "modify_params": False,
    "callbacks": [],
    "success_callback": [],
    "failure_callback": [],
    "_async_success_callback": [],
    "_async_failure_callback": [],
}


def _apply_quiet_flags() -> list:
    import litellm

    applied = []
    for name, value in QUIET_FLAGS.items():
        if hasattr(litellm, name):
            setattr(litellm, name, value)
            applied.append(name)
    return applied


def _check_litellm(response: Any) -> float:
    cost = response._hidden_params.get("response_cost")
    assert response.choices[0].message.content, "empty reply"
    return cost


async def v_acompletion(url: str, conc: int, **extra: Any) -> Call:
    import litellm

    async def call(i: int):
        return _check_litellm(
            await litellm.acompletion(model=MODEL, api_base=url, api_key=API_KEY, messages=messages_for(i), **extra)
        )

    return call


async def v_quiet(url: str, conc: int) -> Call:
    _apply_quiet_flags()
    return await v_acompletion(url, conc)


async def v_no_retries(url: str, conc: int) -> Call:
    return await v_acompletion(url, conc, max_retries=0)


async def v_num_retries0(url: str, conc: int) -> Call:
    return await v_acompletion(url, conc, max_retries=0, num_retries=0)


async def v_shared_session(url: str, conc: int) -> Call:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    return await v_acompletion(url, conc, max_retries=0, shared_session=session)


async def v_openai_client(url: str, conc: int) -> Call:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key=API_KEY, max_retries=0)
    return await v_acompletion(url, conc, client=client)


async def v_httpx_transport(url: str, conc: int) -> Call:
    import litellm

    litellm.disable_aiohttp_transport = True
    return await v_acompletion(url, conc, max_retries=0)


async def v_gc_freeze(url: str, conc: int) -> Call:
    gc.freeze()
    return await v_acompletion(url, conc, max_retries=0)


async def v_tuned(url: str, conc: int) -> Call:
    """litellm-only combination: no SDK retries, quiet flags, gc.freeze."""
    _apply_quiet_flags()
    gc.freeze()
    return await v_acompletion(url, conc, max_retries=0)


async def v_router(url: str, conc: int) -> Call:
    import litellm

    router = litellm.Router(
        model_list=[
            {
                "model_name": "fake",
                "litellm_params": {"model": MODEL, "api_base": url, "api_key": API_KEY, "max_retries": 0},
            }
        ],
        num_retries=0,
    )

    async def call(i: int):
        return _check_litellm(await router.acompletion(model="fake", messages=messages_for(i)))

    return call


async def v_fast(url: str, conc: int) -> Call:
    fast = FastPath()

    async def call(i: int):
        reply = await fast.send(
            MODEL, [Message.user(messages_for(i)[0]["content"])], timeout=600.0, api_base=url, api_key=API_KEY
        )
        assert reply.text, "empty reply"
        return reply.cost

    return call


async def v_fast_frozen(url: str, conc: int) -> Call:
    import litellm

    litellm.suppress_debug_info = True
    gc.freeze()
    return await v_fast(url, conc)


async def v_fast_openai_sdk(url: str, conc: int) -> Call:
    """Same as fast, but the OpenAI SDK as transport (max_retries=0)."""
    import litellm
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key=API_KEY, max_retries=0)
    name = MODEL.split("/", 1)[1]

    async def call(i: int):
        completion = await client.chat.completions.create(model=name, messages=messages_for(i))
        usage = litellm.Usage(**completion.usage.model_dump())
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=name, custom_llm_provider="openai", usage_object=usage
        )
        assert completion.choices[0].message.content
        return prompt_cost + completion_cost

    return call


async def v_raw_httpx(url: str, conc: int) -> Call:
    import httpx

    client = httpx.AsyncClient(limits=httpx.Limits(max_connections=None))
    headers = {"Authorization": f"Bearer {API_KEY}"}

    async def call(i: int):
        r = await client.post(
            url + "/chat/completions", headers=headers, json={"model": "gpt-4o-mini", "messages": messages_for(i)}
        )
        r.raise_for_status()
        assert r.json()["choices"][0]["message"]["content"]

    return call


async def v_raw_aiohttp(url: str, conc: int) -> Call:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    headers = {"Authorization": f"Bearer {API_KEY}"}

    async def call(i: int):
        async with session.post(
            url + "/chat/completions", headers=headers, json={"model": "gpt-4o-mini", "messages": messages_for(i)}
        ) as r:
            r.raise_for_status()
            assert json.loads(await r.read())["choices"][0]["message"]["content"]

    return call


VARIANTS: dict = {
    "acompletion": ("bare litellm.acompletion", v_acompletion),
    "quiet": ("acompletion + logging/debug flags off", v_quiet),
    "max_retries0": ("acompletion(max_retries=0)", v_no_retries),
    "num_retries0": ("acompletion(max_retries=0, num_retries=0)", v_num_retries0),
    "shared_session": ("acompletion(shared_session=aiohttp, max_retries=0)", v_shared_session),
    "openai_client": ("acompletion(client=AsyncOpenAI(max_retries=0))", v_openai_client),
    "httpx_transport": ("acompletion, litellm.disable_aiohttp_transport", v_httpx_transport),
    "gc_freeze": ("acompletion(max_retries=0) + gc.freeze()", v_gc_freeze),
    "tuned": ("acompletion(max_retries=0) + flags + gc.freeze()", v_tuned),
    "router": ("litellm.Router.acompletion (num_retries=0)", v_router),
    "fast": ("FastPath: litellm body+cost, aiohttp", v_fast),
    "fast_frozen": ("FastPath + gc.freeze()", v_fast_frozen),
    "fast_openai_sdk": ("AsyncOpenAI + litellm.cost_per_token", v_fast_openai_sdk),
    "raw_httpx": ("floor: raw httpx POST, no cost", v_raw_httpx),
    "raw_aiohttp": ("floor: raw aiohttp POST, no cost", v_raw_aiohttp),
}


# ==========================================================================
# Worker (one variant, fresh process)
# ==========================================================================


def _server_admin(url: str, path: str) -> dict:
    base = url[:-3] if url.endswith("/v1") else url
    method = "POST" if path == "/reset" else "GET"
    req = urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


async def _run_calls(call: Call, n: int, conc: int, offset: int = 0) -> list:
    sem = asyncio.Semaphore(conc)

    async def one(i: int):
        async with sem:
            return await call(i)

    return await asyncio.gather(*(one(offset + i) for i in range(n)))


async def _worker(name: str, url: str, calls: int, conc: int, delay: float) -> dict:
    import litellm  # noqa: F401  (every variant pays the same import)

    setup = VARIANTS[name][1]
    call = await setup(url, conc)
    for _ in range(2):  # warm-up: imports, client caches, connection pool
        await _run_calls(call, conc, conc, offset=10**6)
    gc.collect()
    _server_admin(url, "/reset")
    server_cpu0 = _server_admin(url, "/stats")["cpu_seconds"]

    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = await _run_calls(call, calls, conc)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0

    stats = _server_admin(url, "/stats")
    costs = [r for r in results if isinstance(r, float)]
    ideal = calls / conc * delay
    return {
        "variant": name,
        "wall": wall,
        "ideal": ideal,
        "ratio": wall / ideal,
        "cpu_per_call_ms": cpu / calls * 1000,
        "server_cpu_per_call_ms": (stats["cpu_seconds"] - server_cpu0) / calls * 1000,
        "server_requests": stats["requests"],
        "max_in_flight": stats["max_in_flight"],
        "cost_per_call": costs[0] if costs else None,
    }


def _run_worker(name: str, url: str, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        name,
        "--url",
        url,
        "--calls",
        str(args.calls),
        "--concurrency",
        str(args.concurrency),
        "--delay",
        str(args.delay),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"variant": name, "error": " | ".join(tail)}
    return json.loads(lines[-1])


# ==========================================================================
# Orchestrator
# ==========================================================================


def _print_table(rows: list, args: argparse.Namespace) -> None:
    base = next((r for r in rows if r.get("variant") == "acompletion" and "error" not in r), None)
    print()
    print(
        f"{args.calls} calls, concurrency {args.concurrency}, server delay "
        f"{args.delay} s, "
        f"ideal {args.calls / args.concurrency * args.delay:.2f} s"
        f", model {MODEL}, {args.repeat} run(s) per variant"
    )
    header = (
        f"{'variant':<16} {'description':<50} {'wall s':>7} "
        f"{'x ideal':>7} {'cpu/call ms':>11} {'min':>5} {'vs bare':>7} "
        f"{'srv ms':>6} {'inflt':>5} {'cost/call $':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        desc = VARIANTS[r["variant"]][0]
        if "error" in r:
            print(f"{r['variant']:<16} {desc:<50} ERROR {r['error'][:200]}")
            continue
        rel = f"{r['cpu_per_call_ms'] / base['cpu_per_call_ms']:.2f}" if base else "-"
        cost = f"{r['cost_per_call']:.3g}" if r["cost_per_call"] is not None else "-"
        print(
            f"{r['variant']:<16} {desc:<50} {r['wall']:>7.2f} "
            f"{r['ratio']:>7.2f} {r['cpu_per_call_ms']:>11.2f} "
            f"{r['cpu_min_ms']:>5.2f} {rel:>7} "
            f"{r['server_cpu_per_call_ms']:>6.2f} {r['max_in_flight']:>5} "
            f"{cost:>12}"
        )
    print(
        "\ncpu/call = client CPU per call of the median run (min = best "
        "run); vs bare = cpu/call relative to bare acompletion;\n"
        "srv ms = fake server CPU per call (separate process); "
        "inflt = max requests in flight at the server."
    )


def _summarise(runs: list) -> dict:
    """Median run by CPU per call, plus the minimum over runs."""
    ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["cpu_per_call_ms"])
    if not ok:
        return runs[-1]
    row = dict(ok[(len(ok) - 1) // 2])
    row["cpu_min_ms"] = ok[0]["cpu_per_call_ms"]
    row["cpu_runs_ms"] = [round(r["cpu_per_call_ms"], 2) for r in runs if "error" not in r]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description="litellm per-call client CPU benchmark")
    parser.add_argument("--calls", type=int, default=1200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant; the median run is shown")
    parser.add_argument("--only", default="", help=f"comma-separated variant names ({', '.join(VARIANTS)})")
    parser.add_argument("--json", default="", help="also write rows here")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        result = asyncio.run(_worker(args.worker, args.url, args.calls, args.concurrency, args.delay))
        print(json.dumps(result), flush=True)
        return

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(VARIANTS)
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {sorted(unknown)}")

    from fake_server import spawn

    url, stop = spawn(args.delay)
    runs: dict = {name: [] for name in names}
    try:
        # Round-robin over variants so background load hits all of them alike.
        for round_no in range(1, args.repeat + 1):
            for name in names:
                result = _run_worker(name, url, args)
                runs[name].append(result)
                status = result.get("error") or (f"{result['wall']:.2f} s, {result['cpu_per_call_ms']:.2f} ms/call")
                print(f"  [{round_no}/{args.repeat}] {name:<16} {status}", file=sys.stderr, flush=True)
    finally:
        stop()
    rows = [_summarise(runs[name]) for name in names]
    _print_table(rows, args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
