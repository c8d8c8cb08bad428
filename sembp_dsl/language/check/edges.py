"""The edges: every name they use defined, each pair declared once, no cycle (Kahn's algorithm; the cycles
reported cover every node on one), and the branches' conditions and paths. What the later passes build on:
predecessors, successors and the order."""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from .. import ir
from ..diagnostics import suggestion
from ..nodes.branches import check_conditions, check_paths
from .context import Context, first_here

MAX_CYCLES_REPORTED = 20
MAX_EDGES = 10_000_000  # pairs, however they are written; a 1,500 x 1,500 statement is 2,250,000


def check_edges(cx: Context) -> None:
    cx.predecessors, cx.successors, cx.statements = read_edges(cx)


def read_edges(cx: Context):
    """Predecessors, successors and the checked statements, each checked as the product it is.

    A target fed by one statement shares that statement's tuple of sources, so a statement of
    n x m names costs n + m, not n * m. A name is reported once per statement, and a node whose
    in-edges are incomplete (or that a misspelt name probably meant) is not checked further.
    """
    pairs = sum(len(edge.sources) * len(edge.targets) for edge in cx.p.edges)
    if pairs > MAX_EDGES:  # the graph itself would not fit: running it means a call per pair and sample
        biggest = max(cx.p.edges, key=lambda e: len(e.sources) * len(e.targets))
        cx.report(
            "E041",
            biggest.sources[0].span,
            f"the edges declare {pairs:,} pairs; a pipeline may have at most {MAX_EDGES:,}",
        )
        return {n.name: () for n in cx.p.nodes}, {n: () for n in cx.nodes}, []
    feeds: dict[str, list[tuple[str, ...]]] = {n.name: [] for n in cx.p.nodes}
    fed: dict[str, list[tuple[str, ...]]] = {n: [] for n in cx.nodes}
    statements: list[Statement] = []
    reported: set[int] = set()
    for edge in cx.p.edges:
        sources = tuple(ref for ref in edge.sources if defined(cx, ref, reported))
        targets = []
        for ref in edge.targets:
            if not defined(cx, ref, reported):
                continue
            if ref.name not in cx.node_names:
                if id(ref) not in reported:
                    cx.report("E025", ref.span, f"'{ref.name}' is an input; edges can only lead into nodes")
                    reported.add(id(ref))
                continue
            targets.append(ref.name)
        if len(sources) < len(edge.sources):
            cx.tainted.update(targets)
        feeding, fed_by_each = distinct(cx, sources, targets), tuple(dict.fromkeys(targets))
        statements.append(Statement(feeding, fed_by_each))
        for target in fed_by_each:
            feeds[target].append(feeding)
        for source in feeding:
            fed[source].append(fed_by_each)
    predecessors = {target: merge(cx, target, groups) for target, groups in feeds.items()}
    successors = {name: join(groups) for name, groups in fed.items()}
    return predecessors, successors, statements


def distinct(cx: Context, sources: tuple[ir.Ref, ...], targets: list[str]) -> tuple[str, ...]:
    """The names of one statement's sources, each once (a repeat is warned about)."""
    names: dict[str, ir.Ref] = {}
    for ref in sources:
        if ref.name in names:
            for target in dict.fromkeys(targets):
                message = f"edge {ref.name} -> {target} is declared twice"
                cx.report("W005", ref.span, message, notes=[first_here(names[ref.name].span)])
        names.setdefault(ref.name, ref)
    return tuple(names)


def defined(cx: Context, ref: ir.Ref, reported: set[int]) -> bool:
    if ref.name in cx.nodes:
        return True
    if id(ref) not in reported:
        reported.add(id(ref))
        hint = suggestion(ref.name, cx.nodes)
        cx.report("E024", ref.span, f"undefined node or input '{ref.name}'", help=hint)
        if hint:  # the node it probably meant lacks this edge: its template errors would be noise
            cx.tainted.add(hint.split("'")[1])
    return False


def merge(cx: Context, target: str, groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The sources feeding `target`, in edge order: the one statement's tuple itself when only one
    feeds it; a pair declared in two statements is warned about."""
    if len(groups) == 1:
        return groups[0]
    seen: dict[str, None] = {}
    for group in groups:
        for name in group:
            if name in seen:
                first = edge_span(cx, name, target, last=False)
                notes = [first_here(first)] if first else []
                cx.report(
                    "W005", edge_span(cx, name, target), f"edge {name} -> {target} is declared twice", notes=notes
                )
            seen[name] = None
    return tuple(seen)


def edge_span(cx: Context, source: str, target: str, last: bool = True) -> ir.Span | None:
    """Where `source -> target` is declared last (for a warning about a repeated edge), or first."""
    for edge in reversed(cx.p.edges) if last else cx.p.edges:
        if any(t.name == target for t in edge.targets):
            ref = next((s for s in edge.sources if s.name == source), None)
            if ref is not None:
                return ref.span
    return None


def join(groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    return groups[0] if len(groups) == 1 else tuple(dict.fromkeys(name for group in groups for name in group))


class Statement(NamedTuple):
    """One edge statement once checked: its distinct defined sources feed each of its node targets."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]


def check_cycles(cx: Context) -> None:
    cx.order = sort(cx, cx.predecessors, cx.statements)


def check_branches(cx: Context) -> None:
    """Each condition, and every path through the branches (nodes/branches.py's one rule)."""
    check_paths(cx, cx.order, cx.predecessors, check_conditions(cx))


def sort(cx: Context, predecessors, statements: list[Statement]) -> tuple[str, ...]:
    """Kahn's algorithm in declaration order; what is left over lies on or behind a cycle.

    A statement counts down its node sources as they are sorted, and its targets count down
    unfinished statements, so a statement of n x m nodes costs n + m steps, not n * m: a target
    is ready when its last statement is, which is when its last predecessor is.
    The cycles reported cover every node that lies on one, two cycles sharing a node included.
    """
    countdown = Countdown(cx, statements)
    order = countdown.sort([name for name, waiting in countdown.waiting.items() if waiting == 0])
    stuck = [n for n, waiting in countdown.waiting.items() if waiting > 0]
    for cycle in cycles_covering(stuck, predecessors):
        cx.report("E040", cx.nodes[cycle[0]].span, f"cycle: {' -> '.join(cycle)}")
    return tuple(order)


class Countdown:
    """What each node and statement still waits for, during a topological sort."""

    def __init__(self, cx: Context, statements: list[Statement]):
        self.statements = statements
        self.pending = [sum(1 for s in st.sources if s in cx.node_names) for st in statements]  # node sources unsorted
        self.waiting = {n.name: 0 for n in cx.p.nodes}  # statements with unsorted node sources feeding a node
        self.feeds: dict[str, list[int]] = {}  # node -> the statements it is a source of, in file order
        for index, statement in enumerate(statements):
            if self.pending[index]:
                for target in statement.targets:
                    self.waiting[target] += 1
                for source in statement.sources:
                    if source in cx.node_names:
                        self.feeds.setdefault(source, []).append(index)

    def finish(self, name: str) -> list[str]:
        """`name` is sorted: the targets that waited for it last, in the order its successors are listed."""
        done = []
        for index in self.feeds.get(name, ()):
            self.pending[index] -= 1
            if self.pending[index] == 0:
                done.append(self.statements[index].targets)
        for targets in done:
            for target in targets:
                self.waiting[target] -= 1
        # a target of several finished statements is ready after the last, but listed where it first appears
        return list(dict.fromkeys(t for targets in done for t in targets if self.waiting[t] == 0))

    def sort(self, ready: list[str], among: dict | None = None) -> list[str]:
        queue = deque(ready)
        order: list[str] = []
        while queue:
            name = queue.popleft()
            order.append(name)
            queue.extend(t for t in self.finish(name) if among is None or t in among)
        return order


def cycles_covering(stuck: list[str], predecessors) -> list[list[str]]:
    """Cycles among the nodes Kahn's algorithm left over, until each node on a cycle is on a reported one.

    Some left-over nodes only lie behind a cycle; the nodes on cycles are those of the strongly connected
    components with an edge inside them. Within a component, the shortest cycle through its first node
    not yet covered is reported, in declaration order, so each report adds a node.
    """
    cycles: list[list[str]] = []
    for component in components(stuck, predecessors):
        uncovered = dict.fromkeys(component)
        while uncovered and len(cycles) < MAX_CYCLES_REPORTED:
            cycle = shortest_cycle(next(iter(uncovered)), predecessors, component)
            if cycle is None:  # a component of one node with no edge to itself
                break
            cycles.append(cycle)
            for name in cycle:
                uncovered.pop(name, None)
    return cycles


def components(nodes: list[str], predecessors) -> list[list[str]]:
    """Strongly connected components of the graph on `nodes` (Tarjan's, without recursion), each in
    declaration order, ordered by their first node."""
    among = {name: i for i, name in enumerate(nodes)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(predecessors.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            name, preds = work[-1]
            pred = next((p for p in preds if p in among), None)
            if pred is not None:
                if pred not in index:
                    index[pred] = low[pred] = len(index)
                    stack.append(pred)
                    on_stack.add(pred)
                    work.append((pred, iter(predecessors.get(pred, ()))))
                elif pred in on_stack:
                    low[name] = min(low[name], index[pred])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[name])
            if low[name] == index[name]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == name:
                        break
                found.append(sorted(component, key=among.__getitem__))
    return sorted(found, key=lambda c: among[c[0]])


def shortest_cycle(start: str, predecessors, component: list[str]) -> list[str] | None:
    """The shortest cycle through `start` inside its component, as `start -> ... -> start`, or None."""
    inside = set(component)
    came_from: dict[str, str] = {}  # a node reached walking back -> the node it feeds
    queue = deque([start])
    while queue:
        name = queue.popleft()
        for pred in predecessors.get(name, ()):
            if pred == start:
                path = [start, name]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return path
            if pred in inside and pred not in came_from:
                came_from[pred] = name
                queue.append(pred)
    return None
