"""`sbpc eval` against bare litellm, through real HTTP to a loopback server, in one run.

Targets (issue 3), with the LIAR pipeline on 200 samples (1,200 calls) at
concurrency 64 against a server that answers after 200 ms:

* our orchestration (graph execution, templates, parsing, scoring, ledger, cache
  look-ups) costs at most 1.10x the time of 1,200 bare `litellm.acompletion`
  calls: measured with our layer sending through `litellm.acompletion` too;
* then beat bare litellm: the same eval through our fast path;
* a second run served entirely from the cache: under 1 ms per cached call.

The server runs in its own process, so the client CPU per call is the eval's own.
Every variant runs in this one process, after the same warm-up, one after the
other; `gc.freeze()` is applied once after set-up, as `sbpc` does.

    python bench/eval_overhead.py [--samples 200] [--concurrency 64] [--delay 0.2]
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import litellm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fake model server is test code
from fake_server import spawn  # noqa: E402

from sembp_dsl.language.graph.graph import build  # noqa: E402
from sembp_dsl.language.syntax.source import parse_text  # noqa: E402
from sembp_dsl.models.cache import ResponseCache  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402
from sembp_dsl.models.transport import Litellm  # noqa: E402
from sembp_dsl.runtime import datasets  # noqa: E402
from sembp_dsl.runtime.evaluate import evaluate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "openai/gpt-4o-mini"  # in litellm's price table, so cost is computed on every path


def liar_graph(url: str):
    text = (ROOT / "pipelines/liar.sbp").read_text()
    text = (
        re.sub(r"\nmodel[^{]*\{[^}]*\}", "", text)
        + f'\nmodel {{ name = "{MODEL}"  api_base = "{url}"  temperature = 0 }}\n'
    )
    return build(parse_text(text, "liar.sbp"))


def timed(fn) -> tuple[float, float]:
    """(wall seconds, client CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def bare_litellm(url: str, prompts: list[str], concurrency: int) -> None:
    """The same calls the eval makes (same prompts, model and settings), with nothing around them."""

    async def main():
        limit = asyncio.Semaphore(concurrency)

        async def one(prompt: str):
            async with limit:
                await litellm.acompletion(
                    model=MODEL,
                    messages=[{"role": "user", "content": prompt}],
                    api_base=url,
                    max_retries=0,
                    temperature=0,
                    timeout=120.0,
                )

        await asyncio.gather(*(one(p) for p in prompts))

    asyncio.run(main())


def sbpc_eval(graph, samples, concurrency: int, *, through_litellm: bool = False, cache: ResponseCache | None = None):
    # through_litellm: our whole layer, but sending through litellm.acompletion
    llm = LLM(graph.models, concurrency=concurrency, cache=cache, transport=Litellm() if through_litellm else None)
    evaluation = llm.run(evaluate(graph, llm, samples, "exact"))
    assert len(evaluation.results) == len(samples)
    return evaluation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--delay", type=float, default=0.2)
    args = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    os.environ.setdefault("SBPC_DATA_DIR", str(ROOT.parent / "shared" / "datasets"))
    data = datasets.load("liar")
    samples = datasets.make_splits(data, 0, 0, args.samples, seed=0).test
    url, stop = spawn(args.delay, reply="Yes")
    try:
        graph = liar_graph(url)
        calls = len(samples) * len(graph.nodes)
        ideal = calls / args.concurrency * args.delay
        warm = samples[: args.concurrency // len(graph.nodes) + 1]
        prompts = [
            t.prompt for r in sbpc_eval(graph, samples, args.concurrency).results for t in r.trace.nodes.values()
        ]
        bare_litellm(url, prompts[: args.concurrency], args.concurrency)
        sbpc_eval(graph, warm, args.concurrency, through_litellm=True)
        gc.collect()
        gc.freeze()

        rows = [
            ("bare litellm.acompletion", timed(lambda: bare_litellm(url, prompts, args.concurrency))),
            (
                "sbpc eval via litellm.acompletion",
                timed(lambda: sbpc_eval(graph, samples, args.concurrency, through_litellm=True)),
            ),
            ("sbpc eval (fast path, the default)", timed(lambda: sbpc_eval(graph, samples, args.concurrency))),
        ]
        with tempfile.TemporaryDirectory() as tmp:
            cache = ResponseCache(Path(tmp) / "c.sqlite")
            sbpc_eval(graph, samples, args.concurrency, cache=cache)  # fill
            cached = timed(lambda: sbpc_eval(graph, samples, args.concurrency, cache=cache))
    finally:
        stop()

    print(
        f"{calls} calls ({len(samples)} LIAR samples x {len(graph.nodes)} nodes), concurrency {args.concurrency}, "
        f"server delay {args.delay * 1000:.0f} ms; ideal {ideal:.2f} s"
    )
    print(f"{'':36} {'wall s':>7} {'x ideal':>8} {'x bare':>7} {'CPU ms/call':>12}")
    bare_wall = rows[0][1][0]
    for name, (wall, cpu) in rows:
        print(f"{name:36} {wall:7.2f} {wall / ideal:8.2f} {wall / bare_wall:7.2f} {cpu / calls * 1000:12.2f}")
    print(
        f"{'sbpc eval, all from the cache':36} {cached[0]:7.2f} {'':8} {'':7} {cached[1] / calls * 1000:12.2f}"
        f"   -> {cached[0] / calls * 1000:.3f} ms per cached call (target < 1 ms)"
    )
    print(
        f"orchestration: {rows[1][1][0] / bare_wall:.2f}x bare litellm (target <= 1.10x); "
        f"fast path: {rows[2][1][0] / bare_wall:.2f}x bare litellm"
    )


if __name__ == "__main__":
    main()
