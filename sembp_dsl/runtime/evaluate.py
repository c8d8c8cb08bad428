"""Samples -> traces -> scores: run a graph over a data split and score it with its metric."""

from __future__ import annotations

import bisect
import functools
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .. import telemetry
from ..errors import Option, SbpcError
from ..language import kinds
from ..language.blocks.data import ANSWER_COLUMNS, hides_fields
from ..language.blocks.method import SIZES, check
from ..language.diagnostics import did_you_mean
from ..language.graph.graph import Graph
from ..language.nodes.metrics import METRICS, score
from ..language.nodes.node import GraphNode
from ..language.nodes.trace import FUNCTION_FAILED, NodeTrace, Trace, answer_words
from ..models.limits import PRIORITY
from ..models.llm import LLM, BudgetExceeded
from ..usercode import Overran, call_function
from .datasets import EVAL_TEST_SIZE, DataError, Dataset, Sample, bad_samples, eval_splits
from .forward import run
from .tasks import streamed

METRIC_FAILED = "metric failed"


@dataclass(frozen=True)
class Verdict:
    """A metric's word on one answer: a score from 0 to 1, and why, when the metric says (a judge, a function)."""

    score: float
    reason: str | None = None
    judged: NodeTrace | None = None  # a judge's call: its prompt, reply, tokens and cost


class MetricFailed(SbpcError):
    """A metric could not score one answer (it raised, returned something out of range, or its judge's call
    failed): that sample is not scored, the run goes on. `judged`: the judge's call, when one was answered."""

    def __init__(self, message: str, judged: NodeTrace | None = None):
        super().__init__(message)
        self.judged = judged


METRIC_TIMEOUT = 60.0  # seconds a Python metric may take on one answer


async def python_verdict(metric: Callable[[Any, Any], object], name: str, prediction: Any, example: Any) -> Verdict:
    """A Python metric's word on one answer (`metric(prediction, example)`): a bool or a number from 0 to 1, or
    with a reason, `(score, reason)`. Called as a pipeline's functions are (usercode.py), so what it raises,
    sys.exit, a hang past METRIC_TIMEOUT or anything else returned fails that sample (MetricFailed), not the run."""
    value, raised = await call_function(functools.partial(metric, prediction, example), {}, METRIC_TIMEOUT)
    if isinstance(raised, Overran):
        raise MetricFailed(f"the metric {name!r} {raised}")
    if raised is not None:
        raise MetricFailed(f"the metric {name!r} raised {type(raised).__name__}: {_shown(raised, str, 2000)}")
    verdict = _verdict(value)
    if verdict is None:
        getattr(value, "close", lambda: None)()  # an awaitable from a wrapped async function
        raise MetricFailed(
            f"the metric {name!r} returned {_shown(value)}; a metric returns a bool or a number from 0 to 1, "
            "or (score, reason)"
        )
    return verdict


def _verdict(value: object) -> Verdict | None:
    """A Python metric's answer as a Verdict: a bool or a number from 0 to 1, alone or with a reason (None for
    anything else)."""
    reason = None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], (str, type(None))):
        value, reason = value
    if not isinstance(value, (bool, int, float)):
        return None
    try:
        number = float(value)  # a subclass's own comparisons are not asked
    except Exception:  # noqa: BLE001 (a subclass's __float__ may raise anything: no number)
        return None
    return Verdict(number, str.strip(reason or "") or None) if 0 <= number <= 1 else None  # NaN is not within


def _shown(value: object, how: Callable[[object], str] = repr, most: int = 80) -> str:
    """The user's value as text, shortened to `most` characters; one whose str or repr raises is named by its
    type."""
    try:
        text = how(value)
    except Exception:  # noqa: BLE001 (the user's __repr__ may raise anything; the type names it)
        return f"an {type(value).__name__} that cannot be shown"
    return text if len(text) <= most else text[: most - 3] + "..."


# A metric that is more than a built-in's name: a judge or a function of the file's, or a callable given in Python.
Scorer = Callable[[Trace, Sample, str], Awaitable[Verdict]]


@dataclass(frozen=True)
class Result:
    sample: Sample
    expected: str
    trace: Trace
    score: float  # 1.0 right, 0.0 wrong; a judge or a function may give partial credit
    reason: str | None = None  # why, as the metric said: the loss feedback the backward pass starts from
    metric_error: str | None = None  # why the metric could not score the answer
    judged: NodeTrace | None = None  # the judge's call on it, when a judge scored

    @property
    def correct(self) -> bool:
        return self.score >= 1.0

    def __repr__(self) -> str:  # the trace holds every prompt and reply: too long to read
        said = f"lost: {self.trace.final.error or self.metric_error}" if self.lost else f"score {self.score:g}"
        return f"<Result {self.sample.id}: {said}, expected {self.expected!r}, answer {self.trace.output!r}>"

    @property
    def lost(self) -> bool:
        """No score: the answer was lost to a failed call, or the metric could not score it."""
        return self.trace.final.lost or self.metric_error is not None


def lost_cause(result: Result) -> str:
    """Why a lost sample has no score, as the summary counts it."""
    final = result.trace.final
    if result.metric_error is not None:
        return METRIC_FAILED
    return final.failure.cause if final.failure else final.cause or ""  # a lost node always has an error, so a cause


def failure_cause(result: Result) -> str | None:
    """Why a scored sample went wrong on the way (a function failed, a reply did not parse); None when nothing
    failed."""
    final = result.trace.final
    if result.lost or not final.error:
        return None
    return FUNCTION_FAILED if final.blocked else final.cause or ""


@dataclass
class Tally:
    """An evaluation's running sums: all its summary needs, whatever the number of samples. `keep`: how many of the
    samples not answered right it holds whole (the first, in the split's order), for a report to quote."""

    keep: int | None = None  # None: every one
    samples: int = 0
    lost: int = 0
    correct: int = 0
    total: float = 0.0  # the sum of the scores (a lost sample's is 0)
    lost_causes: Counter = field(default_factory=Counter)
    failure_causes: Counter = field(default_factory=Counter)
    wrong: list[tuple[int, Result]] = field(default_factory=list)  # (place in the split, result), in order

    @classmethod
    def of(cls, results: Sequence[Result]) -> Tally:
        tally = cls()
        for place, result in enumerate(results):
            tally.add(place, result)
        return tally

    def __add__(self, later: Tally) -> Tally:
        """These sums and a `later` part's (a resumed evaluation's): its kept samples are the later part's."""
        return Tally(
            later.keep,
            self.samples + later.samples,
            self.lost + later.lost,
            self.correct + later.correct,
            self.total + later.total,
            self.lost_causes + later.lost_causes,
            self.failure_causes + later.failure_causes,
            later.wrong,
        )

    def add(self, place: int, result: Result) -> None:
        """One sample's outcome, at its place in the split."""
        self.count(result.score, result.lost, result.correct, lost_cause(result), failure_cause(result))
        if not result.correct and (self.keep is None or self.keep > 0):
            bisect.insort(self.wrong, (place, result), key=lambda kept: kept[0])
            del self.wrong[self.keep if self.keep is not None else len(self.wrong) :]

    def count(self, score: float, lost: bool, correct: bool, lost_cause: str, failure: str | None) -> None:
        """One sample's outcome in numbers, as a result or a record's line gives them."""
        self.samples += 1
        self.total += score
        self.correct += correct
        if lost:
            self.lost += 1
            self.lost_causes[lost_cause] += 1
        elif failure is not None:
            self.failure_causes[failure] += 1


@dataclass(frozen=True)
class Evaluation:
    """Scores over the samples that got an answer; samples lost to failed calls (or that their metric could not
    score) are counted, never scored. Its summary is a Tally's; `results` holds every sample's result, or none when
    the evaluation was too large to hold (`keep`: the tally holds the first wrong ones)."""

    results: tuple[Result, ...]
    requested: int
    stopped: str | None  # why the run stopped early, if it did (an Option: .cli has the flags' words)
    record: Path | None = None  # the folder of its run record, when one was kept (runs_dir=)
    tally: Tally = field(default=None, repr=False, compare=False)  # type: ignore[assignment]  # None: of `results`
    notes: tuple[str, ...] | list[str] = ()  # what reading a resumed record said (a last line cut off)

    def __post_init__(self) -> None:
        if self.tally is None:
            object.__setattr__(self, "tally", Tally.of(self.results))

    def __repr__(self) -> str:  # its results hold every trace: too long to read
        score = "n/a" if self.accuracy is None else f"{self.accuracy:.3f} ({self.correct}/{self.scored})"
        lost = f", {self.tally.lost} lost" if self.tally.lost else ""
        return f"<Evaluation: accuracy {score} of {self.requested} samples{lost}>"

    @property
    def lost(self) -> list[Result]:
        """Samples with no score: a call failed for good, a template did not render, or the metric failed (those
        `results` holds; `tally.lost` counts them all)."""
        return [r for r in self.results if r.lost]

    @property
    def scored(self) -> int:
        return self.tally.samples - self.tally.lost

    @property
    def trustworthy(self) -> bool:
        """Something was scored, and most samples were: a score over the few survivors of failing calls is
        no result (which samples survive is not random), so a command built on it fails."""
        return self.scored > 0 and 2 * self.tally.lost <= self.tally.samples

    @property
    def correct(self) -> int:
        return self.tally.correct

    @property
    def wrong(self) -> list[Result]:
        """Every sample not answered right: wrong answers and lost samples (those the tally keeps)."""
        return [result for _, result in self.tally.wrong]

    @property
    def accuracy(self) -> float | None:
        """None when nothing was scored: no number is better than a 0.000 that failed calls made up."""
        return self.tally.total / self.scored if self.scored else None

    @property
    def interval(self) -> tuple[float, float]:
        """Wilson score 95% interval: honest for small samples and accuracies near 0 or 1."""
        n, p = self.scored, self.accuracy
        if p is None:
            return (0.0, 1.0)
        z = 1.96
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))

    def lost_causes(self) -> dict[str, int]:
        """Lost samples by cause, most frequent first."""
        return dict(self.tally.lost_causes.most_common())

    def failure_causes(self) -> dict[str, int]:
        """Samples scored wrong because something failed on the way (a function, a reply that did not parse), by
        cause, most frequent first: a function failure is seen in the summary, not only in the ledger."""
        return dict(self.tally.failure_causes.most_common())

    def report(self, label: str, metric: str, errors: int = 0) -> str:
        """The text summary: accuracy (or n/a), losses with their causes, a budget stop, the first wrong samples."""
        if self.accuracy is None:
            lines = [f"{label}: accuracy n/a (nothing scored), metric {metric}"]
        else:
            low, high = self.interval
            lines = [
                f"{label}: accuracy {self.accuracy:.3f} ({self.correct}/{self.scored}), "
                f"95% interval [{low:.3f}, {high:.3f}], metric {metric}"
            ]
        if self.tally.lost:
            causes = ", ".join(f"{cause} x{n}" for cause, n in self.lost_causes().items())
            lines.append(f"{self.tally.lost} of {self.tally.samples} samples lost, no answer to score: {causes}")
        failed = self.failure_causes()
        if failed:
            causes = ", ".join(f"{cause} x{n}" for cause, n in failed.items())
            lines.append(
                f"{sum(failed.values())} of {self.tally.samples} samples scored wrong after a failure: {causes}"
            )
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}; scored {self.scored} of {self.requested}")
        for r in self.wrong[:errors]:
            final = r.trace.final
            what = "lost" if r.lost else f"score {r.score:.2f}" if r.score else "wrong"
            error = r.metric_error or final.error
            how = "".join(f"\n{part.title}:\n{part.text}" for part in kinds.shown(final.extra))  # a tool loop's calls
            lines.append(
                f"\n--- {what}: {r.sample.id} (expected {r.expected!r}, got {answer_words(r.trace.output)}"
                f"{', ' + error if error else ''})\n{final.reply.strip()[:600]}{how}"
                + (f"\nwhy: {r.reason}" if r.reason else "")
            )
        return "\n".join(lines)

    def to_json(self, errors: int = 0) -> dict:
        return {
            "accuracy": self.accuracy,
            "interval95": list(self.interval) if self.scored else None,
            "correct": self.correct,
            "scored": self.scored,
            "lost": self.tally.lost,
            "lost_causes": self.lost_causes(),
            "failure_causes": self.failure_causes(),
            "requested": self.requested,
            "stopped": self.stopped,
            "errors": [
                {
                    "id": r.sample.id,
                    "expected": r.expected,
                    "output": r.trace.output,
                    "reply": r.trace.final.reply,
                    "error": r.metric_error or r.trace.final.error,
                    "score": None if r.lost else r.score,  # a lost sample has no score
                    "reason": r.reason,
                    "failure": r.trace.final.failure.to_json() if r.trace.final.failure else None,
                    **r.trace.final.extra,  # what its kind keeps (a tool loop's calls), as `run --json` has it
                }
                for r in self.wrong[:errors]
            ],
        }


def metric_for(graph: Graph, dataset_metric: str) -> str:
    """The pipeline's own metric when it names or defines one, else the data set's."""
    return graph.metric if graph.pipeline.metrics or graph.metrics else dataset_metric


def sample_inputs(graph: Graph, sample: Sample, mapping: Mapping[str, str]) -> dict[str, str]:
    """Pipeline inputs from a sample's fields: by a `mapping` (--map) entry, the input's `from`, or its own name."""
    values = {}
    for item in graph.inputs:
        name = mapping.get(item.name) or item.field or item.name
        if name not in sample.fields and item.name in sample.fields:  # examples may name the input itself
            name = item.name
        if name not in sample.fields:
            raise DataError(
                f"input '{item.name}' reads field '{name}', which the data do not have "
                f"(fields: {', '.join(sample.fields)}); map it with ",
                Option(f"mapping={{{item.name!r}: 'FIELD'}}", f"--map {item.name}=FIELD"),
            )
        values[item.name] = sample.fields[name]
    return values


def expected_answer(graph: Graph, sample: Sample) -> str:
    if graph.answer_field and graph.answer_field != sample.answer_column:
        if graph.answer_field not in sample.fields:
            raise DataError(
                f"the output reads its answer from field '{graph.answer_field}', which the data do not have"
            )
        return sample.fields[graph.answer_field]
    return sample.answer


def check_answers(graph: Graph, samples: Sequence[Sample], metric: str | Scorer) -> None:
    """An expected answer no output can match under a built-in metric (a label the output node does not offer,
    no number for `numeric`, not JSON for `json`) would score its example 0 whatever the model says, silently:
    refused before any call, naming every row to fix. So are data with no answer at all (no answer column)."""
    if not isinstance(metric, str) or metric in graph.metrics:
        return
    if samples and not graph.answer_field and not any(s.answer for s in samples):
        fields = _shown_fields(graph, samples)
        raise DataError(
            f"{samples[0].where}: no example has an expected output: the data have no column named "
            f"{', '.join(ANSWER_COLUMNS[:-1])} or {ANSWER_COLUMNS[-1]}; name the one that holds it in the pipeline, "
            f'for example output {graph.output} from "{fields[-1] if fields else "COLUMN"}" ({_listed(fields)})'
        )
    node = graph.nodes[graph.output]
    found = [(s.where, why) for s in samples if (why := _never_matched(node, metric, expected_answer(graph, s)))]
    if found:
        raise bad_samples(found)


def check_fields(graph: Graph, samples: Sequence[Sample], mapping: Mapping[str, str]) -> None:
    """Every row lacking a field an input reads, or the expected answer's, named at once by where it was read, with
    the field it may have meant; a field no row has is one cause, said once; before any call."""
    wanted = [(mapping.get(i.name) or i.field or i.name, f"input '{i.name}'", i.name) for i in graph.inputs]
    if graph.answer_field:
        wanted.append((graph.answer_field, "the expected answer", graph.answer_field))
    missing = [(s, [w for w in wanted if not s.has(w[0]) and not s.has(w[2])]) for s in samples]
    absent = [w for w in wanted if samples and all(w in lacks for _, lacks in missing)]
    if absent:
        raise _absent_fields(graph, absent, samples)
    bad = [(s.where, _row_lacks(graph, s, lacks)) for s, lacks in missing if lacks]
    if bad:
        raise bad_samples(bad, "", *_map_it([w for _, lacks in missing for w in lacks]))


def _row_lacks(graph: Graph, sample: Sample, lacks: Sequence[tuple[str, str, str]]) -> str:
    """What one row lacks (field, who reads it, the input's name), with the fields it has when they may be shown."""
    shown = _shown_fields(graph, [sample])
    said = "; ".join(f"no field '{f}' for {who}{did_you_mean(f, shown or ())}" for f, who, _ in lacks)
    return f"{said} ({_listed(shown)})"


def _absent_fields(graph: Graph, absent: Sequence[tuple[str, str, str]], samples: Sequence[Sample]) -> DataError:
    """Fields no row has (field, who reads it, the input's name): one cause each, said once, not once a row."""
    fields = _shown_fields(graph, samples)
    said = [
        f"{who} reads field '{field}', which no row has{did_you_mean(field, fields or ())}" for field, who, _ in absent
    ]
    return DataError("\n".join(said) + f" ({_listed(fields)})", *_map_it(absent))


def _shown_fields(graph: Graph, samples: Sequence[Sample]) -> list[str] | None:
    """The fields of these rows a message may name; None for those of a file the data block names outside the
    pipeline's folder (hides_fields), as `check` shows none."""
    if samples and hides_fields(graph.pipeline, samples[0].origin):
        return None
    return list(dict.fromkeys(f for s in samples for f in s.fields))


def _listed(fields: Sequence[str] | None) -> str:
    if fields is None:
        return "its fields are not shown: the file is outside the pipeline's folder"
    return f"fields: {', '.join(fields)}"


def _map_it(missing: Sequence[tuple[str, str, str]]) -> tuple[str | Option, ...]:
    """How to map the first input among the fields `missing` (field, who reads it, the input's name), if any."""
    name = next((own for _, who, own in missing if who.startswith("input")), None)
    return ("; map it with ", Option(f"mapping={{{name!r}: 'FIELD'}}", f"--map {name}=FIELD")) if name else ()


def _never_matched(node: GraphNode, metric: str, answer: str) -> str | None:
    """Why no output of `node` can ever score 1 against `answer` under a built-in metric, or None when one can."""
    return METRICS[metric].unmatchable(answer, node.name, node.type)


SAMPLES_IN_FLIGHT = 1024  # samples started and not finished: 4x the widest window (adaptive.CEILING), so the
# model is never short of calls, while a long split holds a bounded number of traces at a time


async def evaluate(
    graph: Graph,
    llm: LLM,
    samples: Sequence[Sample],
    metric: str | Scorer,
    mapping: Mapping[str, str] = MappingProxyType({}),
    on_done: Callable[[Result], None] | None = None,
    what: str | None = None,
    keep: int | None = None,
) -> Evaluation:
    """Run every sample (the LLM layer bounds concurrency; at most SAMPLES_IN_FLIGHT are started at a time); stop
    cleanly on a budget. `metric`: a built-in's name, or a Scorer (a metric that fails on one sample leaves that
    sample unscored, with why). `what`: the phase of a run it is (an optimize run's "iteration 2: gate, round 1"),
    as its span names it. `keep`: None holds every result; a number holds only the running sums and the first
    `keep` samples not answered right, so memory stays flat however long the split (`on_done` hears of each)."""
    check_fields(graph, samples, mapping)
    check_answers(graph, samples, metric)
    for sample in samples:  # a field the run cannot read is said before any call, never mid-run
        sample_inputs(graph, sample, mapping), expected_answer(graph, sample)
    tally, kept = Tally(keep), {}

    async def one(place: int, sample: Sample) -> None:
        PRIORITY.set(place + 1)  # its own task's: the samples at the front finish first (adaptive.py)
        inputs, expected = sample_inputs(graph, sample, mapping), expected_answer(graph, sample)
        with telemetry.span("sample", {"sbpc.sample.id": sample.id}) as span:
            result = await scored_sample(graph, llm, metric, sample, inputs, expected)
            span.set({"sbpc.score": None if result.lost else result.score, "sbpc.lost": result.lost})
        tally.add(place, result)
        if keep is None:
            kept[place] = result
        if on_done:
            on_done(result)

    attributes = {"sbpc.pipeline": graph.pipeline.name, "sbpc.phase": what, "sbpc.samples": len(samples)}
    with telemetry.span("evaluate", attributes) as span:
        stopped = None
        try:
            await streamed((one(place, s) for place, s in enumerate(samples)), SAMPLES_IN_FLIGHT)
        except BudgetExceeded as exc:  # the samples already scored are kept
            stopped = exc.text  # a str in the API's words, .cli in the command line's
        evaluation = Evaluation(tuple(kept[place] for place in sorted(kept)), len(samples), stopped, tally=tally)
        span.set(
            {
                "sbpc.accuracy": evaluation.accuracy,
                "sbpc.lost": tally.lost,
                "sbpc.stopped": str(stopped) if stopped else None,
            }
        )
        return evaluation


async def scored_sample(
    graph: Graph, llm: LLM, metric: str | Scorer, sample: Sample, inputs: dict[str, str], expected: str
) -> Result:
    """One sample's forward pass and its score."""
    trace = await run(graph, llm, inputs)
    if trace.final.lost:  # no answer to score, not even by a metric of the user's
        return Result(sample, expected, trace, 0.0)
    if isinstance(metric, str):
        return Result(sample, expected, trace, float(score(metric, trace.output, expected)))
    try:
        verdict = await metric(trace, sample, expected)
        return Result(sample, expected, trace, verdict.score, verdict.reason, judged=verdict.judged)
    except MetricFailed as exc:
        return Result(sample, expected, trace, 0.0, metric_error=f"{METRIC_FAILED}: {exc}", judged=exc.judged)


SPLIT_SETTINGS = (*SIZES, "seed")  # what cuts a data set into the split `eval` scores


def first_needed(graph: Graph, split: str, sizes: Mapping[str, int], limit: int | None) -> int | None:
    """The rows of a user's file `eval` needs when it scores the file whole (no size given, here or in the
    pipeline file) and `limit` cuts it: its first `limit`; None when it needs every row (a seeded split of them)."""
    whole = split == "test" and not set(sizes) & set(SPLIT_SETTINGS) and not graph.sizes_given
    return limit if whole else None


def split_to_score(graph: Graph, dataset: Dataset, split: str, sizes: Mapping[str, int]) -> tuple[Sample, ...]:
    """The samples `eval` scores: a user's file with no size given whole (as `split` "test"); otherwise the
    seeded split `optimize` would draw with these sizes (train_size, val_size, test_size, seed), so test never
    overlaps training. Sizes not given come from the pipeline's `optimize` block (test: 100) for the scored
    split and the splits cut before it from the same pool; the others are 0. When the file's sizes hold no row
    out of optimize and the caller gives none, every row."""
    for name, value in sizes.items():
        if name not in SPLIT_SETTINGS:
            raise TypeError(f"unknown split setting {name!r}{did_you_mean(name, SPLIT_SETTINGS)}")
        check(name, value)
    o = graph.optimize
    # the sizes the file gives (its data and optimize blocks) cut the data as they cut it for optimize, so the test
    # split a record is labelled with is the rows they leave, not every row
    asked = dict(sizes)
    sizes = {name: getattr(o, name) for name in sorted(graph.sizes_given)} | asked
    defaults = (o.train_size, o.val_size, EVAL_TEST_SIZE)
    placed_by_file = split == "test" and not asked and bool(graph.sizes_given)
    try:
        train, val, test = (sizes.get(f"{name}_size") for name in ("train", "val", "test"))
        scored = getattr(eval_splits(dataset, train, val, test, sizes.get("seed", o.seed), defaults, split), split)
    except DataError:
        if not placed_by_file:
            raise
        scored = ()
    if placed_by_file and not scored:
        # the file's sizes hold no row out of optimize (test_size = 0, or train and val take every row): eval scores
        # every row, as it does a file that gives no size, and says so ("every row")
        return eval_splits(dataset, None, None, None, o.seed, defaults).test
    return scored
