"""The user's own data files (.jsonl, .csv, .tsv, .parquet, .arrow): their records made samples, the answer
column found, and what `check` and `init` read of a file without reading it all."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from ...language.blocks.data import ANSWER_COLUMNS, Fields
from .dataset import DataError, Dataset, Records, Sample, as_text, bad_rows
from .folders import folder_splits
from .reading import TABLE_SUFFIXES, USER_SUFFIXES, csv_rows, head_text, is_folder, json_lines, size_of
from .tables import arrow_records

# What `check` reads of each data file: its first rows, at most this many and in this many bytes, so a file of
# millions of rows is checked in a moment (a run reads the rest, and names any bad row of it then).
CHECK_BYTES = 1 << 20
CHECK_ROWS = 2_000


def from_records(rows: Sequence[Mapping[str, object] | Sample], name: str = "example") -> list[Sample]:
    """In-memory examples as samples: every key is a field (as text), `answer`/`label`/`target` the expected
    output. Each row finds its own answer key (a Python caller may mix them); a file settles it once."""
    samples = []
    for number, row in enumerate(rows, 1):  # counted from 1, as a file's lines are
        if isinstance(row, Sample):
            samples.append(row)
            continue
        if not isinstance(row, Mapping):
            raise DataError(
                f"{name} row {number}: an example is a dict of field names to values, got {type(row).__name__}"
            )
        samples.append(_example(f"{name}:{number}", row))
    return samples


def _example(id: str, row: Mapping) -> Sample:
    """A caller's example as a sample; a value JSON cannot hold (a set, bytes, a date) or UTF-8 cannot carry (a lone
    surrogate) named, as a run's inputs are, rather than a TypeError or a sample lost in the run."""
    try:
        sample = _sample(id, row, answer_key(row), given=row)
        for text in (sample.answer, *sample.fields, *sample.fields.values()):
            text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(
            f"{id}: holds a lone surrogate ({exc.object[exc.start]!r}), which no model request can carry"
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        reason = "it nests too deeply" if isinstance(exc, RecursionError) else exc
        raise DataError(f"{id}: a value cannot be sent as text or JSON: {reason}") from None
    return sample


def load_user_file(path: Path) -> Dataset:
    return _user_data(path.name, {"all": [path]})


def load_folder(folder: Path) -> Dataset:
    return _user_data(folder.name, folder_splits(folder), folder)


def _user_data(
    name: str,
    files: Mapping[str, Sequence[Path]],
    folder: Path | None = None,
    head: int | None = None,
    read: Mapping[str, Sequence[tuple[Path, Records]]] | None = None,
) -> Dataset:
    """A user's files as one data set, a pool per split; its answer column the first file's, when it has one. Every
    bad row of every file is named at once. A folder's samples are named by their file's path in it. With `head`,
    only the rows in each file's first `head` bytes are read; `read`: the rows, read already."""
    if read is None:
        read = {split: [(path, _file_records(path, head)) for path in paths] for split, paths in files.items()}
    rows = [record for parts in read.values() for _, records in parts for _, record in records]
    if not rows:
        raise DataError(f"{', '.join(str(p) for paths in files.values() for p in paths)}: no data rows")
    answer = answer_key(rows[0])
    pools: dict[str, tuple[Sample, ...]] = {}
    problems = []
    for split, parts in read.items():
        for path, records in parts:
            try:
                label = str(path.relative_to(folder)) if folder else path.name
                pools[split] = pools.get(split, ()) + _samples(path, label, records, answer)
            except DataError as exc:
                problems.append(str(exc))
    if problems:
        raise DataError("\n".join(problems))
    columns = tuple(dict.fromkeys(str(key) for row in rows for key in row))
    return Dataset(name, pools, "exact", user=True, columns=columns)


def _samples(path: Path, label: str, records: Records, answer: object | None) -> tuple[Sample, ...]:
    """A file's rows as samples, each named by its line (a table file's rows by their number, from 1)."""
    bad = [(line, f"missing answer column {answer!r}") for line, record in records if answer not in record]
    if answer is not None and bad:
        raise bad_rows(path, bad)
    # named by line, as data errors are: `tickets.jsonl:3` is line 3 (a CSV row, the line it starts on)
    return tuple(_sample(f"{label}:{line}", record, answer, origin=f"{path}:{line}") for line, record in records)


def _file_records(path: Path, head: int | None = None, most: int | None = None) -> Records:
    """A file's rows; with `head`, at most `most` (CHECK_ROWS) of those in its first `head` bytes."""
    most = CHECK_ROWS if most is None else most
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(json_lines(path, head, most))
    if suffix in TABLE_SUFFIXES:
        return arrow_records(path)
    return _table_records(path, suffix, head, most)


def first_rows(path: Path, count: int) -> Dataset:
    """A user's data file's first `count` rows (in file order), read from as few of its bytes as hold them: what
    `eval --limit N` scores of a file it scores whole, in a moment however long the file."""
    head = 1 << 20
    while True:
        records = _file_records(path, head, count)
        if len(records) >= count or head >= size_of(path):
            return _user_data(path.name, {"all": [path]}, read={"all": [(path, records[:count])]})
        head *= 4


def _user_files(path: str) -> dict[str, list[Path]]:
    """A user's data by split: a folder's splits, or one file; DataError for anything else."""
    given = Path(path).expanduser()
    if is_folder(given):
        return folder_splits(given)
    if given.suffix.lower() not in USER_SUFFIXES:
        raise DataError(f"{path}: a data file is .jsonl, .csv, .tsv, .parquet or .arrow, or a Hugging Face folder")
    return {"all": [given]}


def head_of(path: str) -> tuple[list[Mapping[str, object]], Dataset]:
    """The first rows of a user's data file or folder (each file's, as `check` reads them: CHECK_ROWS in
    CHECK_BYTES), read once: as they are, before a column is taken for the answer, and as a data set."""
    files = _user_files(path)
    read = {split: [(file, _file_records(file, CHECK_BYTES)) for file in paths] for split, paths in files.items()}
    folder = Path(path).expanduser() if is_folder(Path(path).expanduser()) else None
    dataset = _user_data(Path(path).name, files, folder, read=read)
    return [record for parts in read.values() for _, records in parts for _, record in records], dataset


def fields_of(path: str) -> Fields | str:
    """The fields of a user's data file or folder (its answer column among them), the first row lacking each, and
    how many rows a file has at most; or why a run could not use it. Every bad row of the first CHECK_BYTES of
    each file is named, as a run would find them."""
    try:
        files = _user_files(path)
        folder = Path(path).expanduser() if is_folder(Path(path)) else None
        dataset = _user_data(path, files, folder, head=CHECK_BYTES)
        rows = None if folder else _rows_at_most(files["all"][0], dataset)
    except DataError as exc:
        return str(exc)
    lacking: dict[str, str] = {}
    for sample in (s for pool in dataset.pools.values() for s in pool):
        for column in set(dataset.columns) - set(sample.fields) - {sample.answer_column} - set(lacking):
            lacking[column] = sample.id
    return Fields(dataset.columns, MappingProxyType(lacking), rows)


def _rows_at_most(path: Path, dataset: Dataset) -> int | None:
    """The rows of a file read whole, else its lines past the header (a row is one line or more): a bound."""
    read = sum(map(len, dataset.pools.values()))
    try:
        size = path.stat().st_size
        if (size <= CHECK_BYTES and read < CHECK_ROWS) or path.suffix.lower() in TABLE_SUFFIXES:
            return read
        with open(path, "rb") as file:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b"")) + 1
    except OSError:
        return None


def answer_key(keys: Iterable) -> object | None:
    """The expected-output key: answer, else label, else target (any case); None when there is none."""
    return next((key for wanted in ANSWER_COLUMNS for key in keys if str(key).casefold() == wanted), None)


def _sample(
    id: str, record: Mapping, answer: object | None, origin: str = "", given: Mapping[str, object] | None = None
) -> Sample:
    """A record as a sample: every other key a field, as text; the answer stripped ("" with no answer key, or a null
    one: a missing value, not the word "null" to score against)."""
    fields = {str(k): as_text(v) for k, v in record.items() if k != answer}
    expected = as_text(record[answer]).strip() if answer is not None and record[answer] is not None else ""
    return Sample(id, fields, expected, given=given, origin=origin, answer_column="" if answer is None else str(answer))


def _table_records(path: Path, suffix: str, head: int | None = None, most: int = 0) -> list[tuple[int, dict[str, str]]]:
    """Rows of a CSV/TSV with a header row, as column -> value dicts (with `head`, those of its first bytes, the
    last one dropped when the file goes on: a quoted value may run past them)."""
    # TSV is read like LIAR (no quoting, one record per line); CSV needs quoting
    # because commas inside values are common.
    tsv = suffix == ".tsv"
    text, cut = head_text(path, head)
    rows = csv_rows(path, text, "\t" if tsv else ",", csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
    if head is not None:  # the header and `most` rows, and one more to tell a row cut off by `head`
        read = list(itertools.islice(rows, most + 2))
        rows = iter(read[: -1 if cut and len(read) < most + 2 else most + 1])
    first = next(rows, None)
    if first is None:
        raise DataError(f"{path}: no header row")
    header = [name.strip() for name in first[1]]
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise DataError(f"{path}:{first[0]}: duplicate column names: {', '.join(duplicates)}")
    records, bad = [], []
    for line, row in rows:
        if len(row) != len(header):
            bad.append((line, f"expected {len(header)} columns, got {len(row)}"))
        else:
            records.append((line, dict(zip(header, row))))
    if bad:
        raise bad_rows(path, bad)
    return records
