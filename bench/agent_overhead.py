"""sbpc's own CPU per tool step of a tool loop (language/kinds/agent/), beside the model's and the tool's time.

Runs pipelines/agent.sbp's node on the in-process MockTransport (no socket, no model): each sample makes
STEPS tool calls (one a reply) and then answers; the tools are pipelines/agent_tools.py's, whose own time is
measured apart by calling them directly. What is left, per tool step, is sbpc's: building the request, the
cache key, reading the reply, checking the arguments against the schema, running the call in its thread,
the trajectory. Target (issue 30): at most 1 ms a step.

    python bench/agent_overhead.py [--samples 200] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pipelines"))

import agent_tools  # noqa: E402

from sembp_dsl.language.graph.graph import build  # noqa: E402
from sembp_dsl.language.syntax.source import parse_text  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402
from sembp_dsl.models.mock import MockTransport  # noqa: E402
from sembp_dsl.models.transport import Reply  # noqa: E402
from sembp_dsl.runtime.code import bind  # noqa: E402
from sembp_dsl.runtime.forward import run  # noqa: E402

CALL = {"id": "c", "name": "lookup", "arguments": json.dumps({"place": "Kesh", "fact": "population"})}


def replies(steps: int):
    def reply(request) -> Reply:
        calls = sum(1 for m in request.messages if m["role"] == "tool")
        if calls >= steps:
            return Reply("18400", 10, 1, 0.0, "stop")
        return Reply("", 10, 5, 0.0, "tool_calls", (CALL,))

    return reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    path = ROOT / "pipelines" / "agent.sbp"
    graph = bind(build(parse_text(path.read_text(encoding="utf-8"), str(path))))
    llm = LLM(graph.models, transport=MockTransport(replies(args.steps), tools=True))

    async def samples() -> None:
        for i in range(args.samples):  # one after another: the CPU of each is its own
            trace = await run(graph, llm, {"question": f"What is the population of Kesh? ({i})"})
            assert trace.output == "18400", trace.final

    started, cpu = time.perf_counter(), time.process_time()
    llm.run(samples())
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    tool_started = time.process_time()
    for _ in range(args.samples * args.steps):
        agent_tools.lookup("Kesh", "population")
    tool = time.process_time() - tool_started
    steps = args.samples * args.steps
    print(f"{args.samples} samples x {args.steps} tool steps (+1 answering reply each), mock transport")
    print(f"wall {wall:.2f} s, CPU {cpu:.2f} s; the tool's own CPU {tool * 1000:.1f} ms in all")
    print(f"sbpc CPU per tool step (one model turn + one call): {(cpu - tool) / steps * 1000:.3f} ms")
    print(f"sbpc CPU per model turn, answers included: {(cpu - tool) / (steps + args.samples) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
