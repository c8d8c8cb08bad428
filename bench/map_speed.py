"""A map of 100 items at 200 ms per call, with concurrency 10, against the ideal of 100 / 10 x 0.2 s = 2 s.

Target (issue 30): at most 1.5x the ideal. The node runs once per item, all items at once, and the model's
`concurrency` bounds the calls in flight; the loopback fake server answers each call after `--delay` seconds,
in its own process, so the time measured is the map's scheduling and the calls, not the server's CPU.

    python bench/map_speed.py [--items 100] [--delay 0.2] [--concurrency 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fake model server is test code
from fake_server import spawn  # noqa: E402

from sembp_dsl.language.graph.graph import build  # noqa: E402
from sembp_dsl.language.syntax.parser import parse  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402
from sembp_dsl.runtime.forward import run  # noqa: E402

PIPELINE = """\
pipeline notes "A note on each passage"
input passages: list[text]
param read = "Say what {{{{ passage }}}} is about."
node note: text for each passage in passages {{ prompt = read  max_items = {items} }}
passages -> note
output note
model {{ name = "openai/fake"  api_base = "{url}"  concurrency = {concurrency} }}
"""


async def one_sample(items: int, url: str, concurrency: int) -> float:
    graph = build(parse(PIPELINE.format(items=items, url=url, concurrency=concurrency), "notes.sbp"))
    llm = LLM(graph.models, cache=None)
    passages = json.dumps([f"passage {k}" for k in range(items)])
    try:
        started = time.perf_counter()
        trace = await run(graph, llm, {"passages": passages})
        took = time.perf_counter() - started
    finally:
        await llm.aclose()
    assert len(json.loads(trace.final.output or "[]")) == items and llm.ledger.calls == items
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "dummy")  # the fake server takes any key
    url, stop = spawn(args.delay)
    try:
        took = asyncio.run(one_sample(args.items, url, args.concurrency))
    finally:
        stop()
    ideal = args.items / args.concurrency * args.delay
    print(f"{args.items} items, {args.delay * 1000:.0f} ms per call, concurrency {args.concurrency}")
    print(f"  took {took:.2f} s; ideal {ideal:.2f} s; ratio {took / ideal:.2f}x (target at most 1.50x)")
    if took > 1.5 * ideal:
        sys.exit(1)


if __name__ == "__main__":
    main()
