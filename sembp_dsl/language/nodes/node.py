"""A node of the executable graph: what every kind of node is compiled into.

The fields every kind shares (its type, its inputs, where feedback goes) and those of a node that renders a
prompt are fields; what belongs to one kind alone is in `settings`, which that kind reads (language/kinds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .. import ir
from .branches import Gate
from .demos import shown
from .maps import Each
from .shapes import as_record
from .templates import Record, compile_template, label

NO_RECORDS: Mapping[str, ir.OutputType] = MappingProxyType({})
NO_SETTINGS: Mapping[str, ir.Value] = MappingProxyType({})


def model_param(node: str) -> str:
    """The param that holds a node's model when the optimizer may move it (`draft.model`, its value a named
    model): no param can be so named, so it stands beside the prompts in a step, the run record and write-back."""
    return f"{node}.model"


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
    instructions: tuple[str, ...] = ()  # params its instruction is made of: its prompt, those its template names
    system: str | None = None  # Jinja2 source of its system message (`{{ style }}` for a param); None: none
    system_params: tuple[str, ...] = ()  # params its system message names
    model: str = "forward"  # where its calls go: the forward role, or a named model
    models: tuple[str, ...] = ()  # the named models the optimizer may move it to (its own `models` list)
    # predecessors with a record output, and their types (templates read those as records)
    records: Mapping[str, ir.OutputType] = field(default_factory=lambda: NO_RECORDS)
    demos: str | None = None  # its demos param (`demos = shots`): examples of its inputs and output
    kind: str = "model"  # its kind's name in language/kinds' KINDS, which runs it
    settings: Mapping[str, ir.Value] = field(default_factory=lambda: NO_SETTINGS)  # its kind's own (`function`)
    gates: tuple[Gate, ...] = ()  # its conditional in-edges (language/nodes/branches): it runs when one is live
    each: Each | None = None  # its map (language/nodes/maps): it runs once per item of a list

    @property
    def most_runs(self) -> int:
        """How many times one sample may run it: once, or a map's `max_items` (what the plan counts)."""
        return self.each.max_items if self.each is not None else 1

    @property
    def params(self) -> tuple[str, ...]:
        """Every param this node uses: the optimizer gives each one this node's feedback."""
        return tuple(dict.fromkeys(self.instructions + self.system_params))

    def variables(self, values: Mapping[str, str], prompts: Mapping[str, str]) -> dict:
        """What its template and system message read: each input's value (a record output as a record), each
        param it uses, rendered (a param may read the node's inputs: "Judge {{ party }}'s claim"), and `prompt`."""
        variables: dict = {name: values[name] for name in self.inputs}
        if self.each is not None:
            variables[self.each.item] = self.item(values)
        for name, type_ in self.records.items():
            value = values[name]
            variables[name] = value if isinstance(value, Record) else as_record(type_, value)
        inputs = dict(variables)
        for name in self.params:
            text = prompts.get(name, "")
            variables[name] = compile_template(text).render(inputs) if "{" in text else text
        if self.demos is not None:
            variables[self.demos] = shown(prompts.get(self.demos, "[]"))
        variables["prompt"] = variables[self.param] if self.param else ""
        return variables

    def render(self, values: Mapping[str, str], prompts: Mapping[str, str]) -> str:
        """The forward prompt, given the values of this node's inputs (a record output's as its JSON text, or as
        a Record)."""
        variables = self.variables(values, prompts)
        variables["inputs"] = [self.shown_input(name, values) for name in self.inputs]
        return compile_template(self.template).render(variables).strip()

    def item(self, values: Mapping[str, str]) -> str:
        """A mapped node's item: the one its run is on, or, where it is seen whole (asked backward, planned,
        a candidate validated), the list, since the node's output is the list's."""
        assert self.each is not None
        return values.get(self.each.item, values[self.each.over])

    def shown_input(self, name: str, values: Mapping[str, str]) -> tuple[str, str]:
        """An input as the default template lists it: a mapped node's run shows its item in place of the list (the
        whole list when no item is given, as `variables` reads it: a plan's bound)."""
        if self.each is not None and name == self.each.over:
            return label(self.each.item if self.each.item in values else name), self.item(values)
        return label(name), values[name]

    def system_message(self, values: Mapping[str, str], prompts: Mapping[str, str]) -> str | None:
        """The system message sent with the forward prompt; None when the node has none (or it renders empty)."""
        if self.system is None:
            return None
        return compile_template(self.system).render(self.variables(values, prompts)).strip() or None

    def instruction(self, values: Mapping[str, str], prompts: Mapping[str, str]) -> str:
        """What this node is told to do, as the backward model is shown it: its instruction params, rendered."""
        if not self.instructions:
            return ""
        variables = self.variables(values, prompts)
        return "\n\n".join(variables[name] for name in self.instructions)
