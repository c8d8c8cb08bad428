"""An evaluation's samples as JSON Lines beside its run.json: one line written as each sample finishes, so a killed
evaluation keeps every sample it finished, and read back a line at a time, so a record of 100,000 samples opens in
the memory of one. Records written before this file existed hold their samples inside run.json (`samples`); both
are read through `Samples`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import SbpcError

if TYPE_CHECKING:  # the runtime and its model layer (aiohttp) are no reader's to import
    from ..runtime.evaluate import Result

SAMPLES_FILE = "samples.jsonl"


class SamplesError(SbpcError, ValueError):
    """A line of an evaluation's samples file that is no sample (or the file cannot be read), named by its line."""


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
        raise SamplesError("it is not an object")
    if not isinstance(value.get("id"), str):
        raise SamplesError("its id is not text" if "id" in value else "it has no 'id'")
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise SamplesError("its score is not a number" if "score" in value else "it has no 'score'")
    if not isinstance(value.get("lost", False), bool):
        raise SamplesError("its lost is not true/false")
    return value


@dataclass
class Samples:
    """An evaluation's samples in the order they finished, read as they are iterated: from its samples file, or
    from the list an older run.json holds. A last line cut off mid-write (the evaluation was killed while writing
    it) is left out, and said in `notes`; any other line that is no sample is a SamplesError naming it."""

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
            raise SamplesError(f"cannot read {self.path}: {exc.strerror or exc}") from None

    def _lines(self, file: IO[bytes]) -> Iterator[dict]:
        self.good_bytes = 0
        for number, line in enumerate(file, 1):
            try:
                value = _scanned(json.loads(line)) if line.endswith(b"\n") else None
            except (ValueError, SamplesError) as exc:  # also bad UTF-8
                if file.read(1):
                    raise SamplesError(f"{self.path}:{number}: not a sample ({exc})") from None
                value = None
            if value is None:  # the last line, cut off
                self.notes.append(
                    f"{self.path}:{number}: the last line is cut off (the evaluation was stopped while writing it); "
                    "left out"
                )
                return
            self.good_bytes += len(line)
            yield value
