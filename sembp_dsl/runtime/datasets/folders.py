"""Hugging Face data set folders (one `datasets.save_to_disk` wrote, or a hub snapshot's files named by split):
which files hold which split."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

from .dataset import DataError
from .reading import USER_SUFFIXES, json_value, read_text

# A Hugging Face folder's files are told apart by these words in their paths (train-00000-of-00001.parquet,
# data/validation.jsonl, test/0000.parquet), as the `datasets` library tells them.
SPLIT_WORDS = MappingProxyType(
    {
        **dict.fromkeys(("train", "training"), "train"),
        **dict.fromkeys(("validation", "valid", "val", "dev"), "validation"),
        **dict.fromkeys(("test", "testing", "eval", "evaluation"), "test"),
    }
)


def folder_splits(folder: Path) -> dict[str, list[Path]]:
    """A Hugging Face folder's data files by split: those `datasets.save_to_disk` wrote (dataset_dict.json naming a
    folder per split, or one split's state.json), else a hub snapshot's, each split told by a word in its path."""
    listing = folder / "dataset_dict.json"
    if listing.is_file():
        splits = _json_file(listing).get("splits")
        if not isinstance(splits, list) or not all(isinstance(s, str) and _plain_name(s) for s in splits):
            raise DataError(f'{listing}: expected {{"splits": ["train", ...]}}, each the name of a folder beside it')
        found: dict[str, list[Path]] = {}
        for split in splits:  # "train" and "training" are one split: their files together, neither's lost
            found.setdefault(SPLIT_WORDS.get(split.lower(), split), []).extend(_saved_split(folder / split))
        return found
    if (folder / "state.json").is_file():
        split = _json_file(folder / "state.json").get("_split")
        return {SPLIT_WORDS.get(split.lower(), split) if isinstance(split, str) else "train": _saved_split(folder)}
    return _snapshot_splits(folder)


def _plain_name(name: str) -> bool:
    """A file or folder's own name, not a path out of the folder (a hostile listing's "../x")."""
    return bool(name) and Path(name).name == name and name not in (".", "..")


def _json_file(path: Path) -> dict:
    try:
        found = json_value(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(found, dict):
        raise DataError(f"{path}: expected a JSON object")
    return found


def _saved_split(folder: Path) -> list[Path]:
    """The Arrow files of one split `save_to_disk` wrote, in the order its state.json lists them."""
    state = _json_file(folder / "state.json") if (folder / "state.json").is_file() else {}
    listed = state.get("_data_files")
    if isinstance(listed, list) and listed:
        names = [entry.get("filename") if isinstance(entry, dict) else None for entry in listed]
        if not all(isinstance(name, str) and _plain_name(name) for name in names):
            raise DataError(f'{folder / "state.json"}: expected "_data_files": [{{"filename": "data-....arrow"}}]')
        return [folder / str(name) for name in names]
    files = sorted(folder.glob("*.arrow"))
    if not files:
        raise DataError(f"{folder}: no .arrow files in this split's folder")
    return files


def _snapshot_splits(folder: Path) -> dict[str, list[Path]]:
    """A hub snapshot's data files (.parquet, .jsonl, .csv, ...; hidden folders skipped) by the split word in each
    path (its last); with no split word anywhere, every file is train."""
    files = sorted(_data_files(folder))
    if not files:
        raise DataError(f"{folder}: no data files (.jsonl, .csv, .tsv, .parquet, .arrow) in the folder")
    words = {p: _split_word(p.relative_to(folder)) for p in files}
    if not any(words.values()):
        return {"train": files}
    unnamed = [str(p.relative_to(folder)) for p, word in words.items() if word is None]
    if unnamed:
        more = f" and {len(unnamed) - _NAMED_AT_MOST} more" if len(unnamed) > _NAMED_AT_MOST else ""
        raise DataError(
            f"{folder}: no split in the name of {', '.join(unnamed[:_NAMED_AT_MOST])}{more}: name each file or its "
            "folder by its split (train, validation, test), as the other files are"
        )
    splits: dict[str, list[Path]] = {}
    for path, word in words.items():
        splits.setdefault(str(word), []).append(path)
    for split, paths in splits.items():
        formats = sorted({path.suffix.lower() for path in paths})
        if len(formats) > 1:  # a snapshot with a Parquet export beside the files: each row would be read twice
            raise DataError(
                f"{folder}: the {split} split's files are {' and '.join(formats)} files alike "
                f"({', '.join(str(p.relative_to(folder)) for p in paths[:_NAMED_AT_MOST])}): one split's rows "
                "in two formats would be read twice; keep one format, as the `datasets` library reads one"
            )
    return splits


_NAMED_AT_MOST = 10  # files a message names; the rest counted
# Entries a folder may hold before it is taken for no data set's (a home folder, "/"): a hub snapshot holds tens.
FOLDER_ENTRIES = 20_000


def _data_files(folder: Path) -> Iterator[Path]:
    """The data files under a folder, hidden folders (.git, .cache) not entered, links to folders not followed;
    DataError past FOLDER_ENTRIES entries, so a path to a disk's root is refused in a moment, not walked for minutes."""
    seen = 0
    for root, folders, names in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".")]
        seen += len(folders) + len(names)
        if seen > FOLDER_ENTRIES:
            raise DataError(
                f"{folder}: more than {FOLDER_ENTRIES:,} files and folders under it, so not a data set's folder: "
                "name the data file, or a folder holding a data set's files"
            )
        for name in names:
            path = Path(root, name)
            if path.suffix.lower() in USER_SUFFIXES and not name.startswith(".") and path.is_file():
                yield path


def _split_word(relative: Path) -> str | None:
    """The split a file's path names (train-00000-of-00001.parquet, data/dev.jsonl, test/0.parquet), the word nearest
    the file's own name deciding; None when it names none."""
    words = re.split(r"[^a-z]+", str(relative.with_suffix("")).lower())
    return next((SPLIT_WORDS[w] for w in reversed(words) if w in SPLIT_WORDS), None)
