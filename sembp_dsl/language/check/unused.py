"""What nothing uses (params, templates, inputs, nodes that cannot reach the output), and an output no input
reaches."""

from __future__ import annotations

from ..nodes.templates import BUILTIN
from .context import Context
from .templates import names_read, system_source, template_source


def warn_unused(cx: Context) -> None:
    """Params, templates and inputs no node uses, and nodes that cannot reach the output."""
    predecessors, successors, output = cx.predecessors, cx.successors, cx.output
    warn_unused_params(cx)
    used_templates = {str(s.value) for n in cx.p.nodes for key in ("template", "system") if (s := n.setting(key))}
    for template in cx.p.templates:
        if template.name not in used_templates and template.name not in BUILTIN:
            cx.report("W002", template.span, f"template '{template.name}' is not used by any node")
    for item in cx.p.inputs:
        if not successors.get(item.name):
            cx.report("W003", item.span, f"input '{item.name}' is not used by any node")
    if output is not None:
        reaches = set().union(*(reaching(ref.name, predecessors) for ref in cx.p.outputs[0].candidates))
        for node in cx.p.nodes:
            if node.name not in reaches:
                cx.report("W004", node.span, f"node '{node.name}' cannot reach the output '{output.name}'")


def check_output_fed(cx: Context) -> None:
    """E162: an output no input reaches, through any path: every sample would send the same prompts and get the
    same answer, so no score could say anything. Named with an edge that would feed it."""
    predecessors, output = cx.predecessors, cx.output
    if output is None or not cx.p.inputs or any(d.severity == "error" for d in cx.diagnostics):
        return  # the graph's own errors first: an undefined name in an edge would look like a missing edge
    reaches = set().union(*(reaching(ref.name, predecessors) for ref in cx.p.outputs[0].candidates))
    if any(item.name in reaches for item in cx.p.inputs):
        return
    first = next((n.name for n in cx.p.nodes if n.name in reaches and not predecessors.get(n.name)), output.name)
    cx.report(
        "E162",
        cx.p.outputs[0].span,
        f"output '{output.name}' depends on no input: every sample would be sent the same prompts",
        help=f"add the edge that feeds it, e.g. `{cx.p.inputs[0].name} -> {first}`",
    )


def warn_unused_params(cx: Context) -> None:
    used = {str(s.value) for n in cx.p.nodes for key in ("prompt", "system", "demos") if (s := n.setting(key))}
    used.update(str(s.value) for m in cx.p.metric_defs if (s := m.setting("prompt")))  # rubrics
    used.update(name for uses in cx.node_params.values() for name in uses.instruction + uses.system)
    for node in cx.p.nodes:  # a node left unchecked may still name params: no warning that would only guess
        if node.name not in cx.node_params:
            used.update(names_read(template_source(cx.p, node)) | names_read(system_source(cx.p, node) or ""))
    for param in cx.p.params:
        if param.name not in used:
            cx.report("W001", param.span, f"param '{param.name}' is not used by any node")


def reaching(output: str, predecessors) -> set[str]:
    """The output and every node and input it is reached from."""
    reaches, stack, walked = {output}, [output], set()
    while stack:
        preds = predecessors.get(stack.pop(), ())
        if id(preds) in walked:  # a tuple shared by the targets of one statement: walk it once
            continue
        walked.add(id(preds))
        for pred in preds:
            if pred not in reaches:
                reaches.add(pred)
                stack.append(pred)
    return reaches
