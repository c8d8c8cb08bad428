"""Run records: what a run was asked to do and what it did, one folder per run.

`run.json` holds a `Record`: the settings, scores and every candidate with its fate. Its shape is
`run.schema.json`, beside this module; every record is written and read here, checked against that
schema, so the readers (`sbpc runs`, `show`, `apply`, `report`, `--resume`) work on typed fields and a
record they cannot read is one line saying where it is wrong. It is rewritten atomically after every
iteration, so a killed run keeps what it had and `--resume` can continue it. An evaluation is a run too
(`kind` "eval"): the prompts it scored and its summary, and every sample with each node's prompt and reply in a JSON
Lines file beside it (evaluation.py), a line written as each sample finishes. No secrets: credentials inside URLs are
masked.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Option, OptionError, option
from ..files import atomic_write, finish_write, interrupted_write, read_current
from ..language.blocks.method import Method, SettingError
from .costs import Compared, compared, per_thousand
from .schema import Check, Problem, compile_schema

if TYPE_CHECKING:  # the runtime and its model layer (aiohttp) are no reader's to import
    pass

VERSION = 5  # 1: records without a version (their gate "validation" is the val gate); 2: no demos candidates;
# 3: training scores over the whole split, an accepted gate completed unless on the last iteration; 4: an evaluation's
# samples inside run.json (from 5 on, in samples.jsonl beside it)
SCHEMA: dict = json.loads((Path(__file__).parent / "run.schema.json").read_text(encoding="utf-8"))


LISTS = ("only", "models", "strategies")  # the method's settings that are lists
MOVES = "node_models"  # the method's `models` (the models a node may move to), as run.json names it


@dataclass(frozen=True)
class RunSettings:
    """What a run was asked to do; a resumed run must be asked the same."""

    file: str
    data: str | None  # a data set's name or path, or "examples" for examples given in Python
    method: Method  # the sizes are those of the splits drawn
    models: Mapping[str, str]  # role -> model name
    test_data: str | None = None  # a separate test file (--test-data)
    data_sha256: str | None = None  # of the data files' content (runtime/datasets.fingerprint), to tell a change
    validation_data: str | None = None  # the validation split's own file (the data block's `validation = "..."`)

    def recorded(self) -> dict:
        """As written in run.json, one flat object: plain JSON, credentials inside URLs masked."""
        method = {name: list(value) if name in LISTS else value for name, value in asdict(self.method).items()}
        method[MOVES] = method.pop("models")  # `models` holds the run's model of each role
        flat = {
            "file": self.file,
            "data": self.data,
            **method,
            "models": dict(self.models),
            "test_data": self.test_data,
            **({"data_sha256": self.data_sha256} if self.data_sha256 else {}),
            **({"validation_data": self.validation_data} if self.validation_data else {}),
        }
        return json.loads(json.dumps(public(flat)))

    @classmethod
    def read(cls, flat: Mapping[str, Any]) -> RunSettings:
        """The settings of a checked record; a method setting it lacks is sbpc's default."""
        given = {**flat, "models": flat.get(MOVES, ())}
        method = Method(**{f.name: given[f.name] for f in fields(Method) if f.name in given})
        return cls(
            flat["file"],
            flat.get("data"),
            method,
            dict(flat.get("models", {})),
            flat.get("test_data"),
            flat.get("data_sha256"),
            flat.get("validation_data"),
        )


@dataclass
class Proposal:
    """A candidate prompt (or set of demos) an iteration proposed, and its fate ("taken", or why it was rejected)."""

    param: str
    fate: str
    new: str | None = None  # None: the optimizer's reply held no usable prompt; of demos, the examples' JSON
    reply: str | None = None
    samples: list[str] = field(default_factory=list)  # of demos: the training samples its examples come from
    strategy: str | None = None  # the strategy that proposed it (learning/strategies.py)
    left_out: list[str] = field(default_factory=list)  # of demos: "sample: why" for each example the file cannot hold


@dataclass
class Feedback:
    """The gradients learnt from one wrong training sample: node -> the feedback it received."""

    sample: str
    expected: str
    output: str | None = None
    nodes: dict[str, str] = field(default_factory=dict)


@dataclass
class GateDecision:
    """The gate's sample-by-sample verdict on a step (learning/gate.py): sample ids won and lost, the sign test's
    p against alpha, the samples lost to failed calls and those the proposal got right, so far; how many samples
    it scored, after how many its decision was settled, of how many, in how many rounds."""

    wins: list[str]
    losses: list[str]
    p: float
    alpha: float
    margin: float | None = None  # a non-inferiority gate's margin (None: the step had to score higher)
    lost: list[str] = field(default_factory=list)
    right: list[str] = field(default_factory=list)
    partial: dict[str, float] = field(default_factory=dict)  # the proposal's scores between 0 and 1, by sample
    gain: float | None = None  # with partial credit, the sum of the score changes (None: wins - losses)
    samples: int | None = None  # None: a record from before the gate stopped once settled (it scored them all)
    decided_after: int | None = None
    of: int | None = None
    rounds: int | None = None
    unreadable: list[str] = field(default_factory=list)  # samples whose answers could not be read
    evaluated: list[str] | None = None  # the samples the proposal was evaluated on (None: an older record's)
    current: int = 0  # evaluations of the current prompts it needed, where their score was unknown
    held_out: list[str] = field(default_factory=list)  # gated on training: the samples the step's examples came from
    cancelled: list[str] = field(default_factory=list)  # in flight when the decision was settled: left unknown
    run_alpha: float | None = None  # the run's rate of accepting a step not truly better, `alpha` this gate's share
    baseline: str | None = None  # "start": tested against the pipeline the run started from (None: the current one)
    test: str | None = None  # a non-inferiority gate's test; the fields below are its figures
    answered: int | None = None  # samples scored on both sides: those the test counts
    own_lost: list[str] = field(default_factory=list)  # lost on the step's side: charged to the margin
    margin_left: float | None = None  # the margin less the share of the split the step lost
    z: float | None = None  # the score statistic (None: no sample counted, or no margin left)
    critical: float | None = None  # the least z that passes at exact size alpha (None: no outcome can)

    def __repr__(self) -> str:  # the sample ids it lists run long
        settled = f", settled after {self.samples} of {self.of} samples" if self.stopped_early else ""
        return (
            f"<GateDecision: {len(self.wins)} win{'s' * (len(self.wins) != 1)}, {len(self.losses)} "
            f"loss{'es' * (len(self.losses) != 1)}, p = {self.p:.3f} (gate_alpha {self.alpha:g}){settled}>"
        )

    @property
    def stopped_early(self) -> bool:
        """It stopped once its decision was settled, before the end of its split."""
        return self.samples is not None and self.of is not None and self.samples < self.of


@dataclass
class Iteration:
    index: int
    train_score: float | None = None  # over the training samples whose outcome the iteration knew
    gate_before: float | None = None
    gate_after: float | None = None
    accepted: bool = False
    prompts: dict[str, str] = field(default_factory=dict)  # the current prompts after this iteration
    candidates: list[Proposal] = field(default_factory=list)
    gradients: list[Feedback] = field(default_factory=list)
    gate: GateDecision | None = None  # None: no proposal met the gate
    lost: int = 0  # training samples lost to failed calls
    reused: bool = False  # the error draw evaluated nothing: the results the run had held its errors
    train_samples: int | None = None  # how many those were (None: an older record's, over the whole split)
    note: str = ""
    calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    per_1000: float | None = None  # dollars 1,000 samples cost the step's pipeline (learning/pricing)
    per_1000_before: float | None = None  # and the pipeline it was gated against, on the same samples
    per_1000_samples: int | None = None  # how many samples both figures are over (None: per_1000 over its own)
    costs: dict[str, float] = field(default_factory=dict)  # dollars each gate sample cost the step's pipeline

    def __repr__(self) -> str:  # its prompts, candidates and gradients run long
        gate = "" if self.gate is None else f", gate {self.gate!r}"
        return (
            f"<Iteration {self.index}: {'accepted' if self.accepted else 'kept old'}, "
            f"{len(self.candidates)} candidate{'s' * (len(self.candidates) != 1)}{gate}>"
        )

    def reject_taken(self, fate: str) -> None:
        """The candidates the step took share its fate when the step is not kept."""
        for candidate in self.candidates:
            if candidate.fate == "taken":
                candidate.fate = fate

    def accept(self, prompts: Mapping[str, str]) -> None:
        """The step was kept: these are the run's prompts from now on."""
        self.accepted, self.prompts = True, dict(prompts)

    def spent(self, calls: int, tokens: int, cost: float) -> None:
        """What the iteration's calls cost, counted by the caller's ledger."""
        self.calls, self.tokens, self.cost = calls, tokens, cost


@dataclass
class TestScores:
    initial: float | None
    final: float | None
    samples: int | None = None


@dataclass
class Record:
    """What run.json holds (run.schema.json). A run killed early has fewer iterations, no ledger and no end."""

    settings: RunSettings
    initial_prompts: dict[str, str] = field(default_factory=dict)
    initial_score: float | None = None  # on the gate split; None before it is known, or without a gate
    initial_right: list[str] = field(default_factory=list)  # the gate samples the initial prompts got right
    initial_partial: dict[str, float] = field(default_factory=dict)  # and their scores between 0 and 1
    initial_lost: list[str] = field(default_factory=list)  # and those they lost (unknown, not wrong)
    initial_per_1000: float | None = None  # dollars 1,000 samples cost the initial pipeline (learning/pricing)
    initial_costs: dict[str, float] = field(default_factory=dict)  # dollars each gate sample cost it
    iterations: list[Iteration] = field(default_factory=list)
    finished: bool = False
    stopped: str | None = None  # why the run ended early, in the command line's words
    ledger: dict | None = None  # Ledger.to_json of the whole run, over all its sessions
    test: TestScores | None = None
    source_sha256: list[str] = field(default_factory=list)  # the texts the run may have left in its file
    kind: str = "optimize"  # or "eval": initial_prompts are the prompts it scored
    evaluation: dict | None = None  # an evaluation's split, metric, score and samples (run.schema.json)

    def kept(self) -> list[tuple[int, Iteration | None]]:
        """(iterations done, the step whose prompts the run kept then: None for the initial ones), from 0 on. The
        one rule of what a run keeps: the last step the gate accepted, else the initial prompts."""
        step: Iteration | None = None
        out: list[tuple[int, Iteration | None]] = [(0, None)]
        for it in self.iterations:
            if it.accepted and it.gate is not None:
                step = it
            out.append((it.index, step))
        return out

    def gate_scores(self) -> list[tuple[int, float]]:
        """(iterations done, the gate score of the prompts kept then); none without a gate, and none for a step
        whose gate stopped once settled (it did not score its whole split)."""
        if self.initial_score is None:
            return []
        scores = [(done, self.initial_score if step is None else step.gate_after) for done, step in self.kept()]
        return [(done, score) for done, score in scores if score is not None]

    def kept_per_1000(self) -> list[tuple[int, float | None]]:
        """(iterations done, dollars 1,000 samples cost the pipeline kept then: None where unknown)."""
        return [(done, self.initial_per_1000 if step is None else step.per_1000) for done, step in self.kept()]

    def cost_kept(self) -> Compared | None:
        """What 1,000 samples cost the initial pipeline and the one the run kept, on the gate samples both ran
        (a record without per-sample costs: each on its own samples, `samples` None); None when unknown."""
        step = self.kept()[-1][1]
        if step is None:
            return None if self.initial_per_1000 is None else Compared(self.initial_per_1000, self.initial_per_1000)
        return compared(self.initial_costs, step.costs) or (
            None
            if self.initial_per_1000 is None or step.per_1000 is None
            else Compared(self.initial_per_1000, step.per_1000)
        )

    def costs_kept(self) -> dict[str, float]:
        """Dollars each gate sample cost the pipeline the run kept, where known."""
        step = self.kept()[-1][1]
        return dict(self.initial_costs if step is None else step.costs)

    @property
    def best_score(self) -> float | None:
        """The gate score of the prompts the run ended with (None: not known)."""
        step = self.kept()[-1][1]
        return self.initial_score if step is None else step.gate_after

    def right_kept(self) -> set[str]:
        """The gate samples the kept prompts get right: the baseline a next step must beat."""
        return self.scores_kept()[0]

    def scores_kept(self) -> tuple[set[str], dict[str, float], set[str] | None, set[str]]:
        """The baseline a next step must beat: the gate samples the kept prompts get right, their scores between 0
        and 1 on others, the samples those scores are known on (None: the whole split) and those they lost
        (to failed calls or the metric); elsewhere unknown, not wrong."""
        step = self.kept()[-1][1]
        if step is None or step.gate is None:
            return set(self.initial_right), dict(self.initial_partial), None, set(self.initial_lost)
        gate = step.gate
        known = None if gate.evaluated is None else set(gate.evaluated)
        return set(gate.right), dict(gate.partial), known, set(gate.lost)

    @property
    def calls(self) -> int:
        return self.ledger["calls"] if self.ledger else sum(it.calls for it in self.iterations)

    @property
    def tokens(self) -> int:
        return self.ledger["tokens"] if self.ledger else sum(it.tokens for it in self.iterations)

    @property
    def cost(self) -> float:
        return self.ledger["cost"] if self.ledger else sum(it.cost for it in self.iterations)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the provider's prompt cache served (0 in a record from before sbpc counted them)."""
        return int((self.ledger or {}).get("cached_tokens") or 0)

    @property
    def cache_saving(self) -> float:
        """Dollars the provider's cached prompt tokens cost less than at the full rate (0 in older records)."""
        return float((self.ledger or {}).get("cache_saving") or 0.0)

    def saving_words(self) -> str:
        """What the cached tokens' lower rate saved, when it saved anything."""
        return f", ${self.cache_saving:.4f} less at its cached rate" if self.cache_saving else ""

    def spent_words(self) -> str:
        """Calls, tokens (the provider's cached ones among them, and what their cached rate saved) and dollars, in
        one line's words."""
        cached = f" ({self.cached_tokens} prompt tokens from the provider's cache{self.saving_words()})"
        cached = cached if self.cached_tokens else ""
        batch = (self.evaluation or {}).get("batch")  # an eval --batch: its calls were priced at the batch price
        batched = f" at batch prices ({len(batch['batches'])} batches)" if batch else ""
        return f"{self.calls} calls, {self.tokens} tokens{cached}, ${self.cost:.4f}{batched}"

    def to_json(self) -> dict:
        """As run.json holds it, in this sbpc's version (a record read from an older one is written anew)."""
        return {"version": VERSION, **asdict(self), "settings": self.settings.recorded()}

    @classmethod
    def read(cls, data: dict) -> Record:
        """The record in a checked run.json (`check`); a version 1 record reads the same way."""
        try:
            settings = RunSettings.read(data["settings"])
        except SettingError as exc:
            raise RecordError(f"settings: {exc}") from None
        iterations = [
            _made(
                Iteration,
                {
                    **it,
                    "candidates": [_made(Proposal, c) for c in it.get("candidates", [])],
                    "gradients": [_made(Feedback, g) for g in it.get("gradients", [])],
                    "gate": _made(GateDecision, it["gate"]) if it.get("gate") else None,
                },
            )
            for it in data.get("iterations", [])
        ]
        return _made(
            cls,
            {
                **data,
                "settings": settings,
                "iterations": iterations,
                "test": _made(TestScores, data["test"]) if data.get("test") else None,
            },
        )


def _made(kind, data: Mapping[str, Any]):
    """A record part from its checked JSON; keys it does not know (from a newer sbpc) are left out."""
    names = {f.name for f in fields(kind)}
    return kind(**{key: value for key, value in data.items() if key in names})


class RecordError(OptionError, ValueError):
    """A run record that cannot be written or read, explained for the user."""


class ResumeError(RecordError):
    """resume=True (--resume) found nothing it may continue."""


class RunRecord:
    """A folder per run holding run.json (a Record). No secrets.

    The record also keeps the sha256 of the text the run last left in the source file, so `--resume` can
    tell a user's edit (which it must not overwrite) from its own writes.
    """

    def __init__(self, folder: Path, data: Record, raw: dict | None = None):
        self.folder, self.data = folder, data
        self.raw = raw if raw is not None else data.to_json()  # run.json as read, for `sbpc show --json`

    @classmethod
    def create(cls, runs_dir: Path, settings: RunSettings, initial: Mapping[str, str], source: str = "") -> RunRecord:
        """A new record; `source` is the text of the file the run starts from."""
        record = cls(
            new_folder(runs_dir, settings.file), Record(settings, dict(initial), source_sha256=[sha256_of(source)])
        )
        record.save()
        return record

    @classmethod
    def load(cls, folder: Path, resumable: bool = False) -> RunRecord:
        """The record kept in `folder`; RecordError (a ValueError) when there is none or it is not one.
        `resumable`: it must also hold every part that resuming needs (a record cut short before those were
        written is shown, not resumed)."""
        path = folder / "run.json"
        raw = _read(path)
        problem = check(raw)
        if problem is None and resumable and raw.get("kind") != "eval":
            missing = [k for k in RESUMED if k not in raw]
            problem = f"the record has no {', '.join(missing)}" if missing else None
        if problem:
            raise RecordError(f"{path}: not a run record ({problem})")
        try:
            return cls(folder, Record.read(raw), raw)
        except RecordError as exc:
            raise RecordError(f"{path}: not a run record ({exc})") from None

    @classmethod
    def resume(cls, runs_dir: Path, settings: RunSettings, source: str) -> RunRecord:
        """The newest unfinished run of this file, which must have been asked exactly the same, and must
        find the file as it left it. Unreadable records are skipped (and named if nothing is found)."""
        check_folder(runs_dir)
        skipped = []
        for folder in sorted(runs_dir.glob("*"), reverse=True):
            if not folder.is_dir():
                continue
            try:
                record = cls.load(folder, resumable=True)
            except RecordError as exc:
                skipped.append(str(exc))
                continue
            if record.data.kind == "eval" or record.data.settings.file != settings.file or record.data.finished:
                continue
            asked, wanted = record.data.settings.recorded(), settings.recorded()
            differ = [k for k in wanted if asked.get(k) != wanted[k]]
            if differ:
                raise ResumeError(f"the run in {folder} was started with other settings ({', '.join(differ)})")
            if record.data.source_sha256 and sha256_of(source) not in record.data.source_sha256:
                raise ResumeError(
                    f"{settings.file} was changed since the run in {folder} last wrote it; resuming would undo "
                    "that change. To optimize the file as it is now, start a new run (without ",
                    Option("resume=True", "--resume"),
                    "); to continue the old run, first undo the change (for example with git checkout or git stash)",
                )
            return record
        note = "".join(f"\n  skipped {reason}" for reason in skipped)
        raise ResumeError(f"no unfinished run of {settings.file} in {runs_dir}{note}")

    @classmethod
    def finish_interrupted_write(cls, runs_dir: Path, file: str) -> str | None:
        """Finish the in-place write to `file` that its newest unfinished run was making when it was killed, when
        the whole copy beside the file is the text that run recorded it was writing; a resume then finds the
        file as the run meant to leave it. A notice when it did, else None (the copy is someone else's, or no
        write was cut: reading the file still reports it)."""
        copy = interrupted_write(file)
        if copy is None or not runs_dir.is_dir():
            return None
        text = read_current(copy)[0]
        for folder in sorted(runs_dir.glob("*"), reverse=True):
            try:
                record = cls.load(folder, resumable=True) if folder.is_dir() else None
            except RecordError:
                continue
            if record is None or record.data.kind == "eval" or record.data.finished:
                continue
            if os.path.realpath(record.data.settings.file) != os.path.realpath(file):
                continue
            if text is None or sha256_of(text) not in (record.data.source_sha256 or []):
                return None
            finish_write(file)
            return f"finished the write to {file} that the run in {folder} was making when it was stopped"
        return None

    def begin(
        self,
        score: float | None,
        right: Collection[str],
        partial: Mapping[str, float],
        lost: Collection[str],
        costs: Mapping[str, float] | None = None,
    ) -> None:
        """The initial prompts' score on the gate split, the samples they got right, their partial scores and the
        samples they lost: the baseline the first step must beat, kept so a resumed run need not pay for it
        again."""
        data = self.data
        data.initial_score, data.initial_right, data.initial_partial = score, sorted(right), dict(partial)
        data.initial_lost, data.initial_costs = sorted(lost), dict(costs or {})
        data.initial_per_1000 = per_thousand(costs)
        self.save()

    def add_iteration(self, iteration: Iteration, ledger: dict) -> None:
        """An iteration done, with the run's calls so far: a run killed after it resumes from it."""
        self.data.iterations.append(iteration)
        self.data.ledger = ledger
        self.save()

    def abort(self, ledger: dict, bug: str | None = None) -> None:
        """The run so far, kept as an error ends it; `bug`: why, when the error is sbpc's own."""
        if bug is not None:
            self.data.stopped = bug
        self.data.ledger = ledger
        self.save()

    def finish(self, ledger: dict, stopped: Option | str | None = None, test: TestScores | None = None) -> None:
        """The run's end: finished unless `stopped` (a budget, or calls that cannot work) says why not, in the
        command line's words for `sbpc runs`, `show` and `report`; the test split's scores when both were taken."""
        self.data.finished, self.data.stopped, self.data.ledger = stopped is None, getattr(stopped, "cli", None), ledger
        if test is not None:
            self.data.test = test
        self.save()

    def expect_source(self, *texts: str) -> None:
        """The source file now holds one of these texts (the old one until a write is done, then the new one)."""
        self.data.source_sha256 = [sha256_of(text) for text in texts]
        self.save()

    def save(self) -> None:
        atomic_write(self.folder / "run.json", json.dumps(self.data.to_json(), indent=2, ensure_ascii=False))


def new_folder(runs_dir: Path, file: str) -> Path:
    """A fresh folder named by the time and the file's stem (-2, -3, ... when two runs start in one second)."""
    check_folder(runs_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = runs_dir / f"{stamp}-{Path(file).stem}"
    n = 1
    while folder.exists():
        n += 1
        folder = runs_dir / f"{stamp}-{Path(file).stem}-{n}"
    try:
        folder.mkdir(parents=True)
        _ignored_by_git(runs_dir)
    except OSError as exc:
        raise RecordError(f"cannot create the run record folder {folder}: {exc.strerror or exc}") from None
    return folder


def _ignored_by_git(runs_dir: Path) -> None:
    """sbpc's own folder (.sbpc, where runs go by default) lands in the user's repository: it says so to git, as
    pytest's cache does."""
    own = next((p for p in (runs_dir, *runs_dir.parents) if p.name == ".sbpc"), None)
    if own is not None and not (own / ".gitignore").exists():
        atomic_write(own / ".gitignore", "# Written by sbpc: its run records and cache are not sources.\n*\n")


def check_folder(runs_dir: Path) -> None:
    if runs_dir.exists() and not runs_dir.is_dir():
        raise RecordError(option("runs_dir", runs_dir), " is a file, not a folder; give a folder for run records")


RESUMED = ("initial_prompts", "iterations", "finished")  # besides the settings every record has


def _read(path: Path) -> Any:
    if path.exists() and not path.is_file():  # a FIFO would block the reader forever
        raise RecordError(f"{path}: not a run record (not a regular file)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecordError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # also bad UTF-8
        raise RecordError(f"{path}: not a run record (invalid JSON: {exc})") from None
    except RecursionError:
        raise RecordError(f"{path}: not a run record (it nests too deeply)") from None


KINDS = {  # JSON Schema's kinds in words
    "object": "an object",
    "array": "a list",
    "string": "text",
    "boolean": "true/false",
    "integer": "a whole number",
    "number": "a number",
    "null": "null",
}


@cache
def _checks() -> Check:
    return compile_schema(SCHEMA)


@cache
def _sample_check() -> Check:
    return compile_schema({"$defs": SCHEMA["$defs"], "$ref": "#/$defs/sample"})


def sample_problem(sample: Any) -> str | None:
    """Where one sample of an evaluation's samples file breaks run.schema.json's `sample`, in words; None when it
    holds (a reader checks the samples it shows, not every line it counts)."""
    problem = _sample_check()(sample, ())
    return None if problem is None else problem_words(problem)


def check(value: Any) -> str | None:
    """The first place where `value` breaks run.schema.json, in words: "iterations[2] has no 'prompts'",
    "ledger is text, not an object or null"; None when it holds."""
    try:
        problem = _checks()(value, ())
    except RecursionError:  # a mapped node's items within items, far deeper than a map of maps goes
        return "it nests too deeply"
    return None if problem is None else problem_words(problem)


def problem_words(problem: Problem) -> str:
    """A place where a value breaks the schema, in words."""
    where = _place(problem.path)
    if problem.keyword == "required":
        return f"{where or 'the record'} has no '{problem.asked}'"
    if problem.keyword == "enum":
        return f"{where} is {problem.found!r}, not one of {', '.join(map(str, problem.asked))}"
    if problem.keyword == "const":
        return f"{where} is {json.dumps(problem.found)}, not {json.dumps(problem.asked)}"
    if problem.keyword == "additionalProperties":
        return f"{where} is not a field of a run record"
    kinds = [problem.asked] if isinstance(problem.asked, str) else problem.asked
    return f"{where or 'the record'} is {_kind(problem.found)}, not {' or '.join(KINDS[k] for k in kinds)}"


def _place(path: Iterable[str | int]) -> str:
    """A path into the record as a reader writes it: `iterations[2].gate.p`."""
    where = ""
    for step in path:
        where += f"[{step}]" if isinstance(step, int) else f".{step}" if where else step
    return where


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}.get(
        type(value), "a number"
    )


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def resume_command(argv: Sequence[str]) -> str:
    """The command that continues a run: the one that was given, shell-quoted, with --resume
    (credentials inside URLs masked: a password given in --api-base is never printed back)."""
    words = public(["sbpc", *argv])
    return shlex.join(words if "--resume" in words else [*words, "--resume"])


def public(value):
    """Settings as recorded: credentials inside URLs (user:password@host) are masked."""
    if isinstance(value, dict):
        return {k: public(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [public(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"://[^/@\s]+@", "://***@", value)
    return value
