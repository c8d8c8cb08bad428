"""Pipelines generated at a chosen size, for tests and for bench/compile_scaling.py."""

from __future__ import annotations

import random


def node_product(n: int) -> str:
    """`a0, ..., a{n-1} -> b0, ..., b{n-1}`: one statement of n x n pairs whose sources are nodes."""
    sources, targets = [f"a{i}" for i in range(n)], [f"b{i}" for i in range(n)]
    return (
        "pipeline product\ninput q: text\n"
        + "".join(f"node {name}: text {{}}\n" for name in sources + targets)
        + f"q -> {', '.join(sources)}\n{', '.join(sources)} -> {', '.join(targets)}\noutput b0\n"
    )


def layered(nodes: int, edges_per_node: int = 4, seed: int = 0) -> str:
    """A layered DAG: node i reads node i-1 (so everything reaches the output) and 3 random earlier ones."""
    rng = random.Random(seed)
    inputs = [f"x{i}" for i in range(8)]
    lines = [f'pipeline generated "{nodes} nodes"', f"input {', '.join(inputs)}: text"]
    for i in range(nodes):
        lines.append(f'param p{i} = "Instruction for node {i}."')
    lines.append('template pair = """\n  {{ prompt }}\n  {{ x0 }}\n  """')
    for i in range(nodes):
        extra = "  template = pair" if i % 100 == 0 else ""
        lines.append(f"node n{i}: text {{ prompt = p{i}{extra} }}")
    for i in range(nodes):
        pool = inputs + [f"n{j}" for j in range(max(0, i - 50), i)]
        sources = {f"n{i - 1}"} if i else set()
        while len(sources) < edges_per_node:
            sources.add(rng.choice(pool))
        if i % 100 == 0:
            sources.add("x0")
        lines.append(f"{', '.join(sorted(sources))} -> n{i}")
    lines.append(f"output n{nodes - 1}")
    return "\n".join(lines) + "\n"


def featured(nodes: int, seed: int = 0) -> str:
    """A layered DAG like `layered`'s, every node with its own task and a shared frozen style guide in a shared
    template, every fifth node returning a record that the next one reads by field (in a template of its own),
    every third one with a system message, and the nodes alternating two named models."""
    rng = random.Random(seed)
    lines = [
        f'pipeline featured "{nodes} nodes, every feature"',
        "input x0, x1, x2: text",
        'frozen param style = "Be brief."',
        'param rules = "Follow the house rules."',
        'template step = "{{ prompt }} {{ style }} {{ x1 }}"',
    ]
    lines += [f'param t{i} = "Task of node {i}."' for i in range(nodes)]
    for i in range(nodes):
        kind = "{label: choice(a, b), why: text, score: number}" if i % 5 == 0 else "text"
        template = "step"
        if i and (i - 1) % 5 == 0:  # reads its record predecessor by field
            template = f'"{{{{ prompt }}}} {{{{ style }}}} {{{{ n{i - 1}.label }}}}: {{{{ n{i - 1}.why }}}}"'
        system = "  system = rules" if i % 3 == 0 else ""
        lines.append(f"node n{i}: {kind} {{ prompt = t{i}  template = {template}  model = m{i % 2}{system} }}")
    for i in range(nodes):
        sources = {f"n{i - 1}"} if i else {"x0"}
        sources |= {"x1", rng.choice(["x0", "x2"])}
        lines.append(f"{', '.join(sorted(sources))} -> n{i}")
    lines += [f"output n{nodes - 1}", 'model m0 { name = "openai/gpt-4o-mini" }', 'model m1 { name = "openai/gpt-4o" }']
    return "\n".join(lines) + "\n"
