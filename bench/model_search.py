"""The models strategy's calls against an exhaustive search over model assignments, on the same 3-node pipeline,
server and samples, in one run.

Issue 33's benchmark. The pipeline chains three nodes `a -> b -> c`, each on `strong`, and may move each to any
of three models: `bad` (the cheapest; its answers are always wrong, and a wrong answer carries down the chain;
every node sees the sample too, so no two samples' prompts are alike),
`fast` and `strong` (right on every sample; `fast` cheaper). Both searches look for the cheapest assignment whose
accuracy on the validation samples is within `margin` of the initial pipeline's:

- **the models strategy**: `sbpc optimize --objective cost --strategies models` (its training draw, its initial
  gate score, one move a step, each gated by the non-inferiority test, stopping once settled), no cache;
- **exhaustive**: every one of the 3^3 = 27 assignments evaluated on the whole validation split, no cache.

Calls are counted by the fake servers (tests/fake_server.py, in this process: loopback, no delay), so they are
every request either search sent, retries included. Both must end on the same assignment (every node on
`fast`); the figures go to docs/performance.md.

    .venv/bin/python bench/model_search.py [--val 100] [--margin 0.05]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_server import FakeServer  # noqa: E402

from sembp_dsl import cli  # noqa: E402
from sembp_dsl.language.graph.compile import compile_file  # noqa: E402
from sembp_dsl.language.nodes.node import model_param  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402
from sembp_dsl.runtime.datasets import Sample  # noqa: E402
from sembp_dsl.runtime.evaluate import evaluate  # noqa: E402

NODES = ("a", "b", "c")
MODELS = ("bad", "fast", "strong")
PIPELINE = """\
pipeline relay "Pass the answer along"

input q: text

param a_task = "Read the claim."
param b_task = "Restate it."
param c_task = "Answer Yes or No."

node a: text { prompt = a_task  model = strong }
node b: text { prompt = b_task  model = strong }
node c: text { prompt = c_task  model = strong }

q -> a -> b -> c
q -> b, c
output c
metric exact

model bad       { name = "openai/house-bad"     api_base = "BAD"   max_tokens = 16  input_price = 0.05  output_price = 0.1 }
model fast      { name = "openai/house-fast"    api_base = "GOOD"  max_tokens = 16  input_price = 0.15  output_price = 0.6 }
model strong    { name = "openai/house-strong"  api_base = "GOOD"  max_tokens = 16  input_price = 2.5   output_price = 10 }
model backward  { name = "openai/house-fast"    api_base = "GOOD"  max_tokens = 16 }
model optimizer { name = "openai/house-fast"    api_base = "GOOD"  max_tokens = 16 }

optimize { models = [bad, fast, strong] }
"""


def good(messages: list) -> str:
    """Right unless an earlier node's answer in the prompt was wrong."""
    return "Wrong" if any("Wrong" in str(m.get("content")) for m in messages) else "Yes"


def strategy(path: Path, val: int, margin: float) -> dict[str, str]:
    """`sbpc optimize --objective cost --strategies models` on the file, until no move is left; its assignment."""
    argv = [
        "optimize", str(path), "--data", str(path.parent / "data.jsonl"), "--train-size", "4", "--val-size",
        str(val), "--objective", "cost", "--margin", str(margin), "--strategies", "models", "--iters",
        str(2 * len(NODES) + 1), "--no-cache", "--runs-dir", str(path.parent / "runs"),
    ]  # fmt: skip
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    assert code == 0, f"sbpc optimize exited {code}: {err.getvalue()}"
    graph = compile_file(str(path))
    return {name: graph.nodes[name].model for name in NODES}


def exhaustive(path: Path, val: int, margin: float) -> dict[str, str]:
    """Every assignment on the whole validation split; the cheapest within `margin` of the initial accuracy."""
    graph = compile_file(str(path))
    llm = LLM(graph.models)
    samples = [Sample(f"v{i}", {"q": f"claim {i}"}, "Yes") for i in range(val)]
    results = {}
    for models in itertools.product(MODELS, repeat=len(NODES)):
        moved = graph.with_prompts({model_param(n): m for n, m in zip(NODES, models)})
        scored = llm.run(evaluate(moved, llm, samples, "exact", {}))
        tokens = [(n, r.trace.nodes[n]) for r in scored.results for n in NODES]
        cost = sum(llm.price(moved.nodes[n].model, t.prompt_tokens, t.completion_tokens) or 0.0 for n, t in tokens)
        results[models] = (scored.accuracy or 0.0, cost)
    initial = results[("strong",) * len(NODES)][0]
    fit = [m for m, (accuracy, _) in results.items() if accuracy >= initial - margin]
    return dict(zip(NODES, min(fit, key=lambda m: results[m][1])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--val", type=int, default=100, help="validation samples (default 100)")
    parser.add_argument("--margin", type=float, default=0.05)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "dummy")  # the fake servers take any key; the client wants one
    rows = [{"q": f"claim {i}", "answer": "Yes"} for i in range(args.val + 4)]
    found, calls = {}, {}
    with FakeServer(reply=good) as right, FakeServer(reply="Wrong") as wrong, tempfile.TemporaryDirectory() as tmp:
        for name, search in (("models strategy", strategy), ("exhaustive", exhaustive)):
            folder = Path(tmp) / name.replace(" ", "_")
            folder.mkdir()
            (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            path = folder / "relay.sbp"
            path.write_text(PIPELINE.replace('"GOOD"', f'"{right.url}"').replace('"BAD"', f'"{wrong.url}"'))
            before = right.requests + wrong.requests
            found[name] = search(path, args.val, args.margin)
            calls[name] = right.requests + wrong.requests - before
    print(f"3-node pipeline, {len(MODELS)} models a node (one always wrong), {args.val} validation samples, "
          f"margin {args.margin}")  # fmt: skip
    for name in calls:
        print(f"  {name:<16} {calls[name]:>6} calls  -> {' '.join(f'{n}={m}' for n, m in found[name].items())}")
    print(f"  ratio: the models strategy makes {calls['models strategy'] / calls['exhaustive']:.3f}x the calls of "
          f"the exhaustive search ({calls['exhaustive'] / calls['models strategy']:.1f}x fewer)")  # fmt: skip
    assert found["models strategy"] == found["exhaustive"], "the two searches ended on different assignments"


if __name__ == "__main__":
    main()
