"""Branches: edges that feed their targets only when a condition holds (`triage -> hard when triage == "Yes"`).

One rule decides whether a node runs, and both the checker (over every combination of the deciding values) and
the runtime (over a sample's values) ask it: a node with conditional in-edges runs when one of them is live
(every source of it ran, its condition's value among them, and the condition holds); a node without runs when it
has no predecessor node or one of them ran (a merge after a branch runs after whichever side ran). A node that does not run is not taken: no call, and its successors skip
too unless another path reaches them. The output is the first of `output easy | hard` that ran.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .. import ir
from ..diagnostics import Note, suggestion
from .maps import value_type
from .outputs import field_of, fields_of, labels_of

MAX_COMBINATIONS = 4096  # deciding values checked together; past it the path checks are skipped, not guessed
OTHER = "\x00other"  # a free field's value that is none of the options its conditions name


@dataclass(frozen=True)
class Gate:
    """One conditional edge statement, as it feeds one target: its sources and its condition."""

    sources: tuple[str, ...]
    subject: str
    field: str | None
    negated: bool
    option: str

    def holds(self, value: str | None) -> bool:
        """Whether the condition holds of its value (a value that could not be read satisfies neither side)."""
        return value is not None and (value == self.option) != self.negated

    def live(self, taken: Callable[[str], bool], value: Callable[[str, str | None], str | None]) -> bool:
        return all(taken(s) for s in self.sources) and self.holds(value(self.subject, self.field))

    def __str__(self) -> str:
        name = self.subject + (f".{self.field}" if self.field else "")
        return f"{name} {'!=' if self.negated else '=='} {self.option}"


def runs(
    gates: Sequence[Gate],
    feeders: Sequence[str],
    taken: Callable[[str], bool],
    value: Callable[[str, str | None], str | None],
) -> bool:
    """Whether a node runs, given its gates, the nodes feeding it, which nodes ran and their values."""
    if gates:
        return any(gate.live(taken, value) for gate in gates)
    return not feeders or any(taken(name) for name in feeders)


def gates_of(pipeline: ir.Pipeline) -> dict[str, tuple[Gate, ...]]:
    """Every node's gates, by node (a node fed by no conditional edge has none)."""
    gates: dict[str, list[Gate]] = {}
    for edge in pipeline.edges:
        condition = edge.condition
        if condition is None:
            continue
        field = condition.field.name if condition.field else None
        gate = Gate(
            tuple(r.name for r in edge.sources), condition.subject.name, field, condition.negated, condition.option
        )
        for target in edge.targets:
            gates.setdefault(target.name, []).append(gate)
    return {name: tuple(found) for name, found in gates.items()}


def record_value(output: str | None, field: str | None) -> str | None:
    """The value a condition reads: a choice as it is, a record's field (as text) from its JSON."""
    if output is None or field is None:
        return output
    try:
        value = json.loads(output).get(field)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) or value is None else json.dumps(value, ensure_ascii=False)


class Checking(Protocol):
    """What these checks read and report through: the checker's Context."""

    @property
    def p(self) -> ir.Pipeline: ...

    @property
    def nodes(self) -> Mapping[str, ir.Input | ir.Node]: ...

    def report(
        self, code: str, span: ir.Span | None, message: str, help: str = "", notes: Sequence[Note] = ()
    ) -> None: ...


def check_conditions(cx: Checking) -> dict[tuple[str, str | None], tuple[str, ...]] | None:
    """Each condition names a source of its edge whose value is a choice or a record's field, and an option it
    has (E120-E122). What each deciding value may be, by (subject, field): its options (none: a free field's
    value); None when a condition was refused, and so no path can be judged."""
    deciding: dict[tuple[str, str | None], tuple[str, ...]] = {}
    refused = False
    for edge in cx.p.edges:
        condition = edge.condition
        if condition is None:
            continue
        options = condition_options(cx, condition) if fed_by_subject(cx, edge, condition) else None
        if options is None:
            refused = True
            continue
        key = (condition.subject.name, condition.field.name if condition.field else None)
        deciding[key] = options
        if options and condition.option not in options:
            refused = True
            cx.report(
                "E122",
                condition.span,
                f"'{key[0]}{'.' + key[1] if key[1] else ''}' has no option '{condition.option}'",
                help=suggestion(condition.option, options) or f"its options are {', '.join(options)}",
            )
    return None if refused else deciding


def fed_by_subject(cx: Checking, edge: ir.Edge, condition: ir.Condition) -> bool:
    """Whether the condition's value is a source of its edge (E121 when not)."""
    subject = condition.subject
    if any(ref.name == subject.name for ref in edge.sources):
        return subject.name in cx.nodes
    help = f"add it to the sources: `{subject.name}, {', '.join(r.name for r in edge.sources)} -> ...`"
    if subject.name not in cx.nodes:
        help = suggestion(subject.name, cx.nodes) or help
    cx.report("E121", subject.span, f"the condition reads '{subject.name}', which is not a source of its edge", help)
    return False


def condition_options(cx: Checking, condition: ir.Condition) -> tuple[str, ...] | None:
    """A choice's options, a record field's (a field that is not a choice: empty, any value), or None after
    reporting a value a condition cannot read (E120, E076)."""
    name = condition.subject.name
    type_ = cx.nodes[name].type
    if condition.field is None:
        if labels := labels_of(type_):
            return labels
        help = "branch on a choice (`choice(Yes, No)`) or a record's field (`when review.decision == send`)"
        cx.report("E120", condition.subject.span, f"'{name}' is {type_}: a condition reads a choice or a field", help)
        return None
    if not fields_of(type_):
        cx.report("E120", condition.field.span, f"'{name}' is {type_}, not a record: it has no field to branch on")
        return None
    found = field_of(type_, condition.field.name)
    if found is None:
        fields = [f.name for f in fields_of(type_)]
        help = suggestion(condition.field.name, fields) or f"its fields are {', '.join(fields)}"
        cx.report("E076", condition.field.span, f"node '{name}' has no field '{condition.field.name}'", help=help)
        return None
    return labels_of(found.type)


def check_output_alternatives(cx: Checking, output: ir.Output) -> None:
    """Each alternative of `output a | b` is a node of the first one's type (E026, E124)."""
    first = cx.nodes.get(output.node.name)
    for ref in output.alternatives:
        other = cx.nodes.get(ref.name)
        if not isinstance(other, ir.Node):
            cx.report(
                "E026",
                ref.span,
                f"undefined node '{ref.name}'",
                help=suggestion(ref.name, [n.name for n in cx.p.nodes]),
            )
        elif isinstance(first, ir.Node) and value_type(other) != value_type(first):  # a mapped node's: a list
            message = f"'{ref.name}' is {value_type(other)}, but the output '{first.name}' is {value_type(first)}"
            cx.report("E124", ref.span, message, help="every node the output may come from has the output's type")


def check_paths(
    cx: Checking,
    order: Sequence[str],
    predecessors: Mapping[str, tuple[str, ...]],
    deciding: Mapping[tuple[str, str | None], tuple[str, ...]] | None,
) -> None:
    """Over every combination of the deciding values: a node that never runs (W020), and combinations where no
    node the output may come from runs (E123)."""
    if not deciding or not cx.p.outputs:
        return
    values = {key: options or (*mentioned(cx.p, key), OTHER) for key, options in deciding.items()}
    if prod(len(v) for v in values.values()) > MAX_COMBINATIONS:
        return
    gates = gates_of(cx.p)
    feeders = {
        name: tuple(p for p in predecessors.get(name, ()) if isinstance(cx.nodes.get(p), ir.Node)) for name in order
    }
    candidates = [ref.name for ref in cx.p.outputs[0].candidates]
    ever: set[str] = set()
    missing: list[dict] = []
    for chosen in combinations(values):
        ran = taken_under(order, gates, feeders, chosen)
        ever |= ran
        if not any(name in ran for name in candidates):
            missing.append(chosen)
    report_paths(cx, order, ever, missing, candidates)


def report_paths(
    cx: Checking, order: Sequence[str], ever: set[str], missing: list[dict], candidates: list[str]
) -> None:
    for name in order:
        node = cx.nodes[name]
        if name not in ever:
            cx.report("W020", node.span, f"node '{name}' never runs: no values of the conditions lead to it")
    if missing:
        cases = "; ".join(describe_case(case) for case in missing[:4]) + ("; ..." if len(missing) > 4 else "")
        output = cx.p.outputs[0]
        cx.report(
            "E123",
            output.span,
            f"the output may be missing: none of {', '.join(candidates)} runs when {cases}",
            help="add the node that runs then as an alternative (`output easy | hard`), or a branch for that case",
        )


def describe_case(case: Mapping[tuple[str, str | None], str]) -> str:
    """`triage is No`, `review.decision is another value`, joined by `and`."""
    parts = []
    for (subject, field), value in case.items():
        name = subject + (f".{field}" if field else "")
        parts.append(f"{name} is {'another value' if value == OTHER else value}")
    return " and ".join(parts)


def mentioned(pipeline: ir.Pipeline, key: tuple[str, str | None]) -> tuple[str, ...]:
    """The options the conditions on a free value name."""
    found = []
    for edge in pipeline.edges:
        c = edge.condition
        if c is not None and (c.subject.name, c.field.name if c.field else None) == key:
            found.append(c.option)
    return tuple(dict.fromkeys(found))


def prod(sizes: Iterator[int]) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


def combinations(values: Mapping[tuple[str, str | None], tuple[str, ...]]) -> Iterator[dict]:
    keys = list(values)
    for chosen in itertools.product(*(values[k] for k in keys)):
        yield dict(zip(keys, chosen))


def taken_under(
    order: Sequence[str],
    gates: Mapping[str, tuple[Gate, ...]],
    feeders: Mapping[str, tuple[str, ...]],
    chosen: Mapping[tuple[str, str | None], str],
) -> set[str]:
    """The nodes that run when the deciding values are `chosen` (an input always has its value)."""
    ran: set[str] = set()

    def taken(name: str) -> bool:
        return name in ran or name not in feeders

    def value(subject: str, field: str | None) -> str | None:
        return chosen.get((subject, field))

    for name in order:
        if runs(gates.get(name, ()), feeders[name], taken, value):
            ran.add(name)
    return ran
