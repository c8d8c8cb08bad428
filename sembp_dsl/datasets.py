"""Data set loading and seeded train/val/test splits.

Built-in data sets (LIAR, GSM8K, BIG-Bench Hard) are read from a data folder that
is never part of the repository; user data sets are single .jsonl/.csv/.tsv files.
Every problem with the data surfaces as a :class:`DataError` whose message is meant
for the user, so the CLI can print it instead of a traceback.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DATA_DIR_ENV",
    "DataError",
    "Dataset",
    "Sample",
    "Splits",
    "data_dirs",
    "load",
    "make_splits",
]

DATA_DIR_ENV = "SBPC_DATA_DIR"

_HOW_TO_GET = (
    f"set {DATA_DIR_ENV} or pass --data-dir to a folder with liar/ gsm8k/ bbh/; "
    "LIAR: https://www.cs.ucsb.edu/~william/data/liar_dataset.zip, "
    "GSM8K: https://github.com/openai/grade-school-math, "
    "BBH: https://github.com/suzgunmirac/BIG-Bench-Hard"
)

# LIAR column positions (the files have no header).
_LIAR_COLUMNS = 14
_LIAR_FIELDS = {
    "statement": 2, "subject": 3, "speaker": 4, "job_title": 5,
    "state": 6, "party": 7, "context": 13,
}
# Rows with any of these empty or "none" are dropped, as in the paper
# "How to Correctly do Semantic Backpropagation".
_LIAR_REQUIRED = ("statement", "job_title", "state", "party", "context")
# The task is "is it a lie?": a statement labelled false is a lie.
_LIAR_ANSWER = {"false": "Yes", "true": "No"}

_ANSWER_COLUMNS = ("answer", "label", "target")
_USER_SUFFIXES = (".jsonl", ".csv", ".tsv")


class DataError(Exception):
    """A data problem explained for the user (missing folder, bad line, bad request)."""


@dataclass(frozen=True)
class Sample:
    """One example: named string inputs and the expected output."""

    id: str
    # Excluded from hashing so samples can live in sets despite holding a dict.
    fields: Mapping[str, str] = field(hash=False)
    answer: str
    # The example as a Python caller gave it (values not yet text), for a metric written in Python.
    given: Mapping[str, object] | None = field(default=None, hash=False, compare=False, repr=False)


@dataclass(frozen=True)
class Dataset:
    """A loaded data set: its official partitions and the metric it is scored with."""

    name: str
    pools: Mapping[str, tuple[Sample, ...]] = field(hash=False)
    metric: str


@dataclass(frozen=True)
class Splits:
    """Disjoint samples for optimising (train), selecting (val) and reporting (test)."""

    train: tuple[Sample, ...]
    val: tuple[Sample, ...]
    test: tuple[Sample, ...]


def data_dirs(flag: str | None = None) -> list[Path]:
    """Folders searched for built-in data sets, most specific first.

    Order: the --data-dir flag, then $SBPC_DATA_DIR, then the user cache
    ($XDG_CACHE_HOME or ~/.cache)/sbpc/datasets. Duplicates are dropped.
    """
    candidates: list[Path] = []
    if flag:
        candidates.append(Path(flag).expanduser())
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        candidates.append(Path(env).expanduser())
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    candidates.append(Path(cache).expanduser() / "sbpc" / "datasets")
    unique: list[Path] = []
    for path in candidates:
        if path not in unique:
            unique.append(path)
    return unique


def load(spec: str, data_dir: str | None = None) -> Dataset:
    """Load "liar", "gsm8k", "bbh:<task>" or a user .jsonl/.csv/.tsv file."""
    name = spec.strip()
    if name == "liar":
        return _load_liar(_find_folder("liar", data_dir))
    if name == "gsm8k":
        return _load_gsm8k(_find_folder("gsm8k", data_dir))
    if name == "bbh" or name.startswith("bbh:"):
        return _load_bbh(_find_folder("bbh", data_dir), name.partition(":")[2].strip())
    if name.lower().endswith(_USER_SUFFIXES):
        return _load_user_file(Path(name).expanduser())
    raise DataError(
        f"unknown data set {spec!r}: expected liar, gsm8k, bbh:<task> "
        "or a path to a .jsonl, .csv or .tsv file"
    )


def make_splits(dataset: Dataset, train: int, val: int, test: int, seed: int) -> Splits:
    """Draw disjoint, seeded splits.

    With a "test" pool, test comes from it and train+val from "train", so the
    official test partition is never trained on. Otherwise all pools are merged
    and carved in order train, val, test. The shuffle depends only on the seed
    and pool sizes, so with one seed a larger train request extends a smaller one.
    """
    for label, size in (("train", train), ("val", val), ("test", test)):
        if size < 0:
            raise DataError(f"{label} size must be 0 or more, got {size}")
    rng = random.Random(seed)
    if "test" in dataset.pools:
        train_pool = _shuffled(dataset.pools.get("train", ()), rng)
        test_pool = _shuffled(dataset.pools["test"], rng)
        _check_size(dataset, "train", train + val, len(train_pool), "train + val")
        _check_size(dataset, "test", test, len(test_pool), "test")
        return Splits(
            train=tuple(train_pool[:train]),
            val=tuple(train_pool[train:train + val]),
            test=tuple(test_pool[:test]),
        )
    merged = [s for pool in dataset.pools.values() for s in pool]
    pool = _shuffled(merged, rng)
    names = "+".join(dataset.pools) or "(none)"
    _check_size(dataset, names, train + val + test, len(pool), "train + val + test")
    return Splits(
        train=tuple(pool[:train]),
        val=tuple(pool[train:train + val]),
        test=tuple(pool[train + val:train + val + test]),
    )


def _shuffled(samples: tuple[Sample, ...] | list[Sample], rng: random.Random) -> list[Sample]:
    out = list(samples)
    rng.shuffle(out)
    return out


def _check_size(dataset: Dataset, pool: str, wanted: int, available: int, what: str) -> None:
    if wanted > available:
        raise DataError(
            f"{dataset.name}: asked for {wanted} samples ({what}) but the {pool!r} pool "
            f"has only {available} available"
        )


# --- locating and reading files -------------------------------------------------

def _find_folder(sub: str, flag: str | None) -> Path:
    """First data dir holding `sub`; the error lists every place looked at."""
    dirs = data_dirs(flag)
    for base in dirs:
        if (base / sub).is_dir():
            return base / sub
    looked = "\n".join(f"  {base / sub}" for base in dirs)
    raise DataError(f"data set folder {sub}/ not found; looked in:\n{looked}\n{_HOW_TO_GET}")


def _read_text(path: Path) -> str:
    """Whole file as text; every I/O or decoding failure becomes a DataError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")  # -sig: tolerate the BOM spreadsheets write
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 (byte offset {exc.start})") from None
    if not text.strip():
        raise DataError(f"{path}: file is empty")
    return text


def _csv_rows(
    path: Path, text: str, delimiter: str, quoting: int
) -> Iterator[tuple[int, list[str]]]:
    """(line number, row) pairs, skipping blank lines; csv errors carry the line."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"{path}:{reader.line_num}: {exc}") from None
        if row and any(cell.strip() for cell in row):
            yield reader.line_num, row


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """(line number, object) pairs of a JSON-lines file, skipping blank lines."""
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


# --- built-in data sets ------------------------------------------------------------

def _load_liar(folder: Path) -> Dataset:
    train = _liar_file(folder, "train") + _liar_file(folder, "valid")
    return Dataset("liar", {"train": train, "test": _liar_file(folder, "test")}, "exact")


def _liar_file(folder: Path, split: str) -> tuple[Sample, ...]:
    path = folder / f"{split}.tsv"
    samples = []
    # QUOTE_NONE: some statements hold unbalanced '"', which default quoting
    # would treat as a quoted field running across lines, merging records.
    for line, row in _csv_rows(path, _read_text(path), "\t", csv.QUOTE_NONE):
        if len(row) != _LIAR_COLUMNS:
            raise DataError(
                f"{path}:{line}: expected {_LIAR_COLUMNS} tab-separated columns, got {len(row)}"
            )
        answer = _LIAR_ANSWER.get(row[1].strip())
        if answer is None:
            continue
        fields = {name: row[col].strip() for name, col in _LIAR_FIELDS.items()}
        if any(fields[name].casefold() in ("", "none") for name in _LIAR_REQUIRED):
            continue
        fields["source"] = fields["context"]  # pipelines call the context "source"
        samples.append(Sample(f"liar/{split}/{row[0].strip()}", fields, answer))
    return tuple(samples)


def _load_gsm8k(folder: Path) -> Dataset:
    pools = {split: _gsm8k_file(folder, split) for split in ("train", "test")}
    return Dataset("gsm8k", pools, "numeric")


def _gsm8k_file(folder: Path, split: str) -> tuple[Sample, ...]:
    path = folder / f"{split}.jsonl"
    samples = []
    for index, (line, record) in enumerate(_json_lines(path)):
        question, solution = record.get("question"), record.get("answer")
        if not isinstance(question, str) or not isinstance(solution, str) or "####" not in solution:
            raise DataError(
                f"{path}:{line}: expected \"question\" and an \"answer\" containing '#### '"
            )
        final = solution.rsplit("####", 1)[1].strip().replace(",", "")
        samples.append(Sample(f"gsm8k/{split}/{index}", {"question": question}, final))
    return tuple(samples)


def _load_bbh(folder: Path, task: str) -> Dataset:
    tasks = sorted(p.stem for p in folder.glob("*.json"))
    if task not in tasks:  # also rejects path tricks such as "../liar/train"
        wanted = f"unknown BBH task {task!r}" if task else "no BBH task given (use bbh:<task>)"
        raise DataError(f"{wanted}; available tasks in {folder}: {', '.join(tasks) or '(none)'}")
    path = folder / f"{task}.json"
    try:
        examples = json.loads(_read_text(path))["examples"]
        samples = tuple(
            Sample(f"bbh/{task}/{i}", {"question": ex["input"]}, ex["target"].strip())
            for i, ex in enumerate(examples)
        )
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except (KeyError, TypeError, AttributeError):
        shape = '{"examples": [{"input": ..., "target": ...}]}'
        raise DataError(f"{path}: expected {shape}") from None
    return Dataset(f"bbh:{task}", {"all": samples}, "exact")


# --- user files ----------------------------------------------------------------------

def _load_user_file(path: Path) -> Dataset:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = [
            (line, {str(k): str(v) for k, v in rec.items()}) for line, rec in _json_lines(path)
        ]
    else:
        records = _table_records(path, suffix)
    if not records:
        raise DataError(f"{path}: no data rows")
    answer_col = _answer_column(path, list(records[0][1]))
    samples = []
    for index, (line, record) in enumerate(records):
        if answer_col not in record:
            raise DataError(f"{path}:{line}: missing answer column {answer_col!r}")
        fields = {k: v for k, v in record.items() if k != answer_col}
        samples.append(Sample(f"{path.name}/{index}", fields, record[answer_col].strip()))
    return Dataset(path.name, {"all": tuple(samples)}, "exact")


def _table_records(path: Path, suffix: str) -> list[tuple[int, dict[str, str]]]:
    """Rows of a CSV/TSV with a header row, as column -> value dicts."""
    # TSV is read like LIAR (no quoting, one record per line); CSV needs quoting
    # because commas inside values are common.
    delimiter, quoting = ("\t", csv.QUOTE_NONE) if suffix == ".tsv" else (",", csv.QUOTE_MINIMAL)
    rows = _csv_rows(path, _read_text(path), delimiter, quoting)
    first = next(rows, None)
    if first is None:
        raise DataError(f"{path}: no header row")
    header = [name.strip() for name in first[1]]
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise DataError(f"{path}:{first[0]}: duplicate column names: {', '.join(duplicates)}")
    records = []
    for line, row in rows:
        if len(row) != len(header):
            raise DataError(f"{path}:{line}: expected {len(header)} columns, got {len(row)}")
        records.append((line, dict(zip(header, row))))
    return records


def _answer_column(path: Path, columns: list[str]) -> str:
    """The expected-output column: answer, else label, else target (any case)."""
    for wanted in _ANSWER_COLUMNS:
        for column in columns:
            if column.casefold() == wanted:
                return column
    raise DataError(
        f"{path}: no answer column (need one of {', '.join(_ANSWER_COLUMNS)}); "
        f"columns found: {', '.join(columns) or '(none)'}"
    )
