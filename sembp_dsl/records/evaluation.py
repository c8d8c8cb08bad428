"""An evaluation's record as it runs: run.json made when its first sample finishes, each sample a line of
samples.jsonl as it finishes, and its summary written at its end; and the samples read back a line at a time, from
that file or from the list an older run.json holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .record import (
    Record,
    RecordError,
    ResumeError,
    RunRecord,
    RunSettings,
    check_folder,
    new_folder,
    public,
    sha256_of,
)

if TYPE_CHECKING:  # the runtime and its model layer (aiohttp) are no reader's to import
    from ..models.ledger import RoleUsage
    from ..runtime.evaluate import Evaluation, Result, Tally

# --- an evaluation's samples: JSON Lines beside run.json ------------------------------------------------------
# One line written as each sample finishes, so a killed evaluation keeps every sample it finished, and read back a
# line at a time, so a record of 100,000 samples opens in the memory of one. Records before version 5 hold their
# samples inside run.json (`samples`); both are read through `Samples`.

SAMPLES_FILE = "samples.jsonl"


def sample_json(result: Result) -> dict:
    """One sample as its line holds it: the small facts first (what a scan of the file reads), then its inputs,
    every node's prompt, reply and output (NodeTrace.recorded: with what a branch, a map or its kind keeps) and a
    judge's prompt and reply. `cause`: why it was lost, or why it was scored wrong after a failure (the summary's
    counts, rebuilt from the file when an evaluation is resumed)."""
    # the runtime and its model layer (aiohttp) are no reader's to import: only a run that writes samples pays it
    from ..runtime.evaluate import failure_cause, lost_cause

    return {
        "id": result.sample.id,
        "score": result.score,
        "lost": result.lost,
        "expected": result.expected,
        "output": result.trace.output,
        "error": result.metric_error or result.trace.final.error,
        "reason": result.reason,
        "cause": lost_cause(result) if result.lost else failure_cause(result),
        "inputs": dict(result.trace.inputs),
        "nodes": {name: n.recorded() for name, n in result.trace.nodes.items()},
        **({"judge": {"prompt": result.judged.prompt, "reply": result.judged.reply}} if result.judged else {}),
    }


class SampleLog:
    """The samples file of an evaluation being run: each line flushed as it is written, so it is the operating
    system's as soon as the sample is (a SIGKILL loses no finished sample)."""

    def __init__(self, path: Path):
        self.path = path
        self._file: IO[str] | None = None

    def add(self, sample: dict) -> None:
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (open for the evaluation's length)
        self._file.write(json.dumps(sample, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _scanned(value: Any) -> dict:
    """A line's value with the facts a scan reads checked (id, score, lost); the rest is checked where it is
    shown (`sample_problem`), since checking every part of every line would cost more than reading it."""
    if not isinstance(value, dict):
        raise RecordError("it is not an object")
    if not isinstance(value.get("id"), str):
        raise RecordError("its id is not text" if "id" in value else "it has no 'id'")
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise RecordError("its score is not a number" if "score" in value else "it has no 'score'")
    if not isinstance(value.get("lost", False), bool):
        raise RecordError("its lost is not true/false")
    return value


@dataclass
class Samples:
    """An evaluation's samples in the order they finished, read as they are iterated: from its samples file, or
    from the list an older run.json holds. A last line cut off mid-write (the evaluation was killed while writing
    it) is left out, and said in `notes`; any other line that is no sample is a RecordError naming it."""

    path: Path | None = None
    inline: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    good_bytes: int = 0  # where the last whole line of the file ends (a resumed evaluation writes on from there)

    def __iter__(self) -> Iterator[dict]:
        if self.path is None:
            yield from self.inline
            return
        self.notes.clear()
        try:
            with open(self.path, "rb") as file:
                yield from self._lines(file)
        except FileNotFoundError:
            return  # killed before its first sample finished: none
        except OSError as exc:
            raise RecordError(f"cannot read {self.path}: {exc.strerror or exc}") from None

    def _lines(self, file: IO[bytes]) -> Iterator[dict]:
        self.good_bytes = 0
        for number, line in enumerate(file, 1):
            try:
                value = _scanned(json.loads(line)) if line.endswith(b"\n") else None
            except (ValueError, RecordError) as exc:  # also bad UTF-8
                if file.read(1):
                    raise RecordError(f"{self.path}:{number}: not a sample ({exc})") from None
                value = None
            if value is None:  # the last line, cut off
                self.notes.append(
                    f"{self.path}:{number}: the last line is cut off (the evaluation was stopped while writing it); "
                    "left out"
                )
                return
            self.good_bytes += len(line)
            yield value


class EvalRecord:
    """An evaluation's record as it runs: run.json made when its first sample finishes (an evaluation its checks
    refuse leaves none), each sample a line of samples.jsonl as it finishes (a killed evaluation keeps them, and
    `resume` goes on from them), and its summary (score, counts, calls) written at its end."""

    def __init__(self, runs_dir: Path, record: Record, kept: RunRecord | None = None):
        self.runs_dir, self.data, self.kept = runs_dir, record, kept
        self.done: set[str] = set()  # samples a resumed evaluation had finished
        self.notes: list[str] = []  # what reading them back said (a last line cut off)
        self.log = SampleLog(kept.folder / SAMPLES_FILE) if kept else None

    @classmethod
    def start(
        cls, runs_dir: Path, settings: RunSettings, prompts: Mapping[str, str], scored: Mapping[str, object]
    ) -> EvalRecord:
        """A new evaluation of these `prompts`; `scored`: its split, metric and limit."""
        check_folder(runs_dir)
        asked = {
            **public(dict(scored)),
            "prompts_sha256": sha256_of(json.dumps(dict(prompts), sort_keys=True, ensure_ascii=False)),
            "samples_file": SAMPLES_FILE,
        }
        return cls(runs_dir, Record(settings, dict(prompts), kind="eval", evaluation=asked))

    @classmethod
    def resume(
        cls,
        runs_dir: Path,
        settings: RunSettings,
        prompts: Mapping[str, str],
        scored: Mapping[str, object],
        tally: Tally,
    ) -> EvalRecord:
        """The newest unfinished evaluation asked exactly this, its finished samples counted into `tally` and named
        in `done`; its samples file is cut back to its last whole line, where the rest are written."""
        wanted = cls.start(runs_dir, settings, prompts, scored).data
        for folder in sorted(runs_dir.glob("*"), reverse=True) if runs_dir.is_dir() else ():
            try:
                found = RunRecord.load(folder) if folder.is_dir() else None
            except RecordError:
                continue
            if found is None or found.data.kind != "eval" or found.data.finished:
                continue
            asked = {key: (found.data.evaluation or {}).get(key) for key in wanted.evaluation or {}}
            if (asked, found.data.settings.recorded()) == (wanted.evaluation, settings.recorded()):
                return cls(runs_dir, found.data, found)._read_back(tally)
        raise ResumeError(f"no unfinished evaluation of {settings.file} asked the same in {runs_dir}")

    def _read_back(self, tally: Tally) -> EvalRecord:
        assert self.kept is not None
        samples = Samples(self.kept.folder / SAMPLES_FILE)
        try:
            for sample in samples:
                self.done.add(sample["id"])
                right = sample["score"] >= 1.0 and not sample.get("lost")
                lost = bool(sample.get("lost"))
                cause = sample.get("cause")
                tally.count(sample["score"], lost, right, cause or "", cause if not lost else None)
        except RecordError as exc:
            raise ResumeError(f"cannot resume the evaluation in {self.kept.folder}: {exc}") from None
        self.notes = list(samples.notes)
        if samples.notes:
            os.truncate(samples.path, samples.good_bytes)  # type: ignore[arg-type]
        return self

    def opened(self) -> RunRecord:
        """The record, its folder made (with run.json saying what the evaluation asks) if it is not yet."""
        if self.kept is None:
            self.kept = RunRecord(new_folder(self.runs_dir, self.data.settings.file), self.data)
            self.kept.save()
        return self.kept

    def add(self, result: Result) -> None:
        """A sample finished: its line, written now."""
        if self.log is None:
            self.log = SampleLog(self.opened().folder / SAMPLES_FILE)
        self.log.add(sample_json(result))

    def finish(self, evaluation: Evaluation, spent: RoleUsage, said: Mapping[str, object] | None = None) -> RunRecord:
        """The evaluation's end: its score and counts, how it ended, what its model calls `spent` (the ledger's
        count: a tool loop's every turn and a map's every item are calls, a function node's run is none), and what
        else its evaluation `said` (a batch evaluation's batches)."""
        kept = self.opened()  # nothing finished (a budget stopped it first): a record all the same
        if self.log is not None:
            self.log.close()
        tally, data = evaluation.tally, self.data
        data.finished = evaluation.stopped is None
        data.stopped = None if evaluation.stopped is None else getattr(evaluation.stopped, "cli", evaluation.stopped)
        data.ledger = {
            "calls": spent.calls,
            "tokens": spent.prompt_tokens + spent.completion_tokens,
            "cached_tokens": spent.cached_tokens,
            "cache_saving": spent.cache_saving,
            "cost": spent.cost,
        }
        data.evaluation = {
            **(data.evaluation or {}),
            **(said or {}),
            "score": evaluation.accuracy,
            "scored": evaluation.scored,
            "requested": evaluation.requested,
            "counts": {"samples": tally.samples, "right": tally.correct, "lost": tally.lost},
        }
        kept.save()
        return kept
