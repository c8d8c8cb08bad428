"""Pipelines built from a grid of the language's features, every pair of features in at least one of them.

A pipeline has one node under test, `subject`, whose features the grid varies: what it is (a model call, a
Python function, an agent with a tool), whether it maps over a list, whether it stands behind a branch,
what it replies (text, a choice, a number, a list, a record), a system message, demos, the metric that
scores it (a judge, Python code, a built-in one) and whether its template shows several params. A few
combinations have no meaning (a function has no prompt, so no system message, demos nor template) and are
left out; every other pair of values is in some pipeline of `GRID` (test_matrix.py holds that).

`pairwise` is a small seeded greedy all-pairs generator: each new row is, of some random candidates, the
one that covers the most pairs not yet covered, so the grid stays near the fewest rows that cover them.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

FEATURES: dict[str, tuple[str, ...]] = {
    "kind": ("model", "function", "agent"),
    "map": ("single", "mapped"),
    "branch": ("straight", "branched"),
    "reply": ("text", "choice", "number", "list", "record"),
    "system": ("nosystem", "system"),
    "demos": ("nodemos", "demos"),
    "metric": ("builtin", "judge", "python"),
    "params": ("oneparam", "params"),
    "models": ("roles", "named"),
    "output": ("whole", "field"),
}
SEED = 42

Row = dict[str, str]


def meaningful(row: Mapping[str, str]) -> bool:
    """Whether a (partial) row is a pipeline: a function node has no prompt to carry a system message, demos
    or a template, nor a model; only a record's field can be the output, of a node neither mapped (its value is a
    list) nor behind a branch."""
    plain = {"system": "nosystem", "demos": "nodemos", "params": "oneparam", "models": "roles"}
    if row.get("kind") == "function" and any(row.get(name) not in (None, value) for name, value in plain.items()):
        return False
    if row.get("output") == "field":  # `output a.f | b.f` is no syntax: a field is scored without a branch
        return (
            row.get("reply") in (None, "record")
            and row.get("map") in (None, "single")
            and (row.get("branch") in (None, "straight"))
        )
    return True


def pairwise(
    features: Mapping[str, Sequence[str]], allowed: Callable[[Mapping[str, str]], bool], seed: int, tries: int = 60
) -> list[Row]:
    """Rows that hold every allowed pair of values of two features at least once (seeded greedy all-pairs)."""
    names = list(features)
    wanted = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(names, 2)
        for x in features[a]
        for y in features[b]
        if allowed({a: x, b: y})
    }
    rng = random.Random(seed)
    rows: list[Row] = []
    while wanted:
        first = sorted(wanted)[rng.randrange(len(wanted))]  # a pair still missing, so every row covers one
        best, gain = None, -1
        for _ in range(tries):
            row = {name: rng.choice(list(features[name])) for name in names}
            row.update(dict(first))
            row = repaired(row, features, allowed, fixed=[name for name, _ in first])
            if row is None:
                continue
            covered = len(pairs_of(row) & wanted)
            if covered > gain:
                best, gain = row, covered
        if best is None:
            raise ValueError(f"no allowed row holds {first}")
        rows.append(best)
        wanted -= pairs_of(best)
    return rows


def repaired(
    row: Row, features: Mapping[str, Sequence[str]], allowed: Callable[[Mapping[str, str]], bool], fixed: list[str]
) -> Row | None:
    """The row, or a neighbour that is allowed: each feature but the `fixed` ones in turn set to the first value
    that makes the row allowed (None: none did)."""
    for name in features:
        if allowed(row):
            return row
        if name not in fixed:
            row = next((r for value in features[name] if allowed(r := {**row, name: value})), row)
    return row if allowed(row) else None


def pairs_of(row: Mapping[str, str]) -> set:
    return {((a, row[a]), (b, row[b])) for a, b in itertools.combinations(list(row), 2)}


TYPES = {
    "text": "text",
    "choice": "choice(yes, no)",
    "number": "number",
    "list": "list[text]",
    "record": "{label: choice(left, right), score: number}",
}
VALUES = {  # what the generated function returns for each reply
    "text": "'a text'",
    "choice": "'yes'",
    "number": "3",
    "list": "['one', 'two']",
    "record": "{'label': 'left', 'score': 1}",
}
METRICS = {"text": "exact", "choice": "exact", "number": "numeric"}  # by the scored type; a list's or record's: json


@dataclass(frozen=True)
class Pipeline:
    """One generated pipeline: its name (the features it combines), its source and its Python module."""

    name: str
    source: str
    code: str


def pipeline(row: Row) -> Pipeline:
    """The pipeline of one row of the grid, and the module beside it (its function, tool and metric)."""
    name = "-".join(row[f] for f in FEATURES)
    reply, mapped, branched = row["reply"], row["map"] == "mapped", row["branch"] == "branched"
    subject_type = TYPES[reply]
    lines = [f'pipeline grid "A generated pipeline: {name}"', "input q: text"]
    code = ["def lookup(topic: str) -> str:", '    """Look a topic up."""', "    return 'found: ' + topic", ""]
    inputs = ["q"]
    if mapped:
        lines.append("input items: list[text]")
        inputs.append("items")
    lines.append('param task = "Answer from what you are given."')
    settings = []
    if row["kind"] == "function":
        item = "item: str, " if mapped else ""  # a mapped function takes its item by the map's name
        code += [f"def subject(q: str, {item}route: str = '') -> object:", f"    return {VALUES[reply]}", ""]
        lines.append('function work = "grid_code:subject"')
        settings.append("function = work")
    else:
        settings.append("prompt = task")
        if row["kind"] == "agent":
            lines.append('function lookup = "grid_code:lookup"')
            settings += ["tools = [lookup]", "max_steps = 3"]
        if row["system"] == "system":
            lines.append('param rules = "Be brief."')
            settings.append("system = rules")
        if row["demos"] == "demos":
            lines.append("demos shots max 2 = []")
            settings.append("demos = shots")
        if row["params"] == "params":
            shown = "{{ item }}" if mapped else "{{ q }}"
            shots = "{% if shots %}{{ shots }}{% endif %}" if row["demos"] == "demos" else ""
            lines += [
                'param style = "Answer in one line."',
                f'template t = "{{{{ prompt }}}} {{{{ style }}}} {shots} {shown}"',
            ]
            settings.append("template = t")
    if row["models"] == "named":
        lines += ["model fast { max_tokens = 64 }", "model strong { max_tokens = 128 }"]
        lines.append("optimize { models = [fast, strong] }")
        settings.append("model = strong")
    each = " for each item in items" if mapped else ""
    if mapped:
        settings.append("max_items = 3")
    lines.append(f"node subject: {subject_type}{each} {{ {'  '.join(settings)} }}")
    output_type = f"list[{subject_type}]" if mapped else subject_type
    field = ".label" if row["output"] == "field" else ""
    if branched:
        lines += ['param sort = "Should this go on?"', "node route: choice(go, stop) { prompt = sort }"]
        lines.append(f"node other: {output_type} {{ prompt = task }}")
        lines += ["q -> route", f"route, {', '.join(inputs)} -> subject when route == go"]
        lines += ["route, q -> other when route == stop", f"output subject{field} | other{field}"]
    else:
        lines += [f"{', '.join(inputs)} -> subject", f"output subject{field}"]
    lines += metric(row, "choice(left, right)" if field else output_type, code)
    return Pipeline(name, "\n".join(lines) + "\n", "\n".join(code) + "\n")


def metric(row: Row, output_type: str, code: list[str]) -> list[str]:
    """The metric lines of a row (a judge, Python code, or the built-in one for its reply type)."""
    if row["metric"] == "judge":
        return [
            'frozen param rubric = "A good answer is short and right."',
            "metric graded { prompt = rubric  scale = 1..5 }",
        ]
    if row["metric"] == "python":
        code += ["def score(prediction, example) -> float:", "    return float(bool(prediction.output))", ""]
        return ['metric scored = "grid_code:score"']
    kind = "json" if output_type.startswith(("list", "{")) else METRICS[output_type.split("(")[0]]
    return [f"metric {kind}"]


GRID = [pipeline(row) for row in pairwise(FEATURES, meaningful, SEED)]


def generated(grid: Sequence[Pipeline]) -> list[tuple[str, Pipeline]]:
    return [(f"grid/{p.name}", p) for p in grid]
