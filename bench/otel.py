"""What `--otel` costs per model call: sbpc's CPU per call with spans off and on, in one run.

Runs a three-node pipeline (tests/test_optimize.py's TOY: two analysts and a judge) over the in-process
MockTransport (no socket, no model), N samples one after another, so each call's CPU is its own. "On"
exports every span (forward pass, node, call) by OTLP/HTTP to a loopback receiver in a process of its own
(tests/otlp_receiver.py), so the receiver's CPU is not counted; the batch exporter's thread is, and every
span is delivered (flushed) inside the measured time. Off and on alternate, several rounds, and the medians
are compared: the ratio comes from one run, robust to a machine other work shares.

    python bench/otel.py [--samples 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_optimize import TOY  # noqa: E402

from sembp_dsl import telemetry  # noqa: E402
from sembp_dsl.language.graph.graph import build  # noqa: E402
from sembp_dsl.language.syntax.source import parse_text  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402
from sembp_dsl.models.mock import MockTransport  # noqa: E402
from sembp_dsl.models.transport import Reply  # noqa: E402
from sembp_dsl.runtime.forward import run  # noqa: E402


def reply(request) -> Reply:
    return Reply("Yes" if "VERDICT" in request.messages[-1]["content"] else "An analysis.", 40, 3, 0.0, "stop")


def measure(graph, samples: int, tracing: telemetry.Tracing | None, offset: int) -> float:
    """CPU seconds per model call over `samples` samples (3 calls each), spans delivered before the clock stops."""
    llm = LLM(graph.models, transport=MockTransport(reply))

    async def work() -> None:
        with telemetry.exporting(tracing):
            for i in range(samples):
                trace = await run(graph, llm, {"q": f"claim {offset + i}"})
                assert trace.output == "Yes", trace.final

    cpu = time.process_time()
    asyncio.run(work())
    if tracing is not None:
        telemetry.flush()
    return (time.process_time() - cpu) / (3 * samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    receiver = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "otlp_receiver.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdout is not None and receiver.stdin is not None
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.stdout.readline().strip()
    graph = build(parse_text(TOY, "toy.sbp"))
    tracing = telemetry.start()
    measure(graph, 20, None, 0)  # warm: imports, first compilations of the templates
    measure(graph, 20, tracing, 0)
    off, on = [], []
    for k in range(args.rounds):  # alternating, so that load on the machine falls on both alike
        off.append(measure(graph, args.samples, None, (2 * k + 1) * args.samples))
        on.append(measure(graph, args.samples, tracing, (2 * k + 2) * args.samples))
    receiver.stdin.close()
    bodies, size = receiver.stdout.readline().split()
    receiver.wait()
    off_ms, on_ms = statistics.median(off) * 1000, statistics.median(on) * 1000
    spans = 7 * (args.samples * args.rounds + 20)  # forward + 3 nodes + 3 calls a sample, the warm-up's too
    off_span = timeit.timeit(lambda: telemetry.span("node", {"sbpc.node": "a"}).__enter__(), number=200_000) / 200_000
    print(
        f"{args.samples} samples x 3 model calls, {args.rounds} rounds each way, MockTransport; load {os.getloadavg()[0]:.2f}"
    )
    print(f"sbpc CPU per model call, spans off: {off_ms:.3f} ms (rounds: {', '.join(f'{x * 1000:.3f}' for x in off)})")
    print(f"sbpc CPU per model call, spans on:  {on_ms:.3f} ms (rounds: {', '.join(f'{x * 1000:.3f}' for x in on)})")
    print(f"--otel adds {on_ms - off_ms:.3f} ms a call (x{on_ms / off_ms:.2f}); 7 spans a sample (2.33 a call)")
    print(f"a span while spans are off (the seam's no-op): {off_span * 1e6:.2f} us")
    print(f"delivered: {bodies} OTLP requests, {int(size) / 1e6:.1f} MB (about {spans} spans with the warm-up)")


if __name__ == "__main__":
    main()
