"""Settings x seeds -> one optimize each -> a table: does a setting beat another on held-out data, and by how much?

Rows vary one setting at a time from a base (the first value of every --vary), as
the paper's liar.sh does, or over the full grid. Every row and seed runs the whole
method, never writes back, and shares one response cache, so rows that make the
same calls pay once. Accuracy is the final pipeline's on the test split, which
depends only on the seed: the difference from the first row is paired by seed, and
both get a Student t interval over seeds.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import SbpcError
from .language.blocks.method import SETTINGS, SIZES, SettingError, check
from .language.graph.graph import Graph
from .learning.stats import t_interval
from .records.record import RecordError
from .records.report import (
    diff_html,
    escape,
    eval_facts,
    output_changes_html,
    page,
    plot_intervals,
    sample_html,
    score_changes_html,
    table,
)
from .records.runs import Run, RunsError, is_right

if TYPE_CHECKING:
    from .api import Data, Pipeline

# what --vary may change
VARIABLE = (
    "gradient",
    "only",
    "gate",
    "update",
    "iterations",
    "errors_per_gradient",
    "train_size",
    "val_size",
    "gate_alpha",
)


class CompareError(SbpcError):
    """A --vary that cannot be run, or a row that could not finish: no table is better than a wrong one."""


@dataclass(frozen=True)
class Row:
    label: str
    changes: Mapping[str, Any]  # setting -> value, over the base settings


@dataclass
class SeedResult:
    seed: int
    test_initial: float
    test_final: float
    calls: int
    tokens: int
    cost: float
    seconds: float
    run: str
    lost: int = 0  # test samples lost to failed calls (before or after), left out of the scores


@dataclass
class RowResult:
    row: Row
    seeds: list[SeedResult] = field(default_factory=list)

    def total(self, key: str) -> float:
        return sum(getattr(s, key) for s in self.seeds)

    def accuracy(self) -> tuple[float, float | None, float | None]:
        """Mean test accuracy with its t interval, clipped to [0, 1] where few seeds make it overshoot."""
        mean, low, high = t_interval([s.test_final for s in self.seeds])
        return (mean, None, None) if low is None or high is None else (mean, max(0.0, low), min(1.0, high))

    def difference(self, first: RowResult) -> tuple[float, float | None, float | None]:
        """Paired by seed: the same test samples, the same starting prompts."""
        base = {s.seed: s.test_final for s in first.seeds}
        return t_interval([s.test_final - base[s.seed] for s in self.seeds])


def parse_vary(specs: Sequence[str], graph: Graph) -> list[tuple[str, list]]:
    """`--vary KEY=V1,V2` flags as (setting, values); `only=each` is all prompts, then each trainable one alone."""
    out: list[tuple[str, list]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not values.strip():
            raise CompareError(f"--vary expects SETTING=VALUE,VALUE..., got {spec!r}")
        if key not in VARIABLE:
            raise CompareError(f"--vary: cannot vary '{key}' (can vary: {', '.join(VARIABLE)})")
        if key in (k for k, _ in out):
            raise CompareError(f"--vary {key} is given twice")
        parsed: list = []
        for raw in (v.strip() for v in values.split(",")):
            parsed += only_values(raw, graph) if key == "only" else [read_setting(key, raw)]
        out.append((key, list(dict.fromkeys(parsed))))
    return out


def read_setting(key: str, raw: str):
    """One --vary value as the method takes it, or CompareError saying why not."""
    setting = SETTINGS[key]
    if setting.choices:
        try:
            return check(key, raw)
        except SettingError:
            raise CompareError(f"--vary {key}: '{raw}' is not one of {', '.join(setting.choices)}")
    try:
        value = setting.kind(raw)
    except ValueError:
        raise CompareError(f"--vary {key}: '{raw}' is not a {'whole number' if setting.kind is int else 'number'}")
    try:
        return check(key, value)
    except SettingError:
        raise CompareError(f"--vary {key}: '{raw}' is out of range ({setting.span()})")


def only_values(value: str, graph: Graph) -> list[tuple[str, ...]]:
    if value == "each":
        if len(graph.trainable) < 2:
            raise CompareError(
                f"--vary only=each: {graph.pipeline.path} has one trainable param "
                f"({', '.join(graph.trainable)}), so each alone is the same as all"
            )
        return [(), *((p,) for p in graph.trainable)]
    if value == "all":
        return [()]
    names = tuple(value.split("+"))
    for name in names:
        if name not in graph.trainable:
            raise CompareError(f"--vary only: '{name}' is not a trainable param ({', '.join(graph.trainable)})")
    return [()] if set(names) == set(graph.trainable) else [names]  # every param named is all of them


def show(key: str, value) -> str:
    if key == "only":
        return f"only={'+'.join(value) or 'all'}"
    return f"{key}={str(value).replace('_', '-') if key == 'gradient' else value}"


def make_rows(varies: Sequence[tuple[str, list]], grid: bool = False) -> list[Row]:
    """One factor at a time from the base (liar.sh's design), or every combination with `grid`."""
    if not varies:
        return [Row("as in the file", {})]
    keys = [k for k, _ in varies]
    if grid:
        combos = [dict(zip(keys, values)) for values in itertools.product(*(v for _, v in varies))]
        return [Row(", ".join(show(k, c[k]) for k in keys), c) for c in combos]
    base = {k: values[0] for k, values in varies}
    rows = [Row("base: " + ", ".join(show(k, base[k]) for k in keys), base)]
    for key, values in varies:
        rows += [Row(show(key, value), {**base, key: value}) for value in values[1:]]
    return rows


@dataclass(frozen=True)
class Experiment:
    """What every row shares: the pipeline (its models, cache and ledger), the data, the base method."""

    pipeline: Pipeline
    data: Data
    settings: Mapping[str, Any]  # the method settings given as flags (the others: the file's)
    mapping: Mapping[str, str] = field(default_factory=dict)
    metric: str | None = None  # a built-in or one the file defines (default: the file's, else the data set's)

    def settings_of(self, row: Row, seed: int) -> dict[str, Any]:
        """A row's method settings on a seed, every size given: val is drawn whatever the gate, so every row of
        a seed is tested on the same samples."""
        return {**self.settings, **row.changes, "seed": seed, **{size: self.size(size, row.changes) for size in SIZES}}

    def size(self, key: str, changes: Mapping[str, Any]) -> int:
        return changes.get(key, self.settings.get(key, getattr(self.pipeline.graph.optimize, key)))

    def describe(self) -> str:
        return f"{self.pipeline.path} on {self.data.name}"


Progress = Callable[[str, int], Callable[[object], None]]  # a phase and its size -> called once per item done


def optimize_once(experiment: Experiment, row: Row, seed: int, runs_dir: Path, progress: Progress | None = None):
    """One optimize that writes nothing back, through the Python API: the one place compare runs the method."""
    return experiment.pipeline.optimize(
        experiment.data,
        metric=experiment.metric,
        mapping=experiment.mapping,
        runs_dir=runs_dir,
        progress=progress,
        **experiment.settings_of(row, seed),
    )


def compare(
    experiment: Experiment,
    rows: Sequence[Row],
    seeds: Sequence[int],
    runs_dir: Path | None = None,
    tick: Callable[[str], None] = lambda what: None,
    progress: Progress | None = None,
) -> list[RowResult]:
    """Every row on every seed; run records go to runs_dir, or to a folder deleted afterwards.
    `tick` hears of each finished optimize, `progress` of each phase inside one."""
    if experiment.size("test_size", {}) < 1:
        raise CompareError("compare scores each row on held-out samples: give --test-size of at least 1")
    for row in rows:  # every row must be able to run before the first one spends anything
        try:
            experiment.pipeline.plan(experiment.data, metric=experiment.metric, **experiment.settings_of(row, seeds[0]))
        except SettingError as exc:  # a flag the method refuses with a row's changes
            raise CompareError(f"row '{row.label}': {exc.cli}") from None
    ledger = experiment.pipeline.ledger
    with tempfile.TemporaryDirectory(prefix="sbpc-compare-") as scratch:
        folder = Path(runs_dir) if runs_dir else Path(scratch)
        results = []
        for row in rows:
            result = RowResult(row)
            for seed in seeds:
                before, started = (ledger.calls, ledger.tokens, ledger.cost), time.perf_counter()
                optimized = optimize_once(experiment, row, seed, folder, progress)
                outcome = optimized.outcome
                tests = (outcome.test_before, outcome.test_after)
                if outcome.stopped or any(t is None or t.accuracy is None for t in tests):
                    why = outcome.stopped.cli if outcome.stopped else "no test sample could be scored"
                    raise CompareError(f"row '{row.label}', seed {seed} did not finish: {why}")
                result.seeds.append(
                    SeedResult(
                        seed,
                        tests[0].accuracy,
                        tests[1].accuracy,
                        ledger.calls - before[0],
                        ledger.tokens - before[1],
                        ledger.cost - before[2],
                        time.perf_counter() - started,
                        str(optimized.record) if runs_dir else "",
                        sum(len(t.lost) for t in tests),
                    )
                )
                tick(f"{row.label}, seed {seed}")
            results.append(result)
    return results


# --- what the user reads --------------------------------------------------------------------------


def interval(mean: float, low: float | None, high: float | None, signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f.format(mean) + (f" [{f.format(low)}, {f.format(high)}]" if low is not None else " (one seed: no interval)")


def to_json(results: Sequence[RowResult]) -> list[dict]:
    first = results[0]
    out = []
    for r in results:
        mean, low, high = r.accuracy()
        d_mean, d_low, d_high = r.difference(first)
        out.append(
            {
                "row": r.row.label,
                "changes": {k: list(v) if isinstance(v, tuple) else v for k, v in r.row.changes.items()},
                "test_accuracy": {"mean": mean, "low": low, "high": high},
                "difference_from_first": {"mean": d_mean, "low": d_low, "high": d_high},
                "calls": int(r.total("calls")),
                "tokens": int(r.total("tokens")),
                "cost": r.total("cost"),
                "seconds": r.total("seconds"),
                "seeds": [vars(s) for s in r.seeds],
            }
        )
    return out


def table_rows(results: Sequence[RowResult]) -> list[list[str]]:
    first, rows = results[0], []
    for n, r in enumerate(results):
        diff = "(the reference)" if n == 0 else interval(*r.difference(first), signed=True)
        rows.append(
            [
                r.row.label,
                interval(*r.accuracy()),
                diff,
                str(int(r.total("calls"))),
                str(int(r.total("tokens"))),
                f"{r.total('cost'):.4f}",
                f"{r.total('seconds'):.1f}",
            ]
        )
    return rows


HEADER = [
    "setting",
    "test accuracy, mean [95% CI]",
    "difference from the first row, paired [95% CI]",
    "calls",
    "tokens",
    "cost $",
    "wall s",
]


def preamble(results: Sequence[RowResult], experiment: Experiment) -> str:
    seeds = [s.seed for s in results[0].seeds]
    initial = interval(*t_interval([s.test_initial for s in results[0].seeds]))
    return (
        f"{experiment.describe()}: {len(results)} row(s) x {len(seeds)} seed(s) ({', '.join(map(str, seeds))}); "
        f"{experiment.size('test_size', {})} test samples per seed; before optimizing: {initial}"
    )


def markdown(results: Sequence[RowResult], experiment: Experiment) -> str:
    lines = [preamble(results, experiment), "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table_rows(results)]
    lines += [
        "",
        "Intervals: Student t over seeds. Calls, tokens and cost: made by the row, after the cache it "
        "shares with the rows before it; wall time likewise.",
    ]
    lost = {r.row.label: int(r.total("lost")) for r in results if r.total("lost")}
    if lost:
        lines.append(
            "Warning: test samples lost to failed calls were left out of the scores: "
            + ", ".join(f"{label}: {n}" for label, n in lost.items())
        )
    return "\n".join(lines)


def html(results: Sequence[RowResult], experiment: Experiment) -> str:
    labels = [r.row.label for r in results]
    accuracy = [r.accuracy() for r in results]
    difference = [r.difference(results[0]) for r in results]

    def bounds(triples) -> tuple[list[float], list[float], list[float]]:
        return (
            [m for m, _, _ in triples],
            [lo if lo is not None else m for m, lo, _ in triples],
            [hi if hi is not None else m for m, _, hi in triples],
        )

    body = [
        f"<p>{escape(preamble(results, experiment))}</p>",
        table(HEADER, table_rows(results)),
        plot_intervals(
            labels,
            *bounds(accuracy),
            ylabel="test accuracy",
            title="held-out test accuracy per setting, mean and 95% t interval over seeds",
        ),
        plot_intervals(
            labels,
            *bounds(difference),
            ylabel="difference",
            title="difference from the first row, paired by seed, with its 95% t interval",
        ),
    ]
    return page(f"sbpc compare: {experiment.pipeline.path}", "\n".join(body))


# --- two evaluations, sample by sample --------------------------------------------------------------


COMPARED_SAMPLES = 300  # the most samples each list of a comparison page holds


def _brief(sample: dict) -> dict:
    """What pairing keeps of a sample: enough to say whether it flipped or changed, not its prompts and replies."""
    return {key: sample.get(key) for key in ("id", "expected", "output", "score", "lost")}


def _briefs(run: Run) -> Iterator[dict]:
    """A run's samples, briefly, read one at a time."""
    try:
        yield from map(_brief, run.samples())
    except RecordError as exc:
        raise RunsError(str(exc)) from None


def _whole(run: Run, ids: set[str]) -> dict[str, dict]:
    """The samples of `run` with these ids, whole: a second pass, for the few a page shows in full."""
    try:
        return {x["id"]: x for x in run.samples() if x["id"] in ids}
    except RecordError as exc:
        raise RunsError(str(exc)) from None


def compare_evals(a: Run, b: Run) -> str:
    """Two evaluations of the same data as one page: the samples both scored, paired by id; which flipped
    (wrong -> right, right -> wrong), and the paired difference of scores (B - A) with its 95% t interval. Each list
    holds at most COMPARED_SAMPLES samples and says how many it leaves out; the samples are read a line at a time."""
    theirs = {x["id"]: x for x in _briefs(b)}
    ours = 0
    pairs = []
    for x in _briefs(a):
        ours += 1
        if x["id"] in theirs:
            pairs.append((x, theirs[x["id"]]))
    if not pairs:
        raise RunsError(f"{a.name} and {b.name} share no sample; compare two evaluations of the same data")
    fixed = [(x, y) for x, y in pairs if not is_right(x) and is_right(y)]
    broken = [(x, y) for x, y in pairs if is_right(x) and not is_right(y)]
    mean, low, high = t_interval([y["score"] - x["score"] for x, y in pairs])
    unpaired = ours + len(theirs) - 2 * len(pairs)
    body = [
        f"<p>A: <b>{escape(a.name)}</b>, B: <b>{escape(b.name)}</b>; {len(pairs)} samples scored by both"
        + (f" ({unpaired} scored by one only, left out)" if unpaired else "")
        + "</p>",
        f"<p>B - A, paired by sample: <b>{escape(interval(mean, low, high, signed=True))}</b> "
        f"(mean difference of scores, 95% t interval); {len(fixed)} wrong -> right, {len(broken)} right -> wrong, "
        f"{len(pairs) - len(fixed) - len(broken)} unchanged</p>",
    ]
    if (a.settings.data, a.evaluation.get("split")) != (b.settings.data, b.evaluation.get("split")):
        body.append('<p class="rejected">the two evaluations scored different data; only shared ids are paired</p>')
    changed = [(x, y) for x, y in pairs if x.get("output") != y.get("output")]
    same = [(x, y) for x, y in pairs if x.get("output") == y.get("output")]
    shown = changed[:COMPARED_SAMPLES] + same[: max(0, COMPARED_SAMPLES - len(changed))]
    body += [output_changes_html(shown, len(changed), len(pairs))]
    body += _flips_html(a, b, fixed[:COMPARED_SAMPLES], broken[:COMPARED_SAMPLES], len(fixed), len(broken))
    body += [score_changes_html(pairs, COMPARED_SAMPLES)]
    body += _prompt_changes_html(a, b)
    body += [f"<h2>A: {escape(a.name)}</h2>", eval_facts(a), f"<h2>B: {escape(b.name)}</h2>", eval_facts(b)]
    return page(f"sbpc: {a.name} vs {b.name}", "\n".join(body))


def _flips_html(a: Run, b: Run, fixed: list, broken: list, *counts: int) -> list[str]:
    """The samples that flipped each way (the first of them; `counts`: how many flipped each way): a table of them,
    then each one's prompts and replies, A's and B's."""
    ids = {x["id"] for x, _ in fixed + broken}
    whole_a, whole_b = (_whole(a, ids), _whole(b, ids)) if ids else ({}, {})
    body = []
    for (title, flips), count in zip((("wrong -> right", fixed), ("right -> wrong", broken)), counts):
        body.append(f"<h2>{title} ({count})</h2>")
        if not flips:
            continue
        if count > len(flips):
            body.append(f"<p>the first {len(flips)}; {count - len(flips)} more left out</p>")
        body.append(
            table(
                ["sample", "expected", "A's output", "B's output"],
                [[x["id"], x.get("expected"), x.get("output"), y.get("output")] for x, y in flips],
            )
        )
        body += [sample_html(whole_a[x["id"]], "A: ") + sample_html(whole_b[x["id"]], "B: ") for x, _ in flips]
    return body


def _prompt_changes_html(a: Run, b: Run) -> list[str]:
    """Each prompt that differs between the two evaluations, as a word diff from A's to B's."""
    prompts_a, prompts_b = a.prompts_at(0), b.prompts_at(0)
    changed = sorted(name for name in {*prompts_a, *prompts_b} if prompts_a.get(name) != prompts_b.get(name))
    return [f"<h2>prompts changed from A to B ({len(changed)})</h2>"] + [
        f"<p><b>{escape(name)}</b></p>{diff_html(prompts_a.get(name, ''), prompts_b.get(name, ''))}" for name in changed
    ]
