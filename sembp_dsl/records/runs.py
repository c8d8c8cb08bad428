"""Run records -> what a person reads: the list of runs, one run iteration by iteration (an evaluation sample by
sample), and its prompts back into a file.

Records are read through record.py and taken as they are: a run killed mid-way
has fewer iterations, no ledger and no end, and is shown as interrupted, never
as a result it did not reach.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import glob
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import SbpcError
from ..files import WriteBackError
from ..language import kinds
from ..language.blocks.method import DEFAULT, SETTINGS, SIZES
from ..language.diagnostics import PipelineError, visible
from ..language.nodes.demos import DemosError, shown
from ..language.nodes.trace import answer_words, extra_of
from ..language.syntax.source import load
from ..language.tooling.writeback import WriteBack, rewrite, unified_diff
from ..runtime.datasets import fingerprint
from .costs import Compared
from .evaluation import Samples
from .record import (
    GateDecision,
    Iteration,
    Proposal,
    Record,
    RecordError,
    RunRecord,
    RunSettings,
    sample_problem,
)

DEFAULT_RUNS_DIR = ".sbpc/runs"
SHOWN_ITEMS = 10  # the most items of a mapped node `sbpc show` lists per sample
SHOWN_SAMPLES = 100  # the most samples of an evaluation `sbpc show` prints, wrong and lost ones first
# a run line shows only the method settings that differ from sbpc's defaults (split sizes are shown elsewhere)
SHOWN = [name for name in (*SETTINGS, "only") if name not in SIZES]


class RunsError(SbpcError):
    """No such run, no such iteration, or a file the run's prompts do not fit."""


@dataclass(frozen=True)
class SampleView:
    """What a reader shows of an evaluation's samples (wrong and lost ones first), and how many there are."""

    shown: list[dict]
    samples: int
    right: int
    lost: int
    notes: list[str]
    wrong_only: bool = False

    @property
    def left_out(self) -> int:
        """The samples not shown: of the wrong and lost ones alone, when only those are asked for."""
        return (self.samples - self.right if self.wrong_only else self.samples) - len(self.shown)

    def left_out_words(self) -> str:
        which = "wrong and lost samples" if self.wrong_only else "samples"
        return f"{self.left_out} more {which} not shown (the first {len(self.shown)}, wrong and lost ones first, are)"


@dataclass(frozen=True)
class Run:
    """One run record, with the questions a reader asks of it answered in one place."""

    folder: Path
    record: Record
    raw: dict  # run.json as it is on disk (`sbpc show --json`)

    @classmethod
    def load(cls, folder: Path) -> Run:
        """The run in `folder`; RecordError when it holds no readable record."""
        record = RunRecord.load(folder)
        return cls(folder, record.data, record.raw)

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def settings(self) -> RunSettings:
        return self.record.settings

    @property
    def iterations(self) -> list[Iteration]:
        return self.record.iterations

    @property
    def data_changed(self) -> bool:
        """Whether the data files the run read hold other content now (gone, or edited since)."""
        recorded = self.settings.data_sha256
        files = (self.settings.data, self.settings.test_data, self.settings.validation_data)
        return recorded is not None and fingerprint(*files) != recorded

    @property
    def kind(self) -> str:
        """ "optimize" or "eval"; a record written before evaluations were kept is an optimization."""
        return self.record.kind

    @property
    def evaluation(self) -> dict:
        """An evaluation's split, metric, score and samples, as checked against run.schema.json."""
        return self.record.evaluation or {}

    def samples(self) -> Samples:
        """An evaluation's samples, read as they are iterated: from its samples file, or an older record's list."""
        named = self.evaluation.get("samples_file")
        if named is None:
            return Samples(inline=self.evaluation.get("samples", []))
        if not isinstance(named, str) or Path(named).name != named or named in ("", ".", ".."):
            raise RunsError(f"{self.folder / 'run.json'}: not a run record (its samples_file is not a file's name)")
        return Samples(self.folder / named)

    def view(self, most: int, wrong_only: bool = False) -> SampleView:
        """What a reader shows of the evaluation's samples, found in one pass over them: the first `most` wrong and
        lost ones, then (unless `wrong_only`) the first right ones up to `most` in all, each checked against
        run.schema.json; and how many there are of each (the summary's, when the evaluation ended: the pass then
        stops once `most` wrong ones are found). A cut-off last line is left out and said in `notes`."""
        samples, wrong, right = self.samples(), list[dict](), list[dict]()
        known = self.evaluation.get("counts")
        counts = {"samples": 0, "right": 0, "lost": 0}
        try:
            for sample in samples:
                if known is not None and len(wrong) >= most:
                    break
                counts["samples"] += 1
                counts["lost"] += bool(sample.get("lost"))
                good = is_right(sample)
                counts["right"] += good
                kept = right if good else wrong
                if len(kept) < most and not (good and wrong_only):
                    kept.append(sample)
        except RecordError as exc:
            raise RunsError(str(exc)) from None
        shown = wrong[:most] + right[: max(0, most - len(wrong))]
        for sample in shown:
            if problem := sample_problem(sample):
                raise RunsError(f"{self.folder}: not a run record (sample {sample.get('id')!r}: {problem})")
        counts = dict(known or counts)
        return SampleView(shown, counts["samples"], counts["right"], counts["lost"], list(samples.notes), wrong_only)

    @functools.cached_property
    def counts(self) -> tuple[int, int, int]:
        """An evaluation's samples, those answered right and those lost: from its summary, or (an evaluation
        stopped before it wrote one) counted from its samples."""
        counts = self.evaluation.get("counts")
        if counts is not None:
            return counts["samples"], counts["right"], counts["lost"]
        seen = self.view(0)
        return seen.samples, seen.right, seen.lost

    @property
    def started(self) -> str:
        """When the run began, from its folder name (YYYYmmdd-HHMMSS-...), else the record's time."""
        match = re.match(r"(\d{8}-\d{6})", self.name)
        with contextlib.suppress(ValueError):  # a name like a date that is none (month 13): the record's time
            if match:
                return time.strftime("%Y-%m-%d %H:%M:%S", time.strptime(match.group(1), "%Y%m%d-%H%M%S"))
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime((self.folder / "run.json").stat().st_mtime))

    @property
    def status(self) -> str:
        """finished | stopped: <why> | interrupted after k of n iterations."""
        if self.record.finished:
            return "finished"
        if self.record.stopped:
            return f"stopped: {self.record.stopped}"
        if self.kind == "eval":
            return f"interrupted after {self.counts[0]} samples (sbpc eval --resume goes on from them)"
        return f"interrupted after {len(self.iterations)} of {self.settings.method.iterations} iterations"

    def prompts_at(self, k: int) -> dict[str, str]:
        """The prompts after iteration k; 0 is the run's initial prompts."""
        if not 0 <= k <= len(self.iterations):
            raise RunsError(f"{self.name} has iterations 0 to {len(self.iterations)} (0: the initial prompts), not {k}")
        return dict(self.iterations[k - 1].prompts) if k else dict(self.record.initial_prompts)

    def not_run(self) -> int:
        """Iterations an unfinished run was asked for but did not reach."""
        return 0 if self.record.finished else max(0, self.settings.method.iterations - len(self.iterations))

    def changed_settings(self) -> dict:
        """The method settings that differ from sbpc's defaults, and the models."""
        method = self.settings.method
        out = {
            name: list(value) if name == "only" else value
            for name in SHOWN
            if self.kind == "optimize" and (value := getattr(method, name)) != getattr(DEFAULT, name)
        }  # an evaluation ran no method: only its models
        models = self.settings.models
        if len(set(models.values())) == 1:
            out["model"] = next(iter(models.values()))
        else:
            out.update({f"{role}_model": name for role, name in models.items()})
        return out

    def settings_words(self) -> str:
        """The changed settings as the command line writes them (only=a,b), not as Python prints a list."""
        words = (
            f"{k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
            for k, v in self.changed_settings().items()
        )
        return " ".join(words) or "defaults"

    def scores_words(self) -> tuple[str, str]:
        """The gate score initial -> best, and the test score initial -> final ("-" without a test split)."""
        test = self.record.test
        tested = f"{fmt(test.initial)} -> {fmt(test.final)}" if test else "-"
        return f"{fmt(self.record.initial_score)} -> {fmt(self.record.best_score)}", tested

    def per_1000_words(self) -> str | None:
        """What 1,000 samples cost the pipeline, initial -> kept, measured on the gate samples both ran, or None
        when unknown."""
        kept = self.record.cost_kept()
        if kept is None:
            initial = self.record.initial_per_1000
            return None if initial is None else f"${initial:.4f} -> unknown"
        return kept.words()

    def summary(self) -> dict:
        """One run in a line's worth of facts (`sbpc runs --json`)."""
        record = self.record
        if self.kind == "eval":
            return {
                "run": self.name,
                "kind": "eval",
                "folder": str(self.folder),
                "started": self.started,
                "file": self.settings.file,
                "data": self.settings.data,
                "data_changed": self.data_changed,
                "split": self.evaluation.get("split"),
                "metric": self.evaluation.get("metric"),
                "settings": self.changed_settings(),
                "score": self.evaluation.get("score"),
                "scored": self.evaluation.get("scored"),
                "calls": record.calls,
                "tokens": record.tokens,
                "cost": record.cost,
                "finished": record.finished,
                "status": self.status,
            }
        return {
            "run": self.name,
            "kind": "optimize",
            "folder": str(self.folder),
            "started": self.started,
            "file": self.settings.file,
            "data": self.settings.data,
            "data_changed": self.data_changed,
            "settings": self.changed_settings(),
            "iterations": len(self.iterations),
            "initial_score": record.initial_score,
            "best_score": record.best_score,
            "test": asdict(record.test) if record.test else None,
            "calls": record.calls,
            "tokens": record.tokens,
            "cost": record.cost,
            "finished": record.finished,
            "status": self.status,
        }


def find_runs(runs_dir: str | Path = DEFAULT_RUNS_DIR) -> tuple[list[Run], list[str]]:
    """Every run in the folder, oldest first, and why each other folder in it holds no readable run record."""
    if Path(runs_dir).exists() and not Path(runs_dir).is_dir():
        raise RunsError(f"--runs-dir {runs_dir} is a file, not a folder of run records")
    runs, unreadable = [], []
    for folder in sorted(Path(runs_dir).glob("*")):
        if not folder.is_dir():
            continue
        try:
            runs.append(Run.load(folder))
        except RecordError as exc:
            unreadable.append(str(exc))
    return runs, unreadable


def resolve(spec: str, runs_dir: str | Path = DEFAULT_RUNS_DIR) -> Run:
    """RUN as the user gives it: a run folder, the number `sbpc runs` shows (-1: the newest), or a name prefix."""
    path = Path(spec)
    if _exists(path / "run.json"):  # a FIFO too: reading it says why it is no record, and never waits on it
        return _load(path)
    if path.name == "run.json" and _exists(path):
        return _load(path.parent)
    runs, _ = find_runs(runs_dir)
    numbered = _numbered(spec, runs)
    if numbered is not None:
        return numbered
    matches = [r for r in runs if r.name.startswith(spec)]  # digits beyond the run count: the start of a date
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise RunsError(f"'{spec}' names {len(matches)} runs in {runs_dir}: {', '.join(r.name for r in matches)}")
    raise _no_run(spec, runs, runs_dir)


def _numbered(spec: str, runs: list[Run]) -> Run | None:
    """The run `sbpc runs` shows as number `spec`, counted from the end when negative (None: no such number)."""
    if not re.fullmatch(r"-?\d+", spec):
        return None
    index = int(spec)
    if 1 <= index <= len(runs):
        return runs[index - 1]
    if -len(runs) <= index <= -1:
        return runs[index]
    return None


def _no_run(spec: str, runs: list[Run], runs_dir: str | Path) -> RunsError:
    """Why no run is `spec`; a record `sbpc runs` lists as unreadable that it names raises why it is unreadable."""
    named = spec and os.sep not in spec and spec not in (".", "..")  # a name to look for, not a path
    unreadable = [f for f in Path(runs_dir).glob(glob.escape(spec) + "*") if f.is_dir()] if named else []
    if len(unreadable) == 1:
        _load(unreadable[0])
    if re.fullmatch(r"-?\d+", spec):
        return RunsError(f"no run number {spec} in {runs_dir} ({len(runs)} run(s); `sbpc runs` lists them)")
    close = difflib.get_close_matches(spec, [r.name for r in runs], n=1)
    hint = f"; did you mean '{close[0]}'?" if close else " (`sbpc runs` lists them)"
    return RunsError(f"no run '{spec}' in {runs_dir}{hint}")


def _exists(path: Path) -> bool:
    """False for what cannot be there, a name too long for the file system included (no OSError)."""
    try:
        return path.exists()
    except OSError:
        return False


def _load(folder: Path) -> Run:
    try:
        return Run.load(folder)
    except RecordError as exc:
        raise RunsError(str(exc))


# --- words ------------------------------------------------------------------------------------


# Word pairs the diff may compare: SequenceMatcher's time grows with the product of the lengths, and a
# reply is a stranger's text (60,000 words took 8 minutes). Past it the changed middle is shown whole.
MOST_WORD_PAIRS = 4_000_000


def word_diff(old: str, new: str) -> list[tuple[str, str]]:
    """`new` against `old` word by word: ("=", same) ("-", removed) ("+", added), whitespace kept with its word.

    The common start and end are matched in linear time; the changed middle word by word when that is
    cheap enough, else as one removal and one addition.
    """
    a, b = re.findall(r"\S+\s*|\s+", old), re.findall(r"\S+\s*|\s+", new)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    ops: list[tuple[str, str]] = [("=", "".join(a[:head]))] if head else []
    if len(a_mid) * len(b_mid) <= MOST_WORD_PAIRS:
        matcher = difflib.SequenceMatcher(None, a_mid, b_mid, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                ops.append(("=", "".join(a_mid[i1:i2])))
                continue
            if i2 > i1:
                ops.append(("-", "".join(a_mid[i1:i2])))
            if j2 > j1:
                ops.append(("+", "".join(b_mid[j1:j2])))
    else:
        ops += [op for op in (("-", "".join(a_mid)), ("+", "".join(b_mid))) if op[1]]
    if tail:
        ops.append(("=", "".join(a[len(a) - tail :])))
    return ops


def plain_word_diff(old: str, new: str) -> str:
    """The word diff as git prints it with --word-diff=plain: [-removed-]{+added+}."""
    marks = {"=": "{}", "-": "[-{}-]", "+": "{{+{}+}}"}
    return "".join(marks[op].format(text) for op, text in word_diff(old, new))


def is_right(sample: dict) -> bool:
    """A sample of an evaluation answered right: scored in full, not lost."""
    return sample["score"] >= 1.0 and not sample.get("lost")


def fmt(score: float | None) -> str:
    """A score as shown: three decimals, "-" when there is none (and as it is, if a record holds something else)."""
    if score is None:
        return "-"
    return f"{score:.3f}" if isinstance(score, (int, float)) else str(score)


# --- the terminal -------------------------------------------------------------------------------


def render_list(runs: list[Run], unreadable: Sequence[str] = (), folder: str = "") -> str:
    """One line a run; with none, where it looked, since runs are kept where `sbpc optimize` was started."""
    nowhere = f"no runs in {os.path.abspath(folder)} (runs are kept where sbpc optimize ran: give --runs-dir)"
    lines = [] if runs else [nowhere]
    for number, run in enumerate(runs, 1):
        spent = f"{run.record.calls} calls  ${run.record.cost:.4f}  {run.status}"
        data = f"{run.settings.data} (changed since)" if run.data_changed else run.settings.data
        if run.kind == "eval":
            lines.append(
                f"{number:>3}  eval      {run.started}  {run.settings.file}  {data}/"
                f"{run.evaluation.get('split')}  [{run.settings_words()}]  score {eval_score(run)}  {spent}"
            )
            continue
        gate, test = run.scores_words()
        lines.append(
            f"{number:>3}  optimize  {run.started}  {run.settings.file}  {data}  "
            f"[{run.settings_words()}]  gate {gate}  test {test}  {spent}"
        )
    lines += [f"unreadable {reason}" for reason in unreadable]
    return visible("\n".join(lines))


def eval_score(run: Run) -> str:
    """An evaluation's score with the samples it counts: "0.750 (3/4 right)", and the lost ones."""
    samples, right, lost = run.counts
    return f"{fmt(run.evaluation.get('score'))} ({right}/{samples - lost} right{f', {lost} lost' if lost else ''})"


def sample_verdict(sample: dict) -> str:
    return "right" if is_right(sample) else "lost" if sample.get("lost") else "wrong"


def sample_score(sample: dict) -> str:
    """A sample's score as shown: "-" for a lost one, which has none (its record holds 0)."""
    return "-" if sample.get("lost") else fmt(sample.get("score"))


def render_eval(run: Run, wrong_only: bool = False) -> str:
    """An evaluation sample by sample, wrong and lost ones first: inputs, expected, output, and each node's reply
    (the first SHOWN_SAMPLES, saying how many more there are)."""
    e, seen = run.evaluation, run.view(SHOWN_SAMPLES, wrong_only)
    lines = [
        f"eval {run.name}  ({run.folder})",
        f"  {run.settings.file} on {run.settings.data}/{e.get('split')}, metric {e.get('metric')}, "
        f"started {run.started}; {run.status}",
        "  settings: " + run.settings_words(),
        f"  score: {eval_score(run)}",
        f"  {run.record.spent_words()}",
        *(f"  note: {note}" for note in seen.notes),
    ]
    for sample in seen.shown:
        error = f"  ({sample['error']})" if sample.get("error") else ""
        score = "" if sample.get("lost") else f"score {fmt(sample['score'])}  "
        lines.append(
            f"\n{sample_verdict(sample)}: {sample['id']}  {score}"
            f"expected {sample.get('expected')!r}, got {answer_words(sample.get('output'))}{error}"
        )
        lines += [_indent(f"{name}: {value}", "    ") for name, value in sample.get("inputs", {}).items()]
        if sample.get("reason"):
            lines.append(_indent(f"why: {sample['reason']}", "    "))
        if sample.get("judge"):
            lines.append(_indent(f"the judge replied: {_excerpt(sample['judge'].get('reply', ''))}", "    "))
        for node, trace in sample.get("nodes", {}).items():
            lines += node_lines(node, trace, "    ")
    if seen.left_out:
        lines.append(f"\n... {seen.left_out_words()} (every one is in {run.samples().path or 'run.json'})")
    return visible("\n".join(lines))


def node_lines(name: str, trace: Mapping, indent: str) -> list[str]:
    """A recorded node as `sbpc show` says it: the start of its reply and what its kind says of its own data,
    then each mapped item's the same way (the first SHOWN_ITEMS); a node its sample's branch skipped, said so."""
    if trace.get("taken") is False:
        return [f"{indent}{name}: not taken (a branch this sample did not take)"]
    lines = [_indent(f"{name} replied: {_excerpt(str(trace.get('reply', '')))}", indent)]
    lines += [_indent(part.text, indent + "  ") for part in kinds.shown(extra_of(trace))]
    items = trace.get("items") or []
    for k, item in enumerate(items[:SHOWN_ITEMS], start=1):
        lines += node_lines(f"item {k}", item, indent + "  ")
    if len(items) > SHOWN_ITEMS:
        lines.append(f"{indent}  ... {len(items) - SHOWN_ITEMS} more items (`sbpc report` shows them all)")
    return lines


def render_show(run: Run, wrong_only: bool = False) -> str:
    """The run iteration by iteration: scores, candidates with fates and word diffs, the gradients behind them.
    An evaluation sample by sample (`wrong_only`: its wrong and lost samples alone)."""
    if run.kind == "eval":
        return render_eval(run, wrong_only)
    record, s = run.record, run.settings
    lines = [
        f"run {run.name}  ({run.folder})",
        f"  {s.file} on {s.data}, started {run.started}; {run.status}",
        "  settings: " + run.settings_words(),
        f"  gate score: initial {fmt(record.initial_score)}, best {fmt(record.best_score)}",
    ]
    if record.test:
        lines.append(f"  test ({record.test.samples} samples): " + run.scores_words()[1])
    lines.append(f"  {record.spent_words()}")
    if per_1000 := run.per_1000_words():
        lines.append(f"  the pipeline per 1,000 samples: {per_1000}")
    for it in run.iterations:
        lines.append("")
        lines.extend(render_iteration(run, it))
    if run.not_run():
        lines.append(f"\n({run.not_run()} iteration(s) not run)")
    return visible("\n".join(lines))


def verdict(it: Iteration) -> str:
    """What became of an iteration's step, in words."""
    return "accepted" if it.accepted else (f"kept old ({it.note})" if it.note else "rejected")


def spend(it: Iteration) -> str:
    """What the iteration's calls cost, and what 1,000 samples cost the pipeline its gate evaluated."""
    return f"{it.calls} calls, {it.tokens} tokens, ${it.cost:.4f}{step_cost(it)}"


def step_cost(it: Iteration) -> str:
    """What 1,000 samples cost the step's pipeline: against the one it was gated against, on the same samples,
    where the record has both."""
    if it.per_1000 is None:
        return ""
    if it.per_1000_before is None or it.per_1000_samples is None:
        return f"; that pipeline ${it.per_1000:.4f} per 1,000 samples"
    measured = Compared(it.per_1000_before, it.per_1000, it.per_1000_samples).words()
    return f"; per 1,000 samples, the pipeline before -> with the step: {measured}"


def train_words(it: Iteration, size: int) -> str:
    """An iteration's training score, over the samples it knew the outcome of, saying of how many when not all."""
    part = "" if it.train_samples is None or it.train_samples >= size else f" on {it.train_samples} of {size}"
    return f"train {fmt(it.train_score)}{part}"


def counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def gate_tally(gate: GateDecision) -> str:
    """Wins, losses and p as the gate counted them ("so far" when it stopped before the end of its split); no p at
    gate_alpha 1, where the rule is wins beating losses and p plays no part."""
    so_far = " so far" if gate.stopped_early else ""
    p = "" if gate.alpha >= 1 else f", p = {fmt(gate.p)}"
    return f"{counted(len(gate.wins), 'win', 'wins')}, {counted(len(gate.losses), 'loss', 'losses')}{so_far}{p}"


def gate_settled(gate: GateDecision) -> str:
    """After how many samples the gate's decision was settled, when that was before the end of its split."""
    decided, size = gate.decided_after, gate.of
    current = f", and {gate.current} of the current prompts where unknown" if gate.current else ""
    cancelled = f"; {len(gate.cancelled)} in flight then cancelled" if gate.cancelled else ""
    if decided is None or decided == size:
        return ""
    return f" (settled after {decided} of {size} samples{current}{cancelled})"


def gate_unreadable(gate: GateDecision) -> str:
    """Why a step may have failed that no score shows: the proposal's answers could not be read."""
    if not gate.unreadable:
        return ""
    samples = gate.samples if gate.samples is not None else gate.of
    return (
        f"; {len(gate.unreadable)} of {samples} answers could not be read (a candidate may have dropped the "
        "instruction that says how to answer)"
    )


def noninferiority_words(gate: GateDecision) -> str:
    """A non-inferiority gate's figures: the samples it counted, z against the exact critical value at the step's
    level, and the margin left once the step's own lost samples are charged."""
    lost = f", {len(gate.own_lost)} lost by the step leave a margin of {gate.margin_left:g}" if gate.own_lost else ""
    if gate.alpha >= 1:
        return f" on {gate.answered} answered{lost}; at gate_alpha 1 the mean must not fall"
    if gate.z is None or gate.critical is None:
        return f" on {gate.answered} answered{lost}: no outcome can pass at {gate.alpha:.3g}"
    sign = ">=" if gate.z >= gate.critical else "<"
    return (
        f" on {gate.answered} answered{lost}; z = {gate.z:.2f} {sign} {gate.critical:.2f} (exact, at {gate.alpha:.3g})"
    )


def gate_words(it: Iteration) -> str | None:
    """The gate's decision of an iteration, or None when no proposal met the gate."""
    gate = it.gate
    if not gate:
        return None
    scores = f"gate {fmt(it.gate_before)} -> {fmt(it.gate_after)}"
    if it.gate_after is None and gate.stopped_early:
        scores = f"gate {fmt(it.gate_before)} -> not scored (stopped once settled)"
    rule = f"alpha {gate.alpha:.3g}" + (
        f", its share of the run's gate_alpha {gate.run_alpha:g}"
        if gate.run_alpha is not None and gate.run_alpha != gate.alpha
        else ""
    )
    if gate.margin is not None:
        start = " against the run's start" if gate.baseline == "start" else ""
        rule += f", non-inferiority margin {gate.margin}{start}"
    figures = noninferiority_words(gate) if gate.test is not None else ""
    return f"{scores}: {gate_tally(gate)}{figures} ({rule}){gate_settled(gate)}{gate_unreadable(gate)}"


def render_iteration(run: Run, it: Iteration) -> list[str]:
    lines = [
        f"iteration {it.index}: {train_words(it, run.record.settings.method.train_size)}, {verdict(it)}; {spend(it)}"
    ]
    if words := gate_words(it):
        lines.append("  " + words)
    if it.lost:
        lines.append(f"  {it.lost} training sample(s) lost to failed calls")
    before = run.prompts_at(it.index - 1)
    for c in it.candidates:
        by = f"  [{c.strategy}]" if c.strategy else ""  # the strategy that proposed it
        lines.append(f"  candidate for {c.param}: {c.fate}{by}")
        if is_demos(c):
            lines += [_indent(text, "      ") for text in demos_words(c)]
        elif c.new is not None and c.param in before:
            lines.append(_indent(plain_word_diff(before.get(c.param, ""), c.new), "      "))
        else:
            lines.append(_indent("reply: " + _excerpt(c.reply or ""), "      "))
    for g in it.gradients:
        lines.append(f"  gradients from sample {g.sample} (expected {g.expected!r}, got {answer_words(g.output)}):")
        for node, text in g.nodes.items():
            lines.append(_indent(f"{node}: {text}", "      "))
    return lines


def is_demos(candidate: Proposal) -> bool:
    """A set of examples for a demos param, not a prompt: it has no optimizer reply."""
    return bool(candidate.samples) or candidate.reply is None


def demos_words(candidate: Proposal) -> list[str]:
    """Where a set of examples came from, and the examples as the prompt shows them."""
    left_out = [f"left out, as the pipeline file cannot hold it: sample {why}" for why in candidate.left_out]
    if candidate.new is None:
        return left_out
    try:
        examples = str(shown(candidate.new))
    except DemosError:
        examples = candidate.new
    return [
        f"{len(candidate.samples)} examples, from the training samples {', '.join(candidate.samples)}: each answered "
        "right by the whole pipeline, the node's inputs and its answer there",
        *left_out,
        examples,
    ]


def _excerpt(text: str, lines: int = 6) -> str:
    """The start of a long reply: its first lines, and how much was left out (`sbpc report` shows it whole)."""
    rows = text.strip().splitlines()
    cut = "\n".join(row[:200] for row in rows[:lines])
    return cut + (f"\n[... {len(rows) - lines} more lines]" if len(rows) > lines else "")


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines() or [""])


# --- back into a file ---------------------------------------------------------------------------


def apply(run: Run, k: int | None = None, file: str | None = None) -> tuple[str, str, str | None]:
    """Iteration k's prompts written into FILE by optimize's own write-back: (where written, diff, notice).

    By default the run's last iteration (the prompts it ended with) and the file it optimized."""
    file = file or run.settings.file
    prompts = run.prompts_at(len(run.iterations) if k is None else k)
    pipeline = load(file)
    params = {p.name for p in pipeline.params}
    unknown = sorted(set(prompts) - params)
    if unknown:
        raise RunsError(f"{file} has no param {', '.join(unknown)}: run {run.name} optimized {run.settings.file}")
    try:
        diff = unified_diff(pipeline.text, rewrite(pipeline, prompts), file)
        writer = WriteBack(pipeline)
        notice = writer(prompts) if diff else None
    except WriteBackError as exc:
        raise RunsError(f"{file}: {exc}")
    return str(writer.target), diff, notice


def final_diff(run: Run) -> str | None:
    """The source file's diff from the run's initial to its final prompts, if the file is still there to render it."""
    file = run.settings.file
    try:
        pipeline = load(file)
        final = run.prompts_at(len(run.iterations))
        if not set(final) <= {p.name for p in pipeline.params}:
            return None
        return unified_diff(rewrite(pipeline, run.prompts_at(0)), rewrite(pipeline, final), file)
    except (OSError, PipelineError, WriteBackError, TypeError):
        return None


def prompt_changes(run: Run) -> Mapping[str, tuple[str, str]]:
    """Param -> (initial, final) for every prompt the run changed: the diff when the source file is gone."""
    first, last = run.prompts_at(0), run.prompts_at(len(run.iterations))
    return {name: (first.get(name, ""), text) for name, text in last.items() if first.get(name) != text}
