"""What a data set is, whatever it was read from: its samples, its pools, the splits drawn from it, and the
error every problem with data becomes (a message for the user, never a traceback)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import Option, OptionError


class DataError(OptionError):
    """A data problem explained for the user (missing folder, bad line, bad request), naming options as the
    user gave them (`data_dir=` in Python, `--data-dir` on the command line)."""


@dataclass(frozen=True, slots=True)  # a long data file holds one a row: no __dict__ each (120 bytes)
class Sample:
    """One example: named string inputs and the expected output."""

    id: str
    # Excluded from hashing so samples can live in sets despite holding a dict.
    fields: Mapping[str, str] = field(hash=False)
    answer: str
    # The example as a Python caller gave it (values not yet text), for a metric written in Python.
    given: Mapping[str, object] | None = field(default=None, hash=False, compare=False, repr=False)
    # Where it was read ("data.csv:7"), for messages that must point at the row to fix.
    origin: str = field(default="", compare=False, repr=False)
    # The column the answer was taken from (not among the fields), so `output x from "label"` finds it there.
    answer_column: str = field(default="", compare=False, repr=False)

    def has(self, name: str) -> bool:
        """Whether the example holds a field or column of this name, its answer's among them."""
        return name in self.fields or name == self.answer_column

    @property
    def where(self) -> str:
        """The file and line it was read from, else its id."""
        return self.origin or self.id


@dataclass(frozen=True)
class Dataset:
    """A loaded data set: its official partitions and the metric it is scored with."""

    name: str
    pools: Mapping[str, tuple[Sample, ...]] = field(hash=False)
    metric: str
    user: bool = False  # the user's own file(s): `eval` scores them whole unless sizes are given
    columns: tuple[str, ...] = ()  # of a user's data, every file's


@dataclass(frozen=True)
class Splits:
    """Disjoint samples for optimising (train), selecting (val) and reporting (test)."""

    train: tuple[Sample, ...]
    val: tuple[Sample, ...]
    test: tuple[Sample, ...]


def as_text(value: object) -> str:
    """A data or input value as prompts and metrics see it: strings as they are, anything else as JSON text."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


MAX_BAD_ROWS = 20  # named one a line; the rest counted


def bad_rows(path: Path, bad: Sequence[tuple[int, str]]) -> DataError:
    """One error naming every bad row of a file by its line, so one run shows all there is to fix."""
    return bad_samples([(f"{path}:{line}", why) for line, why in bad], str(path))


def bad_samples(bad: Sequence[tuple[str, str]], source: str = "", *then: str | Option) -> DataError:
    """One error naming every bad row by where it was read (`file:line`), then what `then` says to do."""
    listed = [f"{where}: {why}" for where, why in bad[:MAX_BAD_ROWS]]
    if len(bad) > MAX_BAD_ROWS:
        listed.append(f"... and {len(bad) - MAX_BAD_ROWS} more")
    head = f"{source}: " * bool(source) + f"{len(bad)} bad rows:\n" if len(bad) > 1 else ""
    return DataError(head + "\n".join(listed), *then)


Records = Sequence[tuple[int, Mapping[str, object]]]  # (line, or row counted from 1, of a table file; the row)
