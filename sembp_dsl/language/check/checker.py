"""IR -> checked IR: every semantic rule of the language, every violation reported at once.

The rules are passes, one module per concern, run in the order `PASSES` lists: each reads and reports through
one `Context` (context.py), and a later pass builds on what the earlier ones found there (the edges give the
predecessors the templates are checked against, and so on). The result, `Analysis`, is what the compiler
builds on: predecessors in declaration order (which fixes hint numbering), successors and a topological order.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import ir
from ..diagnostics import Diagnostic
from . import declarations, demos, edges, models, outputs, settings, templates, unused
from .context import Analysis, Context

PASSES: tuple[Callable[[Context], None], ...] = (
    declarations.check_reserved,
    declarations.check_nodes,
    settings.check_blocks,
    declarations.check_functions,
    declarations.check_locks,
    edges.check_edges,  # finds predecessors and successors
    edges.check_cycles,  # finds the order
    outputs.check_output,  # finds the output
    edges.check_branches,
    outputs.check_metric,  # finds the metric
    templates.check_templates,  # finds the params each node uses
    demos.check_demos,
    templates.check_builtin_overrides,
    models.check_models,
    models.check_model_lists,
    unused.warn_unused,
    unused.check_output_fed,
    outputs.warn_format_in_trainable,
)


def check(pipeline: ir.Pipeline) -> tuple[Analysis, list[Diagnostic]]:
    """Every pass, in order; all diagnostics at once."""
    cx = Context(pipeline)
    for run in PASSES:
        run(cx)
    return Analysis(cx.predecessors, cx.successors, cx.order, cx.metric, cx.node_params, cx.demos), cx.diagnostics
