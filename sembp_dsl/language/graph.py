"""Checked IR -> executable graph: the boundary the runtime and the optimizer build on.

A `Graph` is immutable; an optimizer step makes a new one with `with_prompts`.
Templates are compiled once per distinct source, so a template shared by a thousand
nodes costs one compilation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from . import ir
from .checker import MODEL_ROLES, check, template_source
from .diagnostics import Diagnostic, PipelineError
from .method import Method
from .templates import BUILTIN, builtin_source, compile_template, variables


def max_chars(old: str) -> int:
    """The length limit of a candidate prompt: room to grow, but not a runaway reply."""
    return max(800, 3 * len(old))


DEFAULT_MODEL_SETTINGS: Mapping[str, ir.Value] = MappingProxyType({"temperature": 0})
# Backward and optimizer replies are a few lines; without a bound a small model can ramble for minutes.
DEFAULT_ROLE_SETTINGS: Mapping[str, Mapping[str, ir.Value]] = MappingProxyType(
    {
        "backward": {"max_tokens": 512},
        "optimizer": {"max_tokens": 1024},
    }
)


def label(name: str) -> str:
    """`job_title` -> `Job title`: how an input is shown to a model by default."""
    return name.replace("_", " ").capitalize()


def describe(names: Sequence[str], values: Mapping[str, str]) -> str:
    """One `Label: value` line per name: how inputs are shown to backward and optimizer models."""
    return "\n".join(f"{label(name)}: {values[name]}" for name in names) or "(none)"


@dataclass(frozen=True)
class ModelSpec:
    role: str
    name: str | None  # None: choose at run time (the embedded model, or a command-line flag)
    settings: Mapping[str, ir.Value]


@dataclass(frozen=True)
class GraphNode:
    name: str
    type: ir.OutputType
    param: str | None  # prompt parameter rendered as {{ prompt }}
    template: str  # Jinja2 source
    parse: str  # "reply" | "tag"
    inputs: tuple[str, ...]  # every predecessor, in edge order
    hints: tuple[str, ...]  # predecessors that are nodes: they receive gradients, "Hint k" is hints[k-1]
    context: tuple[str, ...]  # predecessors that are pipeline inputs
    successors: tuple[str, ...]

    def render(self, values: Mapping[str, str], prompts: Mapping[str, str]) -> str:
        """The forward prompt, given the values of this node's inputs."""
        variables: dict[str, object] = {name: values[name] for name in self.inputs}
        variables["inputs"] = [(label(name), values[name]) for name in self.inputs]
        variables["prompt"] = self.instruction(values, prompts)
        return compile_template(self.template).render(variables).strip()

    def instruction(self, values: Mapping[str, str], prompts: Mapping[str, str]) -> str:
        """This node's prompt parameter, rendered: a prompt may use the node's inputs ("Judge {{ party }}'s claim")."""
        text = prompts.get(self.param, "") if self.param else ""
        return compile_template(text).render({name: values[name] for name in self.inputs}) if "{" in text else text


@dataclass(frozen=True)
class Graph:
    pipeline: ir.Pipeline = field(repr=False)
    nodes: Mapping[str, GraphNode]  # in topological order
    output: str
    inputs: tuple[ir.Input, ...]
    prompts: Mapping[str, str]  # current text of every prompt parameter
    trainable: tuple[str, ...]  # params the optimizer may change (not frozen, used by a node), in declaration order
    metric: str
    answer_field: str | None
    models: Mapping[str, ModelSpec]
    optimize: Method  # the `optimize` block, sbpc's defaults where it says nothing
    builtins: Mapping[str, str]  # sources of the loss, backward and optimizer templates
    warnings: tuple[Diagnostic, ...] = field(default=(), compare=False)

    @property
    def task(self) -> str:
        return self.pipeline.description or self.pipeline.name

    def with_prompts(self, prompts: Mapping[str, str]) -> Graph:
        return replace(self, prompts=MappingProxyType({**self.prompts, **prompts}))

    def render_builtin(self, name: str, **values) -> str:
        return compile_template(self.builtins[name]).render(task=self.task, **values).strip()

    @property
    def limits_length(self) -> bool:
        """Whether candidates have a length limit: only when the optimizer prompt tells the model the limit.
        The built-in one does; an overriding one (the paper's wording) that never names `max_chars` is
        not held to a rule it never stated."""
        return "max_chars" in variables(self.builtins["optimizer"])

    def backward_questions(
        self, node: GraphNode, values: Mapping[str, str], output: str, feedback: str, sibling: bool
    ) -> list[tuple[tuple[str, ...], str]]:
        """A node's backward prompts, each with the predecessors its "Hint k" lines go to:
        one showing all hints side by side, or (no sibling) one per hint."""
        hints = [{"name": h, "value": values[h]} for h in node.hints]
        question = dict(
            node=node.name,
            prompt=node.instruction(values, self.prompts),
            context=describe(node.context, values),
            output=output,
            feedback=feedback,
        )
        if sibling:
            return [(node.hints, self.render_builtin("backward", hints=hints, **question))]
        return [((h["name"],), self.render_builtin("backward_no_sibling", hints=[h], **question)) for h in hints]

    def users(self, param: str) -> tuple[GraphNode, ...]:
        return tuple(n for n in self.nodes.values() if n.param == param)


def model_specs(pipeline: ir.Pipeline) -> dict[str, ModelSpec]:
    """Each role's model: the built-in defaults, then unnamed model blocks, then the role's own, key by key."""
    shared = {s.key: s.value for b in pipeline.blocks if b.kind == "model" and b.name is None for s in b.settings}
    models = {}
    for role in MODEL_ROLES:
        own = {s.key: s.value for b in pipeline.blocks if b.kind == "model" and b.name == role for s in b.settings}
        settings = {**DEFAULT_MODEL_SETTINGS, **DEFAULT_ROLE_SETTINGS.get(role, {}), **shared, **own}
        name = settings.pop("name", None)
        models[role] = ModelSpec(role, str(name) if name is not None else None, MappingProxyType(settings))
    return models


def build(pipeline: ir.Pipeline) -> Graph:
    """Check and compile; raise PipelineError carrying every diagnostic when there are errors."""
    with ir.gc_paused():
        return _build(pipeline)


def _build(pipeline: ir.Pipeline) -> Graph:
    analysis, diagnostics = check(pipeline)
    if any(d.severity == "error" for d in diagnostics):
        raise PipelineError(diagnostics, pipeline.text)
    declared = {n.name: n for n in pipeline.nodes}
    input_names = {i.name for i in pipeline.inputs}
    nodes = {}
    split: dict[int, tuple] = {}  # nodes fed by one edge statement share their inputs: split them once
    for name in analysis.order:
        node = declared[name]
        preds = analysis.predecessors[name]
        prompt, parse = node.setting("prompt"), node.setting("parse")
        source = template_source(pipeline, node)
        compile_template(source)
        if id(preds) not in split:
            split[id(preds)] = (
                tuple(p for p in preds if p not in input_names),
                tuple(p for p in preds if p in input_names),
            )
        hints, context = split[id(preds)]
        nodes[name] = GraphNode(
            name=name,
            type=node.type,
            param=str(prompt.value) if prompt else None,
            template=source,
            parse=str(parse.value) if parse else "reply",
            inputs=preds,
            hints=hints,
            context=context,
            successors=analysis.successors[name],
        )
    used = {n.param for n in nodes.values()}
    overrides = {t.name: t.text for t in pipeline.templates if t.name in BUILTIN}
    output = pipeline.outputs[0]
    return Graph(
        pipeline=pipeline,
        nodes=MappingProxyType(nodes),
        output=output.node.name,
        inputs=pipeline.inputs,
        prompts=MappingProxyType({p.name: p.text for p in pipeline.params}),
        trainable=tuple(p.name for p in pipeline.params if not p.frozen and p.name in used),
        metric=analysis.metric,
        answer_field=output.field,
        models=MappingProxyType(model_specs(pipeline)),
        optimize=Method().changed(
            {s.key: s.value for b in pipeline.blocks if b.kind == "optimize" for s in b.settings}
        ),
        builtins=MappingProxyType(
            {name: overrides[name] if name in overrides else builtin_source(name) for name in BUILTIN}
        ),
        warnings=tuple(diagnostics),
    )
