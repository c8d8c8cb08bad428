"""The output and what scores it: one output node (or a record's field), one metric, a metric the file defines
(a function, or a judge with a frozen rubric), and the answer format said where the optimizer cannot drop it."""

from __future__ import annotations

import os
import re

from .. import ir
from ..blocks.callables import Target, beside, parse_target
from ..diagnostics import Note, suggestion, suggestion_or_list
from ..nodes.branches import check_output_alternatives
from ..nodes.metrics import JUDGE_SETTINGS, METRICS, default_metric, parse_scale
from ..nodes.outputs import field_of, fields_of, labels_of
from ..signatures import defined_async
from .context import Context, no_field, output_type
from .settings import check_settings
from .templates import system_source, template_source, template_variables


def check_output(cx: Context) -> None:
    cx.output, cx.label = output_of(cx)
    if cx.output is not None:
        check_output_alternatives(cx, cx.p.outputs[0])


def output_of(cx: Context) -> tuple[ir.Node | None, str]:
    """The output node, and how it is named in messages (`judge.verdict` for a field of a record)."""
    outputs = cx.p.outputs
    if not outputs:
        cx.report("E042", cx.p.span, "no output node: add `output <node>`")
        return None, ""
    for extra in outputs[1:]:
        cx.report(
            "E043",
            extra.span,
            "a pipeline has one output",
            notes=[Note(outputs[0].span, "the output is declared here")],
        )
    ref, part = outputs[0].node, outputs[0].record_field
    if ref.name not in cx.node_names:
        if ref.name in cx.nodes:
            cx.report("E026", ref.span, f"undefined node '{ref.name}' (an input cannot be the output)")
        else:
            cx.report("E026", ref.span, f"undefined node '{ref.name}'", help=suggestion(ref.name, cx.node_names))
        return None, ""
    node = next(node for node in cx.p.nodes if node.name == ref.name)  # a node, even where an input has its name
    if part is None:
        return node, node.name
    if not fields_of(node.type):
        cx.report("E077", part.span, f"node '{node.name}' is {node.type}, not a record: it has no field '{part.name}'")
        return None, ""
    if field_of(node.type, part.name) is None:
        no_field(cx, part.span, node.name, part.name)
        return None, ""
    return node, f"{node.name}.{part.name}"


def check_metric(cx: Context) -> None:
    cx.metric = metric_of(cx, cx.output, cx.label)
    for metric_def in cx.p.metric_defs:
        check_metric_def(cx, metric_def)


def metric_of(cx: Context, output: ir.Node | None, label: str) -> str:
    """The metric scored: the one `metric NAME` names (a built-in or one the file defines), else the first the
    file defines, else the output type's."""
    for extra in cx.p.metrics[1:]:
        first = Note(cx.p.metrics[0].span, "the metric is declared here")
        cx.report("E044", extra.span, "a pipeline has one metric", notes=[first])
    scored = output_type(output, cx.p.outputs[0] if cx.p.outputs else None)
    if not cx.p.metrics:
        return cx.p.metric_defs[0].name if cx.p.metric_defs else default_metric(scored)
    ref = cx.p.metrics[0]
    known, builtin = [*METRICS, *cx.metric_defs], METRICS.get(ref.name)
    if ref.name not in known:
        cx.report("E045", ref.span, f"unknown metric '{ref.name}'", help=suggestion_or_list(ref.name, known))
    elif scored is not None and builtin is not None and builtin.accepts and scored.kind not in builtin.accepts:
        cx.report("E046", ref.span, f"metric '{ref.name}' needs {builtin.needs}, but '{label}' is {scored}")
    return ref.name


def async_beside(path: str | None, target: Target) -> bool:
    """Whether the module beside the pipeline at `path` defines `target` with `async def` (read, not imported)."""
    if not path or not os.path.isfile(path):
        return False
    place = beside(os.path.dirname(os.path.abspath(path)), target.module)
    return place.path is not None and defined_async(place.path, target.attr)


def check_metric_def(cx: Context, metric: ir.MetricDef) -> None:
    """A metric the file defines: a name of its own, and a function's `module:function` or a judge's rubric (a
    frozen param reading only what a judge is shown), model and scale."""
    if metric.name in METRICS:
        cx.report("E100", metric.span, f"'{metric.name}' is a built-in metric; give yours another name")
    if metric.function is not None:
        target = parse_target(metric.function)
        if isinstance(target, str):  # read as a function node's `"module:name"` is, without importing
            cx.report(
                "E105",
                metric.value_span,
                f"function metric '{metric.name}': {target}",
                help='for a function overlap in metrics.py beside the pipeline: "metrics:overlap"',
            )
        elif async_beside(cx.p.path, target):
            cx.report(
                "E150",
                metric.value_span,
                f"metric '{metric.name}' is an async function; a metric is a plain function (prediction, example)"
                " -> score",
                help="define it with `def`; to await something inside it, use asyncio.run(...)",
            )
        return
    check_settings(cx, f"metric '{metric.name}'", metric.settings, JUDGE_SETTINGS)
    model, scale, prompt = metric.setting("model"), metric.setting("scale"), metric.setting("prompt")
    if model is not None and isinstance(model.value, str) and model.value not in cx.models:
        cx.report("E071", model.value_span, f"undefined model '{model.value}'", help=suggestion(model.value, cx.models))
    if scale is not None and isinstance(scale.value, str) and parse_scale(scale.value) is None:
        cx.report(
            "E102", scale.value_span, f"a judge's scale is LOW..HIGH with LOW below HIGH (as 1..5), not {scale.value!r}"
        )
    if prompt is None:
        cx.report(
            "E101", metric.span, f"judge '{metric.name}' has no rubric", help="add `prompt = PARAM`, a frozen param"
        )
        return
    if not isinstance(prompt.value, str):
        return
    param = cx.params.get(prompt.value)
    if param is None:
        cx.report(
            "E022", prompt.value_span, f"undefined param '{prompt.value}'", help=suggestion(prompt.value, cx.params)
        )
        return
    if not param.frozen:
        cx.report(
            "E103",
            param.span,
            f"param '{param.name}' is the rubric of judge '{metric.name}', so it must be frozen",
            help=f"write `frozen param {param.name} = ...`: sbpc does not optimize the metric it optimizes against",
            notes=[Note(prompt.value_span, "used as a rubric here")],
        )
    if "{" in param.text:
        allowed = frozenset([*(i.name for i in cx.p.inputs), "output", "expected"])

        def misuse(name: str) -> str:
            return f"rubric '{param.name}' uses '{name}'; a rubric may use the inputs, output and expected"

        template_variables(cx, param.text, param.literal, allowed, ("E104", misuse), what=f" in param '{param.name}'")


def warn_format_in_trainable(cx: Context) -> None:
    """The options of a choice output named only in a trainable param: one rewrite can drop them, and
    every answer after it is unreadable (the gate then rejects the step with nothing to show why)."""
    output = cx.output
    uses = cx.node_params.get(output.name) if output is not None else None
    if output is None or uses is None or not (labels := labels_of(output.type)):
        return
    params = [cx.params[name] for name in dict.fromkeys(uses.instruction + uses.system)]
    system = system_source(cx.p, output) or ""

    def names_every_option(text: str) -> bool:
        return all(re.search(rf"(?<!\w){re.escape(option)}(?!\w)", text) for option in labels)

    stable = [template_source(cx.p, output), system, *(p.text for p in params if p.frozen)]
    if any(names_every_option(text) for text in stable):
        return
    param = next((p for p in params if not p.frozen and names_every_option(p.text)), None)
    if param is not None:
        cx.report(
            "W007",
            param.span,
            f"param '{param.name}' is the only place that says how to answer ({', '.join(labels)}), "
            "and the optimizer may rewrite that away",
            help="state the answer format in the node's template, or in a frozen param the template uses",
        )
