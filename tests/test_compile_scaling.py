"""Compile cost follows the size of the file: one edge statement of n x n nodes is linear in n."""

from __future__ import annotations

import time

import pytest
from generated import node_product

from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.syntax.parser import parse


def fastest(pipeline, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        build(pipeline)
        times.append(time.perf_counter() - start)
    return min(times)


def test_a_statement_of_node_sources_compiles_in_time_linear_in_its_names():
    small, large = parse(node_product(300)), parse(node_product(2400))  # 90,000 and 5,760,000 pairs
    graph = build(large)
    assert list(graph.nodes)[:2] == ["a0", "a1"] and graph.nodes["b7"].hints == tuple(f"a{i}" for i in range(2400))
    # 8x the names: linear is 8x the time (11x to 14x measured: bigger dicts), a step per pair 64x (57x to 78x);
    # best of several runs, so load spikes fall out
    ratio = fastest(large, 3) / fastest(small, 9)
    assert ratio < 24, f"8x the names took {ratio:.1f}x the time: compile is quadratic in the statement again"


def test_a_cycle_through_a_product_statement_is_still_reported_where_it_starts():
    text = node_product(300).replace("output b0", "b299 -> a5\noutput b0")
    with pytest.raises(PipelineError) as caught:
        build(parse(text))
    cycles = [d for d in caught.value.diagnostics if d.message.startswith("cycle:")]
    assert [d.message for d in cycles] == ["cycle: a5 -> b299 -> a5"]
    assert cycles[0].span.line == 3 + 5  # `node a5` is declared on line 8


def test_compile_emit_prompts_is_bounded_and_says_where_it_stopped(tmp_path, capsys, monkeypatch):
    """On a 1,500 x 1,500-edge graph `--emit prompts` printed 768 MB over 300 s. The prompts end at a bound
    (here 1 MB, for a 300 x 300 graph that has 63), and the last line says they were cut short."""
    from sembp_dsl import cli
    from sembp_dsl.language.tooling import emit

    monkeypatch.setattr(emit, "MAX_PROMPT_CHARS", 2**20)
    path = tmp_path / "wide.sbp"
    path.write_text(node_product(300))
    assert cli.main(["compile", str(path), "--emit", "prompts"]) == 0
    out = capsys.readouterr().out
    assert len(out) < 2**20 + 100_000  # the bound, and the one section that crossed it
    assert out.rstrip().endswith("more prompts than anyone reads ===")
