"""Compile time against a bare Lark parse of the same text: what checking and building cost on top of parsing.

`compile` is everything from text to executable graph (our parser with its inline transformer, the
checker, the graph); the baseline is Lark parsing the same text with the same grammar into a plain parse
tree, which any compiler of this language must do at least. Target (issue 17): at most 1.5x, for the
layered pipelines of bench/compile_scaling.py and for one that uses every node feature (named models,
system messages, several params per node, record outputs read by field).

Each ratio is given twice. Warm: the Jinja2 templates are already compiled (templates are compiled once
per distinct source and kept), as when the language server checks a file again as you type. Cold: every
template compiled afresh, as a fresh `sbpc check` does; the bare parse never compiles them, since to the
grammar a template is an opaque string.

    python bench/compile_vs_parse.py [--nodes 5000]

It ends with the shipped pipelines (pipelines/*.sbp), a few milliseconds each.
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

from sembp_dsl.language.graph.graph import build  # noqa: E402
from sembp_dsl.language.nodes import templates  # noqa: E402
from sembp_dsl.language.syntax.parser import parse  # noqa: E402


def bare_lark() -> Lark:
    grammar = resources.files("sembp_dsl.language.syntax").joinpath("grammar", "sbp.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual")


def best_cpu(runs: int, fn) -> float:
    """The least CPU time of `runs` calls: on a shared machine, wall time measures the neighbours too."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def forget_templates() -> None:
    """Drop every compiled template and what was learnt from it, as a fresh process starts."""
    for cached in (templates.reads, templates.compile_template, templates.trial_render):
        cached.cache_clear()


def cold_build(text: str) -> None:
    forget_templates()
    build(parse(text))


def ratio(text: str, runs: int = 3, lark: Lark | None = None) -> tuple[float, float, float]:
    """(warm compile seconds, cold compile seconds, bare parse seconds), each the least CPU time of `runs`,
    taken in turns."""
    lark = lark or bare_lark()
    build(parse(text))  # warm caches and imports
    lark.parse(text)
    warm, cold, parsed = [], [], []
    for _ in range(runs):
        warm.append(best_cpu(1, lambda: build(parse(text))))
        cold.append(best_cpu(1, lambda: cold_build(text)))
        parsed.append(best_cpu(1, lambda: lark.parse(text)))
    return min(warm), min(cold), min(parsed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    args = ap.parse_args()
    lark = bare_lark()
    for label, text in (("plain", layered(args.nodes)), ("every feature", featured(args.nodes))):
        warm, cold, parsed = ratio(text, lark=lark)
        print(
            f"{label:<14} {args.nodes} nodes: compile {warm:.3f} s (templates compiled afresh: {cold:.3f} s), "
            f"bare Lark parse {parsed:.3f} s, ratio {warm / parsed:.2f} (target <= 1.5), cold ratio {cold / parsed:.2f}"
        )
    for path in sorted((Path(__file__).resolve().parents[1] / "pipelines").glob("*.sbp")):
        warm, cold, parsed = ratio(path.read_text(encoding="utf-8"), runs=20, lark=lark)
        print(
            f"{path.name:<14} compile {warm * 1000:.2f} ms (cold {cold * 1000:.2f} ms), bare Lark parse "
            f"{parsed * 1000:.2f} ms: ratio {warm / parsed:.2f}, cold ratio {cold / parsed:.2f}"
        )


if __name__ == "__main__":
    main()
