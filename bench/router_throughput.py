"""Throughput over 4 deployments through litellm's Router, against one deployment; each server admits 16 requests
at once (the rest queue, as on a vLLM server with 16 sequences).

Prints, from one run, per call latency: the throughput (calls done per second with every slot busy, over the
same number of full waves) through a Router of 1 deployment and of 4, their ratio (target >= 3.5x, issue 11),
and the client CPU per call; once as sbpc sends (the Router chooses, the fast path sends) and once with litellm
sending the Router's requests itself, as it did before; and one server on the fast path for reference. Servers
are separate processes (tests/fake_server.py --slots 16).

    .venv/bin/python bench/router_throughput.py [--delays 1,8] [--waves 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fake model server is test code
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_API_KEY", "sk-bench")

from fake_server import spawn  # noqa: E402

from sembp_dsl.language.graph.graph import ModelSpec  # noqa: E402
from sembp_dsl.models import routing  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402

SENDS = routing._sending_host


def litellm_sends(fast, count):
    """litellm's own host: the Router's requests go out through litellm.acompletion."""
    from litellm.router_python_host import python_host

    return python_host


def measure(settings: dict, name: str, prompts: list[str], concurrency: int) -> tuple[float, float]:
    """(wall s, client CPU ms per call) for the prompts, after a warm-up call that loads litellm and the router."""
    llm = LLM({"forward": ModelSpec("forward", name, MappingProxyType(settings))}, concurrency=concurrency)

    async def go(batch):
        await asyncio.gather(*(llm.complete("forward", p) for p in batch))

    llm.run(go(["warm-up"]))
    wall, cpu = time.perf_counter(), time.process_time()
    llm.run(go(prompts))
    return time.perf_counter() - wall, (time.process_time() - cpu) / len(prompts) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delays", default="1,8", help="seconds per call, comma-separated (default 1,8)")
    ap.add_argument("--waves", type=int, default=2, help="full waves of calls per measurement (default 2)")
    ap.add_argument("--slots", type=int, default=16)
    args = ap.parse_args()
    print(
        f"throughput = calls / wall over {args.waves} full waves ({args.slots} slots per server, one process "
        f"per server; load average {os.getloadavg()[0]:.1f} at start)"
    )
    for delay in (float(d) for d in args.delays.split(",")):
        servers = [spawn(delay, reply="ok", slots=args.slots) for _ in range(4)]
        results = {}
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for sender, host in (("fast path sends", SENDS), ("litellm sends", litellm_sends)):
                    routing._sending_host = host
                    for n in (1, 4):
                        path = Path(tmp) / f"router-{n}.yaml"
                        path.write_text(
                            yaml.safe_dump(
                                {
                                    "model_list": [
                                        {
                                            "model_name": "pool",
                                            "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": url},
                                        }
                                        for url, _ in servers[:n]
                                    ],
                                    "router_settings": {"routing_strategy": "least-busy"},
                                }
                            )
                        )
                        calls = args.waves * args.slots * n
                        wall, cpu = measure(
                            {"router": str(path)}, "pool", [f"{sender} {n} {i}" for i in range(calls)], n * args.slots
                        )
                        results[sender, n] = (calls, wall, cpu)
                fast_calls = args.waves * args.slots
                fast = measure(
                    {"api_base": servers[0][0]}, "openai/gpt-4o-mini", [f"f {i}" for i in range(fast_calls)], args.slots
                )
        finally:
            routing._sending_host = SENDS
            for _, stop in servers:
                stop()
        print(f"{delay:g} s per call (ideal wall {args.waves * delay:.2f} s):")
        for sender in ("fast path sends", "litellm sends"):
            for n in (1, 4):
                calls, wall, cpu = results[sender, n]
                print(
                    f"  router, {sender:15} {n} deployment{'s' if n > 1 else ' '} {calls:4d} calls {wall:6.2f} s  "
                    f"{calls / wall:6.1f} calls/s  {cpu:5.2f} ms CPU/call"
                )
            ratio = (results[sender, 4][0] / results[sender, 4][1]) / (results[sender, 1][0] / results[sender, 1][1])
            print(f"    throughput ratio {ratio:.2f}x (target >= 3.5x: {'met' if ratio >= 3.5 else 'not met'})")
        print(
            f"  fast path alone, 1 server             {fast_calls:4d} calls {fast[0]:6.2f} s  "
            f"{fast_calls / fast[0]:6.1f} calls/s  {fast[1]:5.2f} ms CPU/call"
        )


if __name__ == "__main__":
    main()
