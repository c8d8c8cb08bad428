"""Pipelines generated at a chosen size, for tests and for bench/compile_scaling.py."""

from __future__ import annotations


def node_product(n: int) -> str:
    """`a0, ..., a{n-1} -> b0, ..., b{n-1}`: one statement of n x n pairs whose sources are nodes."""
    sources, targets = [f"a{i}" for i in range(n)], [f"b{i}" for i in range(n)]
    return (
        "pipeline product\ninput q: text\n"
        + "".join(f"node {name}: text {{}}\n" for name in sources + targets)
        + f"q -> {', '.join(sources)}\n{', '.join(sources)} -> {', '.join(targets)}\noutput b0\n"
    )
