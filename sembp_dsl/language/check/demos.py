"""Demos params: each one's `max`, one node to show it, and every example that node's inputs and output."""

from __future__ import annotations

from .. import ir
from ..diagnostics import suggestion
from ..nodes.demos import limit
from .context import Context, first_here


def check_demos(cx: Context) -> None:
    """Each demos param: its `max` a positive whole number its examples fit in, one node to show it, and
    every example that node's inputs and output by name, each once."""
    owners: dict[str, list[str]] = {}
    for node, name in cx.demos.items():
        owners.setdefault(name, []).append(node)
    for param in cx.params.values():
        if not param.is_demos:
            continue
        most = check_max(cx, param)
        count = len(param.demos or ())
        if most is not None and count > most:
            cx.report(
                "E099",
                param.literal,
                f"demos '{param.name}' holds {count} examples, more than its max {most}",
                help=f"remove {count - most}, or raise max",
            )
        if param.frozen and not count:
            cx.report("W012", param.span, f"frozen demos '{param.name}' has no examples: its node is shown none")
        nodes = owners.get(param.name, [])
        for extra in nodes[1:]:
            cx.report(
                "E094",
                next(n for n in cx.p.nodes if n.name == extra).setting("demos").span,  # type: ignore[union-attr]
                f"demos '{param.name}' is already node '{nodes[0]}''s: a demos param belongs to one node",
                help="declare another demos param for this node",
            )
        if nodes and nodes[0] not in cx.tainted:
            keys = (*cx.predecessors.get(nodes[0], ()), nodes[0])
            for index, example in enumerate(param.demos or (), start=1):
                check_example(cx, param, index, example, nodes[0], keys)


def check_max(cx: Context, param: ir.Param) -> int | None:
    """A demos param's `max` (demos.limit), reported when it is no whole number of 1 or more, or bounds only
    hand-written examples."""
    value = limit(param)
    if param.max is not None and value is None:
        cx.report(
            "E095", param.max.value_span, f"max must be a whole number of examples, 1 or more, not {param.max.value!r}"
        )
    elif param.max is not None and param.frozen:
        cx.report(
            "W011",
            param.max.span,
            f"demos '{param.name}' is frozen: the optimizer picks no examples for it, so its max only bounds yours",
        )
    return value


def check_example(cx: Context, param: ir.Param, index: int, example: ir.Example, node: str, keys: tuple) -> None:
    seen: dict[str, ir.Setting] = {}
    for field in example.fields:
        if field.key in seen:
            cx.report(
                "E098",
                field.span,
                f"example {index} of demos '{param.name}' gives '{field.key}' twice",
                notes=[first_here(seen[field.key].span)],
            )
            continue
        seen[field.key] = field
        if field.key not in keys:
            cx.report(
                "E096",
                field.span,
                f"example {index} of demos '{param.name}' gives '{field.key}', which node '{node}' neither receives "
                "nor answers",
                help=suggestion(field.key, keys) or f"its examples give {', '.join(keys)}",
            )
    missing = [key for key in keys if key not in seen]
    if missing:
        cx.report(
            "E097",
            example.span,
            f"example {index} of demos '{param.name}' lacks {', '.join(repr(k) for k in missing)}",
            help=f"an example of node '{node}' gives each of its inputs and its output: {', '.join(keys)}",
        )
