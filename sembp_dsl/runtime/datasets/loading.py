"""A data set by name or path: a built-in benchmark, a user's file or folder, and each split's own file; read
once per process while its files stay as they were."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ...language.blocks.data import NOT_A_FOLDER, same_file
from .builtin import GSM8K_FILES, LIAR_FILES, find_folder, load_bbh, load_gsm8k, load_liar
from .dataset import DataError, Dataset
from .files import first_rows, load_folder, load_user_file
from .folders import folder_splits
from .reading import USER_SUFFIXES, is_folder, pieces


def load(
    spec: str,
    data_dir: str | None = None,
    test_data: str | None = None,
    validation_data: str | None = None,
    first: int | None = None,
) -> Dataset:
    """Load "liar", "gsm8k", "bbh:<task>", a user's data file or a Hugging Face folder.

    With `test_data` (a user file), the test split comes from that file and
    train/val from `spec` only, so what is scored is never trained on; with
    `validation_data`, val comes from that file, as from a folder's validation split.
    `first`: of a user's one .jsonl, .csv or .tsv file, only its first rows are needed (`eval --limit`).
    """
    own = {pool: path for pool, path in (("validation", validation_data), ("test", test_data)) if path}
    path = Path(spec.strip()).expanduser()
    if first is not None and not own and path.suffix.lower() in (".jsonl", ".csv", ".tsv") and not is_folder(path):
        return first_rows(path, first)
    dataset = _load(spec, data_dir)
    if not own:
        return dataset
    _distinct_files(spec, own)
    read = {pool: load_user_file(Path(path).expanduser()) for pool, path in own.items()}
    train = dataset.pools.get("train") or tuple(s for pool in dataset.pools.values() for s in pool)
    # a folder's own test split stays beside a validation file (not when its rows were merged into train)
    kept = {"test": dataset.pools["test"]} if "test" in dataset.pools and "train" in dataset.pools else {}
    return Dataset(
        "+".join([dataset.name, *(part.name for part in read.values())]),
        {"train": train, **kept, **{pool: part.pools["all"] for pool, part in read.items()}},
        dataset.metric,
        user=True,
    )


def _load(spec: str, data_dir: str | None) -> Dataset:
    name = spec.strip()
    if name == "liar":
        folder = find_folder("liar", data_dir)
        return _read_once(load_liar, folder, files=[folder / f"{split}.tsv" for split in LIAR_FILES])
    if name == "gsm8k":
        folder = find_folder("gsm8k", data_dir)
        return _read_once(load_gsm8k, folder, files=[folder / f"{split}.jsonl" for split in GSM8K_FILES])
    if name == "bbh" or name.startswith("bbh:"):
        return load_bbh(find_folder("bbh", data_dir), name.partition(":")[2].strip())
    if is_folder(Path(name).expanduser()):  # a folder named like a file (data.jsonl/) is one too, as `check` reads it
        return load_folder(Path(name).expanduser())
    if name.lower().endswith(USER_SUFFIXES):
        path = Path(name).expanduser()
        return _read_once(load_user_file, path, files=[path])
    raise DataError(
        f"unknown data set {spec!r}: expected liar, gsm8k, bbh:<task>, a path to a .jsonl, .csv, .tsv, .parquet or "
        ".arrow file, or a Hugging Face data set's folder"
    )


def _distinct_files(spec: str, own: Mapping[str, str]) -> None:
    """The validation and test splits' own files: data files by their names, as the data block's must be, and
    none of them a file another split reads (through a link, a hard link or another path to it): its rows would
    be trained on and scored alike. A folder's split that a file of its own replaces is no other split's."""
    named = Path(spec).expanduser()
    sources: dict[object, tuple[str, str]] = {}  # the file -> (the split reading it, as named)
    if is_folder(named):
        for split, files in folder_splits(named).items():
            for file in files:
                sources.setdefault(same_file(str(file)), (split, str(file)))
    elif spec.lower().endswith(USER_SUFFIXES):
        sources[same_file(spec)] = ("train", spec)
    for pool, path in own.items():
        if is_folder(Path(path).expanduser()):
            raise DataError(f"{path}: {NOT_A_FOLDER}")
        if not path.lower().endswith(USER_SUFFIXES):
            raise DataError(
                f"{path}: the {pool} split's own file is named .jsonl, .csv, .tsv, .parquet or .arrow, as the data "
                "block's are: its name says how to read it"
            )
        split, other = sources.setdefault(same_file(str(Path(path).expanduser())), (pool, path))
        if split != pool:
            also = f" ({other}, by a link or another path)" if other != path else ""
            raise DataError(
                f"{path} is the file the {split} split reads{also}: its rows would be drawn for the {split} and the "
                f"{pool} split alike; give each split a file of its own"
            )


_READ: dict[tuple, Dataset] = {}  # the data sets read in this process, by their files as they were read
_READ_KEPT = 4  # data sets kept at most: a process reads one or two
# A file changed less than this long ago is read afresh: the kernel stamps files with a coarse clock (a few ms), so a
# file rewritten at once with as many bytes can show the times it had.
_SETTLED = 2.0  # seconds


def _read_once(read: Callable[[Path], Dataset], where: Path, files: Sequence[Path]) -> Dataset:
    """`read(where)`, read once per process while its `files` stay as they were (size, times and inode alike):
    `sbpc eval` and `optimize` ask for their data set twice (to show the split, then to run it), and a LIAR or
    GSM8K file takes ~70 ms to read."""
    try:
        stats = [file.stat() for file in files]
    except OSError:  # the read says what is wrong, in the user's words
        return read(where)
    if any(time.time() - max(s.st_mtime, s.st_ctime) < _SETTLED for s in stats):
        return read(where)
    key = (read.__name__, where, *((s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino) for s in stats))
    dataset = _READ.get(key)
    if dataset is None:
        dataset = read(where)
        if len(_READ) >= _READ_KEPT:
            _READ.pop(next(iter(_READ)))
        _READ[key] = dataset
    return dataset


def fingerprint(*paths: str | None) -> str | None:
    """The sha256 of the data files a run reads (None for a built-in data set, or a file that is gone), so a record
    says whether its data changed since. A folder's files count with their names, so a renamed split is a change;
    each file after the first with its length, so a row moved from one file to the next is one too."""
    digest = hashlib.sha256()
    try:
        named = [p for p in paths if p and (p.lower().endswith(USER_SUFFIXES) or is_folder(Path(p).expanduser()))]
        if not named:
            return None
        for number, given in enumerate(named):
            folder = Path(given).expanduser()
            if not is_folder(folder):  # a pipe or device there now is refused, not waited on
                digest.update(b"%d\0" % folder.stat().st_size if number else b"")  # one file hashes as it always has
                for piece in pieces(folder, piece=1 << 20):  # a long file in pieces, never whole in memory
                    digest.update(piece)
                continue
            for file in sorted(f for files in folder_splits(folder).values() for f in files):
                digest.update(str(file.relative_to(folder)).encode() + b"\0")
                for piece in pieces(file, piece=1 << 20):
                    digest.update(piece)
    except (OSError, DataError):
        return None
    return digest.hexdigest()
