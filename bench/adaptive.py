"""Adaptive concurrency (models/adaptive.py) against loopback fake servers that take calls in different ways.

Targets (issue 31): against a server that refuses with 429 past 8 requests in flight, at most 5% of requests
refused and the whole run at most 1.3x the same run at `--concurrency 8`. The loopback server refuses at once;
the same server again with each refusal taking a tenth and a quarter of a call shows how the refusals grow
when a 429 takes a network round trip (the window lets calls in until it hears one). Beside it, in the same run: a server
that refuses past 40 (how many calls finding a higher limit costs), an unlimited one (how fast the window opens:
the run against the ideal, every call at once), and one that serves 4 at a time and queues the rest, as a vLLM
server does (how wide the window gets there). Each server answers after `--delay` seconds; each figure is the
median of `--rounds`, the fixed and the adaptive runs alternating.

    python bench/adaptive.py [--rounds 3] [--delay 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from types import MappingProxyType

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the fake model server is test code

from fake_server import FakeServer  # noqa: E402

from sembp_dsl.language.graph import ModelSpec  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402


def one(server: FakeServer, calls: int, concurrency: int | None) -> tuple[float, int, int, int]:
    """`calls` at once through sbpc's LLM layer: (wall seconds, requests, refused, widest window)."""
    requests, refused = server.requests, server.rate_limited
    spec = ModelSpec("forward", "openai/fake", MappingProxyType({"api_base": server.url}))
    llm = LLM({"forward": spec}, concurrency=concurrency, backoff=0.05)

    async def go() -> None:
        await asyncio.gather(*(llm.complete("forward", f"prompt {n}") for n in range(calls)))

    start = time.perf_counter()
    llm.run(go())
    wall = time.perf_counter() - start
    widest = max((size for history in llm.ledger.concurrency.values() for _, size in history), default=0)
    return wall, server.requests - requests, server.rate_limited - refused, widest


def median_of(rounds: int, run) -> tuple[float, ...]:
    results = [run() for _ in range(rounds)]
    return tuple(statistics.median(column) for column in zip(*results))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.2, help="seconds each call takes (default 0.2)")
    args = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "fake-key")
    delay, rounds = args.delay, args.rounds
    print(f"{delay * 1000:.0f} ms per call, median of {rounds} rounds; load average {os.getloadavg()[0]:.2f}")

    with FakeServer(reply="ok", delay=delay, limit=8) as server:
        pairs = [(one(server, 200, 8), one(server, 200, None)) for _ in range(rounds)]
    fixed = statistics.median(p[0][0] for p in pairs)
    wall, requests, refused, widest = (statistics.median(p[1][k] for p in pairs) for k in range(4))
    share, ratio = refused / requests, wall / fixed
    print(f"refuses past 8 in flight, 200 calls: --concurrency 8 {fixed:.2f} s, adaptive {wall:.2f} s")
    print(f"  whole run {ratio:.2f}x the fixed 8's (target <= 1.3x: {'met' if ratio <= 1.3 else 'NOT met'})")
    print(f"  {refused:.0f} of {requests:.0f} requests refused: {share:.1%} (target <= 5%: ", end="")
    print(f"{'met' if share <= 0.05 else 'NOT met'}); widest window {widest:.0f}")

    for share in (10, 4):  # a provider's 429 takes a network round trip, not nothing: a tenth, a quarter of a call
        with FakeServer(reply="ok", delay=delay, limit=8) as server:
            server.configure(refusal_delay=delay / share)
            wall, requests, refused, widest = median_of(rounds, lambda: one(server, 200, None))
        print(f"  each 429 after {delay * 1000 / share:.0f} ms: {wall:.2f} s ({wall / fixed:.2f}x), ", end="")
        print(
            f"{refused:.0f} of {requests:.0f} requests refused ({refused / requests:.1%}), widest window {widest:.0f}"
        )

    with FakeServer(reply="ok", delay=delay, limit=40) as server:
        wall, requests, refused, widest = median_of(rounds, lambda: one(server, 400, None))
    print(f"refuses past 40 in flight, 400 calls: {wall:.2f} s, {refused:.0f} of {requests:.0f} refused")

    with FakeServer(reply="ok", delay=delay) as server:
        wall, _, _, widest = median_of(rounds, lambda: one(server, 300, None))
        wide, _, _, _ = median_of(rounds, lambda: one(server, 300, 300))
    print(
        f"unlimited, 300 calls: adaptive {wall:.2f} s, every call at once {wide:.2f} s ({wall / wide:.2f}x), ", end=""
    )
    print(f"widest window {widest:.0f}")

    with FakeServer(reply="ok", delay=delay / 4, slots=4) as server:
        wall, _, _, widest = median_of(rounds, lambda: one(server, 300, None))
        fixed, _, _, _ = median_of(rounds, lambda: one(server, 300, 4))
    print(
        f"serves 4 at a time and queues the rest ({delay * 250:.0f} ms a call), 300 calls: adaptive {wall:.2f} s, ",
        end="",
    )
    print(f"--concurrency 4 {fixed:.2f} s ({wall / fixed:.2f}x), widest window {widest:.0f}")


if __name__ == "__main__":
    main()
