"""Checked IR -> executable graph: the boundary the runtime and the optimizer build on.

A `Graph` is immutable; an optimizer step makes a new one with `with_prompts`.
Templates are compiled once per distinct source, so a template shared by a thousand
nodes costs one compilation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

from .. import ir
from ..blocks.data import DataSpec, data_spec
from ..blocks.method import SIZES, Method
from ..check.checker import check
from ..check.context import MODEL_ROLES, Analysis
from ..check.templates import system_source, template_source
from ..diagnostics import Diagnostic, PipelineError
from ..kinds import kind_of
from ..nodes.branches import gates_of
from ..nodes.demos import as_text, examples, limit
from ..nodes.maps import each_of
from ..nodes.metrics import parse_scale
from ..nodes.node import NO_RECORDS, GraphNode, model_param
from ..nodes.outputs import field_of, fields_of
from ..nodes.shapes import SENTENCE, Field, Shape, prompt_shape
from ..nodes.templates import BUILTIN, builtin_source, compile_template, label, variables


def max_chars(old: str) -> int:
    """The length limit of a candidate prompt: room to grow, but not a runaway reply."""
    return max(800, 3 * len(old))


def max_sentences(old: str) -> int:
    """The most sentences a candidate prompt may have: one more than the old one has (at least two), room to add
    a point. More sentences split the grammar's length bound thinner, and a small model that runs on in one
    sentence meets its share of the bound (a cut-off candidate) sooner."""
    return max(2, len(SENTENCE.findall(old)) + 1)


DEFAULT_MODEL_SETTINGS: Mapping[str, ir.Value] = MappingProxyType({"temperature": 0})
# Backward and optimizer replies are a few lines; without a bound a small model can ramble for minutes.
DEFAULT_ROLE_SETTINGS: Mapping[str, Mapping[str, ir.Value]] = MappingProxyType(
    {
        "backward": {"max_tokens": 512},
        "optimizer": {"max_tokens": 1024},
    }
)


def describe(names: Sequence[str], values: Mapping[str, str]) -> str:
    """One `Label: value` line per name: how inputs are shown to backward and optimizer models."""
    return "\n".join(f"{label(name)}: {values[name]}" for name in names) or "(none)"


@dataclass(frozen=True)
class ModelSpec:
    role: str  # the role it serves (forward, backward, optimizer), or the name of a named model (`model fast`)
    name: str | None  # None: choose at run time (the embedded model, or a command-line flag)
    settings: Mapping[str, ir.Value]


NO_FUNCTIONS: Mapping[str, Callable] = MappingProxyType({})


@dataclass(frozen=True)
class MetricSpec:
    """A metric the file defines, checked: a judge (its rubric param, the model it asks, its scale) or a Python
    function (`module:function`, imported only when a run scores with it)."""

    name: str
    kind: str  # "judge" | "function"
    function: str | None = None
    rubric: str | None = None  # the judge's param
    model: str = "forward"  # the judge's model: a role or a named model
    scale: tuple[float, float] = (0.0, 1.0)

    @property
    def scale_text(self) -> str:
        """`1..5`, as the file writes it."""
        return "..".join(str(int(v)) if v == int(v) else str(v) for v in self.scale)

    @staticmethod
    def of(metric: ir.MetricDef) -> MetricSpec:
        if metric.function is not None:
            return MetricSpec(metric.name, "function", function=metric.function)
        prompt, model, scale = metric.setting("prompt"), metric.setting("model"), metric.setting("scale")
        return MetricSpec(
            metric.name,
            "judge",
            rubric=str(prompt.value) if prompt else None,
            model=str(model.value) if model else "forward",
            scale=(parse_scale(str(scale.value)) if scale else None) or (0.0, 1.0),
        )


@dataclass(frozen=True)
class DemosParam:
    """A demos param and the node it shows examples to (and learns them from)."""

    name: str
    node: str
    max: int  # the most examples the optimizer may pick
    frozen: bool


@dataclass(frozen=True)
class Graph:
    pipeline: ir.Pipeline = field(repr=False)
    nodes: Mapping[str, GraphNode]  # in topological order
    output: str
    inputs: tuple[ir.Input, ...]
    prompts: Mapping[str, str]  # current text of every prompt parameter
    trainable: tuple[str, ...]  # params the optimizer may change (not frozen, used by a node), in declaration order
    metric: str  # the metric scored: a built-in's name or one of `metrics`
    answer_field: str | None
    models: Mapping[str, ModelSpec]  # the roles, then the named models, by name
    optimize: Method  # the `optimize` block, sbpc's defaults where it says nothing
    builtins: Mapping[str, str]  # sources of the loss, backward and optimizer templates
    warnings: tuple[Diagnostic, ...] = field(default=(), compare=False)
    output_field: str | None = None  # the field scored, of a record output (`output judge.verdict`)
    # the callables of function nodes, by declared name: bound at run time (runtime/code.py), never by compiling
    functions: Mapping[str, Callable] = field(default_factory=lambda: NO_FUNCTIONS, compare=False)
    # the demos params nodes use; their values in `prompts` are their examples as JSON text (demos.as_text)
    demos: Mapping[str, DemosParam] = field(default_factory=lambda: MappingProxyType({}))
    metrics: Mapping[str, MetricSpec] = field(default_factory=lambda: MappingProxyType({}))  # the file's own
    alternatives: tuple[str, ...] = ()  # `output easy | hard`: nodes the output comes from when `output` did not run
    data: DataSpec | None = None  # the data block's file, which a run reads when not given another

    @property
    def task(self) -> str:
        return self.pipeline.description or self.pipeline.name

    @property
    def output_type(self) -> ir.OutputType:
        """The type of what is scored: the output node's, or that of its field."""
        node = self.nodes[self.output]
        return field_of(node.type, self.output_field).type if self.output_field else node.type  # type: ignore[union-attr]

    @property
    def sizes_given(self) -> frozenset[str]:
        """The split sizes the file asks for (its optimize block's and data block's), which a run never scales to fit
        a small file as it does sbpc's defaults."""
        named = {s.key for b in self.pipeline.blocks if b.kind == "optimize" for s in b.settings}
        return frozenset((named | set(self.data.method if self.data else ())) & set(SIZES))

    @property
    def trainable_demos(self) -> tuple[str, ...]:
        """The demos params the optimizer fills (not frozen), in declaration order."""
        return tuple(name for name, d in self.demos.items() if not d.frozen)

    def with_prompts(self, prompts: Mapping[str, str]) -> Graph:
        """The graph with these params' values; a node's model param (`model_param`) moves the node's calls."""
        moved = {name: prompts[model_param(name)] for name in self.nodes if model_param(name) in prompts}
        nodes = {name: replace(node, model=moved[name]) if name in moved else node for name, node in self.nodes.items()}
        return replace(self, prompts=MappingProxyType({**self.prompts, **prompts}), nodes=MappingProxyType(nodes))

    def with_functions(self, functions: Mapping[str, Callable]) -> Graph:
        return replace(self, functions=MappingProxyType(dict(functions)))

    @property
    def model_nodes(self) -> tuple[GraphNode, ...]:
        """The nodes that call a model (their kind says so), in topological order."""
        return tuple(node for node in self.nodes.values() if kind_of(node).model_calls(node))

    @property
    def outputs(self) -> tuple[str, ...]:
        """The nodes the output may come from, the first that ran giving it."""
        return (self.output, *self.alternatives)

    def type_of(self, name: str) -> ir.OutputType:
        """The type of a node's value (a mapped node's: the list of its runs') or of a pipeline input."""
        node = self.nodes.get(name)
        if node is None:
            return next(i.type for i in self.inputs if i.name == name)
        return ir.OutputType("list", item=node.type, span=node.type.span) if node.each is not None else node.type

    def render_builtin(self, name: str, **values) -> str:
        return compile_template(self.builtins[name]).render(task=self.task, **values).strip()

    def optimizer_prompt(
        self,
        param: str,
        node: str,
        examples: Sequence[Mapping[str, str]],
        tool: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        """What the optimizer model is asked for a new `param`, from what its node `node` did on `examples`.
        `tool`: the tool `param` describes, when it describes one; `tools`: the tools whose descriptions the same
        call proposes (learning/descent.py `tool_shown` says what each holds)."""
        old = self.prompts[param]
        return self.render_builtin(
            "optimizer",
            node=node,
            param=param,
            prompt=old,
            examples=examples,
            max_chars=max_chars(old),
            max_sentences=max_sentences(old),
            tool=tool,
            tools=list(tools),
        )

    def stated(self, name: str) -> frozenset[str]:
        """The variables a built-in template (or the file's override of it) uses."""
        return variables(self.builtins[name])

    def candidate_shape(self, param: str, tools: Sequence[Mapping[str, Any]] = ()) -> Shape:
        """The shape of the optimizer's reply for `param` (and the descriptions of `tools` after it), held to the
        limits its prompt states, and no other: an overriding prompt (the paper's wording) that never names
        `max_chars` or `max_sentences` is not held to a rule it never stated."""
        stated, old = self.stated("optimizer"), self.prompts[param]
        shape = prompt_shape(
            max_chars(old) if "max_chars" in stated else None,
            max_sentences(old) if "max_sentences" in stated else None,
        )
        if not tools:
            return shape
        parts = list(shape.parts)
        for tool in tools:
            cap = tool["max_chars"] if "max_chars" in stated else None
            parts += [f'\n<tool name="{tool["name"]}">', Field(f"tool_{tool['name']}", "text", cap=cap), "</tool>"]
        return Shape("<prompt> block and tool descriptions", tuple(parts))

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
            prompt=kind_of(node).instruction(node, self, values),
            system=node.system_message(values, self.prompts),
            context=describe(node.context, values),
            output=output,
            feedback=feedback,
        )
        if sibling:
            return [(node.hints, self.render_builtin("backward", hints=hints, **question))]
        return [((h["name"],), self.render_builtin("backward_no_sibling", hints=[h], **question)) for h in hints]

    def judge_question(
        self, spec: MetricSpec, inputs: Mapping[str, str], output: str, expected: str, fields: str = ""
    ) -> str:
        """What a judge is asked about one answer: the task, its scale, its rubric (rendered with the inputs,
        `output` and `expected`), the inputs, the output and the reference answer; `fields`: its reply's fields in
        words, for a model no JSON Schema reaches."""
        rubric = self.prompts.get(spec.rubric or "", "")
        if "{" in rubric:
            rubric = compile_template(rubric).render({**inputs, "output": output, "expected": expected})
        low, high = spec.scale_text.split("..")
        return (
            compile_template(builtin_source("judge"))
            .render(
                task=self.task,
                inputs=describe([i.name for i in self.inputs], inputs),
                output=output,
                expected=expected,
                rubric=rubric.strip(),
                low=low,
                high=high,
                fields=fields,
            )
            .strip()
        )

    def users(self, param: str) -> tuple[GraphNode, ...]:
        """The nodes that use a param, in topological order."""
        return self._users.get(param, ())

    @cached_property
    def _users(self) -> dict[str, tuple[GraphNode, ...]]:
        users: dict[str, list[GraphNode]] = {}
        for node in self.nodes.values():
            for param in node.params:
                users.setdefault(param, []).append(node)
        return {param: tuple(nodes) for param, nodes in users.items()}


def model_specs(pipeline: ir.Pipeline) -> dict[str, ModelSpec]:
    """Each role's model and each named model's: built-in defaults, then the unnamed `model { }` blocks,
    then the blocks of its own name, key by key."""
    blocks = [b for b in pipeline.blocks if b.kind == "model"]
    shared = {s.key: s.value for b in blocks if b.name is None for s in b.settings}
    models = {}
    for key in dict.fromkeys([*MODEL_ROLES, *(b.name for b in blocks if b.name)]):
        own = {s.key: s.value for b in blocks if b.name == key for s in b.settings}
        settings = {**DEFAULT_MODEL_SETTINGS, **DEFAULT_ROLE_SETTINGS.get(key, {}), **shared, **own}
        name = settings.pop("name", None)
        models[key] = ModelSpec(key, str(name) if name is not None else None, MappingProxyType(settings))
    return models


def method_of(pipeline: ir.Pipeline, data: DataSpec | None) -> Method:
    """The `optimize` block's method, with the sizes and seed the data block gives; sbpc's defaults for the rest."""
    settings = {s.key: s.value for b in pipeline.blocks if b.kind == "optimize" for s in b.settings}
    return Method().changed(settings | dict(data.method if data else {}))


def build(pipeline: ir.Pipeline) -> Graph:
    """Check and compile; raise PipelineError carrying every diagnostic when there are errors."""
    with ir.gc_paused():
        return _build(pipeline)


def _build(pipeline: ir.Pipeline) -> Graph:
    analysis, diagnostics = check(pipeline)
    if any(d.severity == "error" for d in diagnostics):
        raise PipelineError(diagnostics, pipeline.text)
    used = {param for uses in analysis.params.values() for param in uses.instruction + uses.system}
    overrides = {t.name: t.text for t in pipeline.templates if t.name in BUILTIN}
    output, data = pipeline.outputs[0], data_spec(pipeline)
    return Graph(
        pipeline=pipeline,
        nodes=MappingProxyType(graph_nodes(pipeline, analysis)),
        output=output.node.name,
        inputs=pipeline.inputs,
        prompts=MappingProxyType({p.name: as_text(examples(p)) if p.is_demos else p.text for p in pipeline.params}),
        trainable=tuple(p.name for p in pipeline.params if not p.frozen and p.name in used),
        metric=analysis.metric,
        answer_field=output.field,
        models=MappingProxyType(model_specs(pipeline)),
        optimize=method_of(pipeline, data),
        builtins=MappingProxyType(
            {name: overrides[name] if name in overrides else builtin_source(name) for name in BUILTIN}
        ),
        warnings=tuple(diagnostics),
        output_field=output.record_field.name if output.record_field else None,
        demos=MappingProxyType(demos_params(pipeline, analysis.demos)),
        metrics=MappingProxyType({m.name: MetricSpec.of(m) for m in pipeline.metric_defs}),
        alternatives=tuple(ref.name for ref in output.alternatives),
        data=data,
    )


def graph_nodes(pipeline: ir.Pipeline, analysis: Analysis) -> dict[str, GraphNode]:
    """Every node, compiled, in topological order."""
    declared = {n.name: n for n in pipeline.nodes}
    input_names = {i.name for i in pipeline.inputs}
    split: dict[int, tuple] = {}  # nodes fed by one edge statement share their inputs: split them once
    records = {n.name: n.type for n in pipeline.nodes if fields_of(n.type)}
    gates = gates_of(pipeline)
    nodes = {}
    for name in analysis.order:
        preds = analysis.predecessors[name]
        if id(preds) not in split:
            split[id(preds)] = (
                tuple(p for p in preds if p not in input_names),
                tuple(p for p in preds if p in input_names),
            )
        hints, context = split[id(preds)]
        own_records = MappingProxyType({p: records[p] for p in hints if p in records}) if records else NO_RECORDS
        node = graph_node(pipeline, analysis, declared[name], hints, context, own_records)
        nodes[name] = replace(node, gates=gates[name]) if name in gates else node
    return nodes


def graph_node(
    pipeline: ir.Pipeline,
    analysis: Analysis,
    node: ir.Node,
    hints: tuple[str, ...],
    context: tuple[str, ...],
    records: Mapping[str, ir.OutputType],
) -> GraphNode:
    """One node, compiled: its templates, its inputs split into hints and context, and its kind's own settings."""
    prompt, parse, model = node.setting("prompt"), node.setting("parse"), node.setting("model")
    models = node.setting("models")
    source, system = template_source(pipeline, node), system_source(pipeline, node)
    compile_template(source)
    if system is not None:
        compile_template(system)
    uses = analysis.params[node.name]
    kind = kind_of(node)
    return GraphNode(
        name=node.name,
        type=node.type,
        param=str(prompt.value) if prompt else None,
        template=source,
        parse=str(parse.value) if parse else "reply",
        inputs=analysis.predecessors[node.name],
        hints=hints,
        context=context,
        successors=analysis.successors[node.name],
        instructions=uses.instruction,
        system=system,
        system_params=uses.system,
        model=str(model.value) if model else "forward",
        models=tuple(map(str, models.value)) if models and isinstance(models.value, tuple) else (),
        records=records,
        demos=analysis.demos.get(node.name),
        kind=kind.name,
        settings=kind.own(node),
        each=each_of(node),
    )


def demos_params(pipeline: ir.Pipeline, used: Mapping[str, str]) -> dict[str, DemosParam]:
    """Every demos param a node has, by name, in declaration order."""
    node_of = {param: node for node, param in used.items()}
    out = {}
    for param in pipeline.params:
        if param.name in node_of:
            most = limit(param) or len(param.demos or ())  # frozen without a max: as many as it has
            out[param.name] = DemosParam(param.name, node_of[param.name], most, param.frozen)
    return out
