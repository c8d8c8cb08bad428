"""Parse + check + compile time of generated pipelines, and `sbpc check` as a whole process.

Targets (issue 2): 5,000 nodes / 20,000 edges from text to compiled graph in under
2 s; 10x the nodes costs at most about 12x the time; one edge statement of n x n
nodes costs time linear in n (twice the names, about twice the time); `sbpc check`
of the LIAR example under 0.5 s as a whole process, without importing litellm.
Issue 47: `check` of one node offering n tools from one module is linear in n (each
tool parsed the module twice: 4x the tools cost 17x the time).

    python bench/compile_scaling.py [--nodes 5000] [--factor 10] [--product 1500] [--tools 150]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the generators the tests use too

from generated import layered, node_product  # noqa: E402

from sembp_dsl.cli.commands import main as sbpc  # noqa: E402
from sembp_dsl.language.graph.graph import build  # noqa: E402
from sembp_dsl.language.syntax.parser import parse  # noqa: E402


def best_of(runs: int, fn) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def check_of_tools(folder: Path, count: int) -> float:
    """Seconds `sbpc check` takes (in this process) on a node offering `count` tools, all from one module."""
    home = folder / str(count)
    home.mkdir()
    (home / "tools.py").write_text(
        "".join(f'def t{i}(q: str, n: int = 3) -> str:\n    """Tool {i}."""\n    return q\n' for i in range(count))
    )
    declared = "".join(f'function t{i} = "tools:t{i}"\n' for i in range(count))
    names = ", ".join(f"t{i}" for i in range(count))
    (home / "a.sbp").write_text(
        f'pipeline a\ninput q: text\nparam t = "x"\n{declared}node s: text {{ prompt = t  tools = [{names}] }}\n'
        "q -> s\noutput s\n"
    )
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert sbpc(["check", str(home / "a.sbp")]) == 0
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--product", type=int, default=1500, help="names on each side of the n x n statement")
    ap.add_argument("--tools", type=int, default=150, help="tools one node offers from one module (then 4x)")
    args = ap.parse_args()

    build(parse(layered(10)))  # warm the grammar cache and imports
    small_text, big_text = layered(args.nodes), layered(args.nodes * args.factor)
    small_graph = build(parse(small_text))
    edges = sum(len(n.inputs) for n in small_graph.nodes.values())
    small = best_of(3, lambda: build(parse(small_text)))
    big = best_of(1, lambda: build(parse(big_text)))
    print(f"{args.nodes:>7} nodes, {edges:>7} edges: {small:6.3f} s text -> compiled graph   (target < 2 s)")
    print(
        f"{args.nodes * args.factor:>7} nodes: {big:6.3f} s;  ratio {big / small:5.2f}x for {args.factor}x the nodes"
        f"   (target <= {1.2 * args.factor:.0f}x)"
    )
    half_text, product_text = node_product(args.product // 2), node_product(args.product)
    half = best_of(3, lambda: build(parse(half_text)))
    product = best_of(3, lambda: build(parse(product_text)))
    print(
        f"one statement of {args.product:,} x {args.product:,} nodes: {product:6.3f} s text -> compiled graph; "
        f"ratio {product / half:4.2f}x for 2x the names   (linear 2x, quadratic 4x)"
    )

    with tempfile.TemporaryDirectory() as folder:
        check_of_tools(Path(folder), 20)  # warm
        few, many = check_of_tools(Path(folder), args.tools), check_of_tools(Path(folder), 4 * args.tools)
    print(
        f"sbpc check of one node offering {args.tools} / {4 * args.tools} tools from one module: {few:6.3f} s / "
        f"{many:6.3f} s; ratio {many / few:4.2f}x for 4x the tools   (linear 4x, quadratic 16x)"
    )

    cmd = [sys.executable, "-m", "sembp_dsl.cli", "check", str(ROOT / "pipelines" / "liar.sbp")]
    subprocess.run(cmd, check=True, capture_output=True)
    whole = best_of(5, lambda: subprocess.run(cmd, check=True, capture_output=True))
    probe = "import sys, sembp_dsl.cli as c; c.main(['check', sys.argv[1]]); print(any(m.startswith(('litellm', 'llama_cpp')) for m in sys.modules))"
    imported = subprocess.run(
        [sys.executable, "-c", probe, str(ROOT / "pipelines" / "liar.sbp")], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    print(
        f"sbpc check pipelines/liar.sbp: {whole:6.3f} s as a whole process (target < 0.5 s); "
        f"imports litellm or a model runtime: {imported}"
    )


if __name__ == "__main__":
    main()
