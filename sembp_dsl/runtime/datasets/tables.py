"""Parquet and Arrow tables (the `hf` extra's pyarrow), read as plain rows: bounded, class labels made their
names, every value a plain Python one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .dataset import DataError
from .reading import regular, size_text, unopenable


def _pyarrow() -> Any:
    """pyarrow, which reads Parquet and Arrow files: an optional extra, and ~90 ms to import (measured), so only
    reading such a file pays it."""
    try:  # the hf extra, ~90 ms to import (measured): only reading a Parquet or Arrow file pays it
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise DataError(
            "reading Parquet and Arrow files needs pyarrow: pip install 'sbpc[hf]' (or give a .jsonl, .csv or .tsv)"
        ) from None
    return pyarrow


def arrow_records(path: Path) -> list[tuple[int, dict[str, object]]]:
    """The rows of a Parquet or Arrow file, counted from 1; a Hugging Face ClassLabel column's numbers as its names
    (a model answers "positive", not 1)."""
    table = _arrow_table(path)
    duplicates = sorted({name for name in table.column_names if table.column_names.count(name) > 1})
    if duplicates:  # a row as a dict would keep one of them, the other's values lost
        raise DataError(f"{path}: duplicate column names: {', '.join(duplicates)}")
    names = _class_labels(table.schema.metadata or {})
    rows = []
    for number, row in enumerate(table.to_pylist(), start=1):
        rows.append((number, {str(key): _plain(value, names.get(key)) for key, value in row.items()}))
    return rows


def _arrow_table(path: Path) -> Any:
    pa = _pyarrow()
    try:
        regular(path, path.stat())
    except OSError as exc:
        raise DataError(f"{path}: {unopenable(path, exc)}") from None
    try:
        if path.suffix.lower() == ".parquet":
            _not_too_many(path, pa.parquet.ParquetFile(path).metadata.num_rows)  # before a byte of it is unpacked
            return pa.parquet.read_table(path)
        with pa.memory_map(str(path)) as source:
            try:  # `save_to_disk` writes the Arrow stream format
                reader, batches, rows = pa.ipc.open_stream(source), [], 0
                for batch in reader:  # counted as it is read: a stream does not say its length first
                    batches.append(batch)
                    rows += batch.num_rows
                    _not_too_many(path, rows)
                return pa.Table.from_batches(batches, schema=reader.schema)
            except pa.ArrowInvalid:
                source.seek(0)
                file = pa.ipc.open_file(source)
                _not_too_many(path, sum(file.get_batch(i).num_rows for i in range(file.num_record_batches)))
                return file.read_all()
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: cannot read it as {path.suffix.lower()[1:].title()}: {exc}") from None
    except MemoryError:
        raise DataError(f"{path}: too large to read into memory ({size_text(path)}); give a smaller file") from None


# Rows a Parquet or Arrow file may hold: a million take ~7 s and ~1 GB to read here, and a file of a few KB can say
# a billion (one value repeated, compressed): refused from its metadata before it is unpacked.
MAX_TABLE_ROWS = 2_000_000


def _not_too_many(path: Path, rows: int) -> None:
    if rows > MAX_TABLE_ROWS:
        raise DataError(
            f"{path}: {rows:,} rows or more, past the {MAX_TABLE_ROWS:,} sbpc reads from one file (a run uses tens "
            "to hundreds): give a sample of it, a file or a split of its own"
        )


def _class_labels(metadata: Mapping[bytes, bytes]) -> dict[str, list]:
    """The names of each ClassLabel column, from the features `datasets` writes into a file's schema metadata."""
    try:
        features = json.loads(metadata.get(b"huggingface", b"{}"))["info"]["features"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return {}
    if not isinstance(features, dict):
        return {}
    return {
        column: feature["names"]
        for column, feature in features.items()
        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and isinstance(feature.get("names"), list)
    }


def _plain(value: object, labels: list | None) -> object:
    """A table's value as a JSON file would hold it: a class number as its name (-1, no label, as none: a hub test
    split's hidden labels), bytes and dates as text."""
    if labels is not None and isinstance(value, int) and 0 <= value < len(labels):
        return labels[value]
    if labels is not None and value == -1:
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))
