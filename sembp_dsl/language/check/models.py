"""Named models: each one used or a misspelt role, and every `models` and `strategies` list naming what exists."""

from __future__ import annotations

from .. import ir
from ..blocks.method import STRATEGIES
from ..diagnostics import suggestion, suggestion_or_list
from .context import MODEL_ROLES, Context


def check_models(cx: Context) -> None:
    """A named model no node uses (nor lists among the models it may move to) is a misspelt role when it is close
    to one (an error), else only unused."""
    naming: list[ir.Node | ir.MetricDef] = [*cx.p.nodes, *cx.p.metric_defs]  # nodes, and judges
    used = {str(s.value) for item in naming if (s := item.setting("model"))}
    used |= {str(name) for s in listed_models(cx.p) if isinstance(s.value, tuple) for name in s.value}  # movable to
    used |= {hint.split("'")[1] for name in used if name not in cx.models if (hint := suggestion(name, cx.models))}
    for block in cx.p.blocks:
        if block.kind != "model" or block.name in (None, "default", *MODEL_ROLES) or block.name in used:
            continue
        hint = suggestion(block.name, MODEL_ROLES)
        if hint:
            cx.report("E036", block.span, f"unknown model role '{block.name}'", help=hint)
        else:
            cx.report("W008", block.span, f"model '{block.name}' is not used by any node")
        used.add(block.name)  # one diagnostic for several blocks of one name


def listed_models(pipeline: ir.Pipeline) -> list[ir.Setting]:
    """Every `models` list: the optimize block's, then each node's."""
    optimize = [s for b in pipeline.blocks if b.kind == "optimize" for s in b.settings if s.key == "models"]
    return optimize + [s for node in pipeline.nodes if (s := node.setting("models")) is not None]


def check_model_lists(cx: Context) -> None:
    """Every name in a `models` list (the optimize block's, a node's) is a model of the file, and every name in
    `strategies` a strategy: a misspelt one would be dropped silently at run time. A node's own list needs its own
    `model =` line, the line a move rewrites."""
    strategies = [s for b in cx.p.blocks if b.kind == "optimize" for s in b.settings if s.key == "strategies"]
    for node in cx.p.nodes:
        setting = node.setting("models")
        model = node.setting("model")
        if setting is not None and (model is None or model.value in MODEL_ROLES):
            cx.report(
                "E138",
                setting.span,
                f"node '{node.name}' lists models to move to but names no model of its own",
                help="give it `model = NAME` (a `model NAME { }` block): a move rewrites that line",
            )
    for setting in [*strategies, *listed_models(cx.p)]:
        if not isinstance(setting.value, tuple):
            continue
        known, what = (STRATEGIES, "strategy") if setting.key == "strategies" else (cx.models, "model")
        for name in setting.value:
            if name not in known:
                code = "E136" if what == "strategy" else "E071"
                where = cx.name_in(setting.value_span, name)
                cx.report(
                    code, where, f"undefined {what} '{name}' in {setting.key}", help=suggestion_or_list(name, known)
                )
