"""Compile time against a bare Lark parse of the same text: what checking and building cost on top of parsing.

`compile` is everything from text to executable graph (our parser with its inline transformer, the
checker, the graph); the baseline is Lark parsing the same text with the same grammar into a plain parse
tree, which any compiler of this language must do at least. Target (issue 17): at most 1.5x, for the
layered pipelines of bench/compile_scaling.py and for one that uses every node feature (named models,
system messages, several params per node, record outputs read by field).

    python bench/compile_vs_parse.py [--nodes 5000]
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path

from lark import Lark

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the generators the tests use too

from generated import featured, layered  # noqa: E402

from sembp_dsl.language.graph import build  # noqa: E402
from sembp_dsl.language.parser import parse  # noqa: E402


def bare_lark() -> Lark:
    grammar = resources.files("sembp_dsl.language").joinpath("grammar", "sbp.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual")


def best_cpu(runs: int, fn) -> float:
    """The least CPU time of `runs` calls: on a shared machine, wall time measures the neighbours too."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def ratio(text: str, runs: int = 3, lark: Lark | None = None) -> tuple[float, float]:
    """(compile seconds, bare parse seconds), each the least CPU time of `runs`, taken in turns."""
    lark = lark or bare_lark()
    build(parse(text))  # warm caches and imports
    lark.parse(text)
    compiled, parsed = [], []
    for _ in range(runs):
        compiled.append(best_cpu(1, lambda: build(parse(text))))
        parsed.append(best_cpu(1, lambda: lark.parse(text)))
    return min(compiled), min(parsed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    args = ap.parse_args()
    lark = bare_lark()
    for label, text in (("plain", layered(args.nodes)), ("every feature", featured(args.nodes))):
        compiled, parsed = ratio(text, lark=lark)
        print(
            f"{label:<14} {args.nodes} nodes: compile {compiled:.3f} s, bare Lark parse {parsed:.3f} s, "
            f"ratio {compiled / parsed:.2f} (target <= 1.5)"
        )


if __name__ == "__main__":
    main()
