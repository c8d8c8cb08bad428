"""Reading a data file's bytes safely (regular files only, bounded, never blocking on a FIFO), as text, and its
rows as CSV or JSON lines, each bad row located."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from .dataset import DataError, bad_rows

TABLE_SUFFIXES = (".parquet", ".arrow")  # read with pyarrow, the `hf` extra
USER_SUFFIXES = (".jsonl", ".csv", ".tsv", *TABLE_SUFFIXES)
Quoting = Literal[0, 1, 2, 3]  # csv.QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC, QUOTE_NONE


def head_text(path: Path, head: int | None) -> tuple[str, bool]:
    """The file as text, or with `head` its whole lines in the first `head` bytes; and whether it goes on."""
    if head is None:
        return read_text(path), False
    raw = _read_bytes(path, head + 1)
    if len(raw) <= head:
        return read_text(path, raw), False
    return read_text(path, raw[: raw.rfind(b"\n", 0, head) + 1] or raw[:head]), True


def read_text(path: Path, raw: bytes | None = None) -> str:
    """Whole file (or its bytes `raw`) as text; every I/O or decoding failure becomes a DataError."""
    raw = _read_bytes(path) if raw is None else raw
    try:
        text = raw.decode("utf-8-sig")  # -sig: tolerate the BOM spreadsheets write
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 (byte offset {exc.start})") from None
    if not text.strip():
        raise DataError(f"{path}: file is empty")
    return text


def _read_bytes(path: Path, most: int | None = None) -> bytes:
    """A regular file's bytes, as many as its size says (at most `most`): see pieces."""
    try:
        return b"".join(pieces(path, most))
    except MemoryError:
        raise DataError(f"{path}: too large to read into memory ({size_text(path)}); give a smaller file") from None


def pieces(path: Path, most: int | None = None, piece: int | None = None) -> Iterator[bytes]:
    """A regular file's bytes, as many as its size says (at most `most`), in pieces of `piece` bytes (None: one): a
    FIFO or device (which would block or never end) is refused from the descriptor it opened without blocking, so a
    file swapped for one after a check is refused too; a file of a virtual file system (/proc/self/environ, size 0)
    reads as empty, not as its content."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DataError(f"{path}: {unopenable(path, exc)}") from None
    try:
        found = regular(path, os.fstat(fd))
        left = found.st_size if most is None else min(most, found.st_size)
        with os.fdopen(fd, "rb", closefd=False) as file:
            while left > 0:
                read = file.read(min(piece or left, left))
                if not read:
                    return
                left -= len(read)
                yield read
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def regular(path: Path, found: os.stat_result) -> os.stat_result:
    """`found`, a regular file's status; else DataError naming what is there instead."""
    if stat.S_ISDIR(found.st_mode):
        raise DataError(f"{path}: is a directory, expected a file")
    if not stat.S_ISREG(found.st_mode):
        raise DataError(f"{path}: not a regular file (a pipe or a device?); give a file")
    return found


def is_folder(path: Path) -> bool:
    """Whether a folder is there; False for a name no file can have (longer than the file system allows: Path.is_dir
    raises on it), which opening it then says in the user's words."""
    return os.path.isdir(path)


def unopenable(path: Path, exc: OSError) -> str:
    """Why a data file could not be opened, in the user's words: a link that leads nowhere said as one."""
    if exc.errno == errno.ENAMETOOLONG:
        return "a name longer than the file system allows (a file or folder name holds at most 255 bytes)"
    if exc.errno == errno.ELOOP:
        return "a symbolic link that leads back to itself (a loop of links); give a file"
    if isinstance(exc, FileNotFoundError) and path.is_symlink():
        return f"a symbolic link to {os.readlink(path)}, which does not exist"
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    return f"cannot read: {exc.strerror or exc}"


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # reading it says why, in the user's words
        return 0


def size_text(path: Path) -> str:
    try:
        return f"{path.stat().st_size:,} bytes"
    except OSError:
        return "size unknown"


def csv_rows(path: Path, text: str, delimiter: str, quoting: Quoting) -> Iterator[tuple[int, list[str]]]:
    """(line number, row) pairs, skipping blank lines; csv errors carry the line."""
    lines = text.split("\n")
    if quoting == csv.QUOTE_NONE and delimiter.isspace() and "\r" not in text and "\0" not in text:
        if max(map(len, lines)) <= csv.field_size_limit():
            # What csv reads here, in a third of the time (LIAR's train.tsv: 32 ms -> 11 ms): unquoted, with no
            # '\r' to end a record and no NUL nor field past its limit to refuse, a record is a line and its
            # fields are what the delimiter splits; a blank line (all its cells blank) is all whitespace.
            return ((number, line.split(delimiter)) for number, line in enumerate(lines, 1) if line.strip())
    return _csv_read(path, text, delimiter, quoting)


def _csv_read(path: Path, text: str, delimiter: str, quoting: Quoting) -> Iterator[tuple[int, list[str]]]:
    """`csv_rows` by the csv module."""
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


def json_lines(path: Path, head: int | None = None, most: int = 0) -> Iterator[tuple[int, dict[str, object]]]:
    """(line number, object) pairs of a JSON-lines file (with `head`, of its first bytes' whole lines), skipping blank
    lines; every bad line is named, at the end."""
    bad: list[tuple[int, str]] = []
    read = 0
    for number, line in enumerate(head_text(path, head)[0].split("\n"), start=1):
        if not line.strip():
            continue
        read += 1
        if head is not None and read > most:
            break
        try:
            record = json_value(line)
        except json.JSONDecodeError as exc:
            bad.append((number, f"invalid JSON: {exc.msg}"))
            continue
        if not isinstance(record, dict):
            bad.append((number, f"expected a JSON object, got {type(record).__name__}"))
            continue
        if _LONE_SURROGATE.search(line) and not _is_text(record):
            bad.append((number, "a \\ud800-\\udfff escape that pairs with none: not text a prompt can hold"))
            continue
        yield number, record
    if bad:
        raise bad_rows(path, bad)


def json_value(text: str) -> Any:
    """`json.loads(text)`; a number with more digits than Python turns into an int, or nesting deeper than its
    stack, a JSONDecodeError as any invalid JSON is (they were a ValueError and a RecursionError: a crash)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None
    except ValueError:  # Exceeds the limit (4300 digits) for integer string conversion
        raise json.JSONDecodeError("a number with too many digits to read (write it as a string)", text, 0) from None


# A JSON escape of half a UTF-16 pair: valid JSON, but alone no character, and no prompt can be sent holding one.
_LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _is_text(record: Mapping) -> bool:
    """Whether every key and value of a record can be written as UTF-8 (no lone half of a surrogate pair)."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
