"""Data set loading and seeded train/val/test splits.

Built-in data sets (LIAR, GSM8K, BIG-Bench Hard) are read from a data folder that
is never part of the repository; user data sets are .jsonl/.csv/.tsv/.parquet/.arrow files, or a Hugging Face
folder (one `datasets.save_to_disk` wrote, or a hub snapshot's files named by split), whose splits it keeps.
Every problem with the data surfaces as a :class:`DataError` whose message is meant
for the user, so the CLI can print it instead of a traceback.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import itertools
import json
import os
import random
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from ..errors import Option, OptionError
from ..language.blocks.data import ANSWER_COLUMNS, NOT_A_FOLDER, Fields, same_file
from ..language.diagnostics import did_you_mean

__all__ = [
    "DATA_DIR_ENV",
    "DataError",
    "Dataset",
    "Sample",
    "Splits",
    "anchor_data_dir",
    "answer_key",
    "as_text",
    "bad_samples",
    "data_dirs",
    "eval_splits",
    "fields_of",
    "fingerprint",
    "first_rows",
    "fit_defaults",
    "head_of",
    "from_records",
    "load",
    "make_splits",
]

DATA_DIR_ENV = "SBPC_DATA_DIR"

_HOW_TO_GET = (
    f"set {DATA_DIR_ENV} or pass ",
    Option("data_dir=", "--data-dir"),
    " to a folder with liar/ gsm8k/ bbh/; "
    "LIAR: https://www.cs.ucsb.edu/~william/data/liar_dataset.zip, "
    "GSM8K: https://github.com/openai/grade-school-math, "
    "BBH: https://github.com/suzgunmirac/BIG-Bench-Hard",
)

# LIAR column positions (the files have no header).
_LIAR_COLUMNS = 14
_LIAR_FIELDS = {
    "statement": 2,
    "subject": 3,
    "speaker": 4,
    "job_title": 5,
    "state": 6,
    "party": 7,
    "context": 13,
}
# Rows with any of these empty or "none" are dropped, as in the paper
# "How to Correctly do Semantic Backpropagation".
_LIAR_REQUIRED = ("statement", "job_title", "state", "party", "context")
# The task is "is it a lie?": a statement labelled false is a lie.
_LIAR_ANSWER = {"false": "Yes", "true": "No"}

TABLE_SUFFIXES = (".parquet", ".arrow")  # read with pyarrow, the `hf` extra
USER_SUFFIXES = (".jsonl", ".csv", ".tsv", *TABLE_SUFFIXES)
# A Hugging Face folder's files are told apart by these words in their paths (train-00000-of-00001.parquet,
# data/validation.jsonl, test/0000.parquet), as the `datasets` library tells them.
SPLIT_WORDS = MappingProxyType(
    {
        **dict.fromkeys(("train", "training"), "train"),
        **dict.fromkeys(("validation", "valid", "val", "dev"), "validation"),
        **dict.fromkeys(("test", "testing", "eval", "evaluation"), "test"),
    }
)
_OWN_POOL = MappingProxyType({"val": "validation", "test": "test"})  # a split drawn from a pool of its own
# What `check` reads of each data file: its first rows, at most this many and in this many bytes, so a file of
# millions of rows is checked in a moment (a run reads the rest, and names any bad row of it then).
CHECK_BYTES = 1 << 20
CHECK_ROWS = 2_000


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


def anchor_data_dir() -> None:
    """Make a relative $SBPC_DATA_DIR absolute, against the folder it was given in (the current one).

    Called once at startup, so a process this one starts in another folder (a test
    running `sbpc` in a temporary folder) still finds the data.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        os.environ[DATA_DIR_ENV] = str(Path(env).expanduser().absolute())


def data_dirs(flag: str | None = None) -> list[Path]:
    """Folders searched for built-in data sets, most specific first.

    Order: the given folder (data_dir=, --data-dir), then $SBPC_DATA_DIR, then the user cache
    ($XDG_CACHE_HOME or ~/.cache)/sbpc/datasets. Duplicates are dropped; relative
    folders are made absolute against the current folder. A given folder that is
    a file is an error, not a silent skip.
    """
    candidates: list[Path] = []
    env = os.environ.get(DATA_DIR_ENV)
    for given, named in (
        (flag, Option(f"data_dir={flag!r}", f"--data-dir {flag!r}")),
        (env, f"${DATA_DIR_ENV} {env!r}"),
    ):
        if given:
            path = Path(given).expanduser().absolute()
            if path.exists() and not path.is_dir():
                raise DataError(named, " is a file, not a folder; ", *_HOW_TO_GET)
            candidates.append(path)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    candidates.append(Path(cache).expanduser() / "sbpc" / "datasets")
    unique: list[Path] = []
    for path in candidates:
        if path not in unique:
            unique.append(path)
    return unique


def as_text(value: object) -> str:
    """A data or input value as prompts and metrics see it: strings as they are, anything else as JSON text."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


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
    if first is not None and not own and path.suffix.lower() in (".jsonl", ".csv", ".tsv") and not _is_folder(path):
        return first_rows(path, first)
    dataset = _load(spec, data_dir)
    if not own:
        return dataset
    _distinct_files(spec, own)
    read = {pool: _load_user_file(Path(path).expanduser()) for pool, path in own.items()}
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
        folder = _find_folder("liar", data_dir)
        return _read_once(_load_liar, folder, files=[folder / f"{split}.tsv" for split in _LIAR_FILES])
    if name == "gsm8k":
        folder = _find_folder("gsm8k", data_dir)
        return _read_once(_load_gsm8k, folder, files=[folder / f"{split}.jsonl" for split in _GSM8K_FILES])
    if name == "bbh" or name.startswith("bbh:"):
        return _load_bbh(_find_folder("bbh", data_dir), name.partition(":")[2].strip())
    if _is_folder(Path(name).expanduser()):  # a folder named like a file (data.jsonl/) is one too, as `check` reads it
        return _load_folder(Path(name).expanduser())
    if name.lower().endswith(USER_SUFFIXES):
        path = Path(name).expanduser()
        return _read_once(_load_user_file, path, files=[path])
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
    if _is_folder(named):
        for split, files in folder_splits(named).items():
            for file in files:
                sources.setdefault(same_file(str(file)), (split, str(file)))
    elif spec.lower().endswith(USER_SUFFIXES):
        sources[same_file(spec)] = ("train", spec)
    for pool, path in own.items():
        if _is_folder(Path(path).expanduser()):
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


def make_splits(dataset: Dataset, train: int, val: int, test: int, seed: int) -> Splits:
    """Draw disjoint, seeded splits.

    With a "test" pool, test comes from it, and with a "validation" pool val from that; the rest from
    "train", so the official test partition is never trained on. Otherwise all pools are merged
    and carved in order train, val, test. The shuffle depends only on the seed
    and pool sizes, so with one seed a larger train request extends a smaller one.
    """
    for label, size in (("train", train), ("val", val), ("test", test)):
        if size < 0:
            raise DataError(f"{label} size must be 0 or more, got {size}")
    rng = random.Random(seed)
    if any(pool in dataset.pools for pool in _OWN_POOL.values()):
        return _from_own_pools(dataset, {"train": train, "val": val, "test": test}, rng)
    merged = [s for pool in dataset.pools.values() for s in pool]
    pool = _shuffled(merged, rng)
    names = "+".join(dataset.pools) or "(none)"
    _check_size(dataset, names, {"train": train, "val": val, "test": test}, len(pool))
    return Splits(
        train=tuple(pool[:train]),
        val=tuple(pool[train : train + val]),
        test=tuple(pool[train + val : train + val + test]),
    )


def fit_defaults(dataset: Dataset, sizes: Mapping[str, int], asked: Iterable[str]) -> tuple[dict[str, int], str]:
    """`sizes` (train, val, test), those not `asked` (sbpc's defaults) scaled down in proportion where their pool
    holds fewer rows than they add up to, so a small file is split rather than refused; the sizes asked for are
    kept (make_splits refuses them when they do not fit). With what was scaled said in words ("" when nothing)."""
    asked = set(asked)
    fitted = dict(sizes)
    for pool, splits in _pools_of(dataset).items():
        mine = {split: sizes[split] for split in splits}
        available = len(dataset.pools.get(pool, ())) if pool else sum(map(len, dataset.pools.values()))
        free = {split: size for split, size in mine.items() if split not in asked and size}
        room = available - sum(size for split, size in mine.items() if split in asked)
        if sum(mine.values()) > available and free and room > 0:
            fitted.update(_fitting(free, room) or {})
    changed = [split for split in _CARVE_ORDER if fitted[split] != sizes[split]]
    if not changed:
        return fitted, ""
    rows = sum(map(len, dataset.pools.values()))
    default = " + ".join(f"{sizes[split]} {split}" for split in changed)
    now = " + ".join(f"{fitted[split]} {split}" for split in changed)
    return (
        fitted,
        f"{dataset.name} has {rows} rows, fewer than the default sizes ask ({default}): split in proportion, {now}",
    )


def _pools_of(dataset: Dataset) -> dict[str, tuple[str, ...]]:
    """The pool each split is drawn from, as make_splits draws it ("" for every pool merged)."""
    if not any(pool in dataset.pools for pool in _OWN_POOL.values()):
        return {"": _CARVE_ORDER}
    own = {split: pool for split, pool in _OWN_POOL.items() if pool in dataset.pools}
    return {"train": tuple(split for split in _CARVE_ORDER if split not in own)} | {
        pool: (split,) for split, pool in own.items()
    }


def _from_own_pools(dataset: Dataset, sizes: Mapping[str, int], rng: random.Random) -> Splits:
    """val and test each from a pool of its own when the data set has one ("validation", "test"); train, and the
    splits without one, carved in that order from "train"."""
    carved = _shuffled(dataset.pools.get("train", ()), rng)
    own = {split: _shuffled(dataset.pools[pool], rng) for split, pool in _OWN_POOL.items() if pool in dataset.pools}
    from_train = {split: size for split, size in sizes.items() if split not in own}
    _check_size(dataset, "train", from_train, len(carved))
    for split, pool in own.items():
        _check_size(dataset, _OWN_POOL[split], {split: sizes[split]}, len(pool))
    drawn, start = {split: tuple(pool[: sizes[split]]) for split, pool in own.items()}, 0
    for split, size in from_train.items():
        drawn[split], start = tuple(carved[start : start + size]), start + size
    return Splits(drawn["train"], drawn["val"], drawn["test"])


EVAL_TEST_SIZE = 100  # samples `eval` scores from a built-in data set when no size is given
Quoting = Literal[0, 1, 2, 3]  # csv.QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC, QUOTE_NONE
_CARVE_ORDER = ("train", "val", "test")  # the order a single pool is cut in


def eval_splits(
    dataset: Dataset,
    train: int | None,
    val: int | None,
    test: int | None,
    seed: int,
    defaults: tuple[int, int, int],
    split: str = "test",
) -> Splits:
    """The splits `eval` scores: a user's data with no size given is scored whole as the test split (its
    test file, else every row, in file order); otherwise the split `optimize` would carve with these sizes and
    seed, so test never overlaps what was trained on. A size not given is taken from `defaults` only when it
    places the scored split (the splits carved before it from the same pool), else it is 0: evaluating asks
    for no rows it neither scores nor must skip."""
    if split not in _CARVE_ORDER:
        raise ValueError(f"split must be train, val or test, got {split!r}{did_you_mean(split, _CARVE_ORDER)}")
    given = dict(zip(_CARVE_ORDER, (train, val, test)))
    if dataset.user and split == "test" and all(size is None for size in given.values()):
        whole = dataset.pools.get("test") or tuple(s for pool in dataset.pools.values() for s in pool)
        return Splits((), (), whole)
    own = _OWN_POOL.get(split) in dataset.pools  # drawn from a pool of its own, after nothing
    before = () if own else _CARVE_ORDER[: _CARVE_ORDER.index(split)]
    sizes = _scored_sizes(dataset, given, defaults, split, before)
    try:
        return make_splits(dataset, sizes["train"], sizes["val"], sizes["test"], seed)
    except DataError as exc:
        skipped = [name for name in before if given[name] is None and sizes[name]]
        why = _too_few_to_evaluate(dataset, split, skipped, sizes)
        if not why:
            raise
        raise DataError(Option(str(exc), exc.cli), *why) from None


def _scored_sizes(
    dataset: Dataset, given: Mapping[str, int | None], defaults: tuple[int, int, int], split: str, before: tuple
) -> dict[str, int]:
    """The sizes `eval` cuts with to score `split` (`before`: the splits carved before it from its pool)."""
    sizes = _eval_sizes(given, defaults, placing=(*before, split))
    if dataset.user and split == "test" and given["test"] is None:  # a user's test split: the rows the others leave
        sizes["test"] = _rows_left(dataset, sizes, own=not before)
    if split != "test":  # the train or val split a small file holds as optimize cuts it (a test split is placed
        # behind the sizes optimize draws by default, and refused when they do not fit: it must not overlap them)
        sizes, _ = fit_defaults(dataset, sizes, [name for name, size in given.items() if size is not None])
    return sizes


def _rows_left(dataset: Dataset, sizes: Mapping[str, int], own: bool) -> int:
    """A user's test split when no size is given: its own pool whole, else the rows train and val leave (when they
    leave none, the default size, which the error then names with sizes that fit)."""
    if own:
        return len(dataset.pools["test"])
    left = sum(map(len, dataset.pools.values())) - sizes["train"] - sizes["val"]
    return left if left > 0 else sizes["test"]


def _eval_sizes(
    given: Mapping[str, int | None], defaults: tuple[int, int, int], placing: tuple[str, ...]
) -> dict[str, int]:
    """Each split's size: as given, else its default when it places the scored split (those carved before it, and
    itself), else 0."""
    return {
        name: size if (size := given[name]) is not None else default if name in placing else 0
        for name, default in zip(_CARVE_ORDER, defaults)
    }


def _too_few_to_evaluate(
    dataset: Dataset, split: str, skipped: list[str], sizes: Mapping[str, int]
) -> list[str | Option]:
    """The ways out when the data set holds fewer rows than `eval` asks for: the `skipped` splits it draws only to
    place the scored one may be sized 0, and a user's file may be scored whole."""
    why: list[str | Option] = []
    if skipped:  # the rows the scored split sits behind, which optimize trains or gates on
        counts = " and ".join(f"{sizes[name]} {name}" for name in skipped)
        zeros = Option(
            ", ".join(f"{name}_size=0" for name in skipped), " ".join(f"--{name}-size 0" for name in skipped)
        )
        why = [
            f"; the {split} split comes after the {counts} samples `optimize` draws by default, so it never "
            "overlaps them: pass the sizes you optimize with, or ",
            zeros,
            " if you do not optimize on this data",
        ]
    if dataset.user:  # the way out only evaluating has
        why += ["; ", Option("evaluate() with no size", "`eval` with no size"), " scores the whole file"]
    return why


def _shuffled(samples: tuple[Sample, ...] | list[Sample], rng: random.Random) -> list[Sample]:
    out = list(samples)
    rng.shuffle(out)
    return out


def _check_size(dataset: Dataset, pool: str, sizes: Mapping[str, int], available: int) -> None:
    """A request larger than the pool: say which sizes to give instead (same proportions, each split asked for
    keeping at least one sample; no example when the pool cannot hold one of each)."""
    wanted = sum(sizes.values())
    if wanted <= available:
        return
    asked = f"{dataset.name}: asked for {wanted} samples ({' + '.join(sizes)}) but the {pool!r} pool "
    if not available:
        raise DataError(asked + "is empty")
    fitting = _fitting(sizes, available)
    example: list[str | Option] = []
    if fitting:
        example = [
            ", for example ",
            Option(
                ", ".join(f"{split}_size={size}" for split, size in fitting.items()),
                " ".join(f"--{split}-size {size}" for split, size in fitting.items()),
            ),
        ]
    raise DataError(asked + f"has only {available}; pass sizes that add up to at most {available}", *example)


def _fitting(sizes: Mapping[str, int], available: int) -> dict[str, int] | None:
    """`sizes` scaled down to add up to at most `available`, every size asked for kept at 1 or more; None when
    the pool cannot hold one sample of each."""
    if sum(1 for size in sizes.values() if size) > available:
        return None
    wanted = sum(sizes.values())
    fitting = {split: max(1, size * available // wanted) if size else 0 for split, size in sizes.items()}
    while sum(fitting.values()) > available:  # the 1s given to tiny splits come from the largest
        largest = max(fitting, key=fitting.__getitem__)
        fitting[largest] -= 1
    return fitting


# --- locating and reading files -------------------------------------------------


def _find_folder(sub: str, flag: str | None) -> Path:
    """First data dir holding `sub`; the error lists every place looked at."""
    dirs = data_dirs(flag)
    for base in dirs:
        if (base / sub).is_dir():
            return base / sub
    looked = "\n".join(f"  {base / sub}" for base in dirs)
    raise DataError(f"data set folder {sub}/ not found; looked in:\n{looked}\n", *_HOW_TO_GET)


def _head_text(path: Path, head: int | None) -> tuple[str, bool]:
    """The file as text, or with `head` its whole lines in the first `head` bytes; and whether it goes on."""
    if head is None:
        return _read_text(path), False
    raw = _read_bytes(path, head + 1)
    if len(raw) <= head:
        return _read_text(path, raw), False
    return _read_text(path, raw[: raw.rfind(b"\n", 0, head) + 1] or raw[:head]), True


def _read_text(path: Path, raw: bytes | None = None) -> str:
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
    """A regular file's bytes, as many as its size says (at most `most`): see _pieces."""
    try:
        return b"".join(_pieces(path, most))
    except MemoryError:
        raise DataError(f"{path}: too large to read into memory ({_size(path)}); give a smaller file") from None


def _pieces(path: Path, most: int | None = None, piece: int | None = None) -> Iterator[bytes]:
    """A regular file's bytes, as many as its size says (at most `most`), in pieces of `piece` bytes (None: one): a
    FIFO or device (which would block or never end) is refused from the descriptor it opened without blocking, so a
    file swapped for one after a check is refused too; a file of a virtual file system (/proc/self/environ, size 0)
    reads as empty, not as its content."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DataError(f"{path}: {_unopenable(path, exc)}") from None
    try:
        found = _regular(path, os.fstat(fd))
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


def _regular(path: Path, found: os.stat_result) -> os.stat_result:
    """`found`, a regular file's status; else DataError naming what is there instead."""
    if stat.S_ISDIR(found.st_mode):
        raise DataError(f"{path}: is a directory, expected a file")
    if not stat.S_ISREG(found.st_mode):
        raise DataError(f"{path}: not a regular file (a pipe or a device?); give a file")
    return found


def _is_folder(path: Path) -> bool:
    """Whether a folder is there; False for a name no file can have (longer than the file system allows: Path.is_dir
    raises on it), which opening it then says in the user's words."""
    return os.path.isdir(path)


def _unopenable(path: Path, exc: OSError) -> str:
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


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # reading it says why, in the user's words
        return 0


def _size(path: Path) -> str:
    try:
        return f"{path.stat().st_size:,} bytes"
    except OSError:
        return "size unknown"


def _csv_rows(path: Path, text: str, delimiter: str, quoting: Quoting) -> Iterator[tuple[int, list[str]]]:
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
    """`_csv_rows` by the csv module."""
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


def _json_lines(path: Path, head: int | None = None, most: int = 0) -> Iterator[tuple[int, dict[str, object]]]:
    """(line number, object) pairs of a JSON-lines file (with `head`, of its first bytes' whole lines), skipping blank
    lines; every bad line is named, at the end."""
    bad: list[tuple[int, str]] = []
    read = 0
    for number, line in enumerate(_head_text(path, head)[0].split("\n"), start=1):
        if not line.strip():
            continue
        read += 1
        if head is not None and read > most:
            break
        try:
            record = _json_value(line)
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


def _json_value(text: str) -> Any:
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


# --- built-in data sets ------------------------------------------------------------


_LIAR_FILES = ("train", "valid", "test")
_GSM8K_FILES = ("train", "test")


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
            raise DataError(f"{path}:{line}: expected {_LIAR_COLUMNS} tab-separated columns, got {len(row)}")
        answer = _LIAR_ANSWER.get(row[1].strip())
        if answer is None:
            continue
        fields = {name: row[col].strip() for name, col in _LIAR_FIELDS.items()}
        if any(fields[name].casefold() in ("", "none") for name in _LIAR_REQUIRED):
            continue
        fields["source"] = fields["context"]  # pipelines call the context "source"
        samples.append(Sample(f"liar/{split}/{row[0].strip()}", fields, answer, origin=f"{path}:{line}"))
    return tuple(samples)


def _load_gsm8k(folder: Path) -> Dataset:
    pools = {split: _gsm8k_file(folder, split) for split in _GSM8K_FILES}
    return Dataset("gsm8k", pools, "numeric")


def _gsm8k_file(folder: Path, split: str) -> tuple[Sample, ...]:
    path = folder / f"{split}.jsonl"
    samples = []
    for index, (line, record) in enumerate(_json_lines(path)):
        question, solution = record.get("question"), record.get("answer")
        if not isinstance(question, str) or not isinstance(solution, str) or "####" not in solution:
            raise DataError(f'{path}:{line}: expected "question" and an "answer" containing \'#### \'')
        final = solution.rsplit("####", 1)[1].strip().replace(",", "")
        samples.append(Sample(f"gsm8k/{split}/{index}", {"question": question}, final, origin=f"{path}:{line}"))
    return tuple(samples)


def _load_bbh(folder: Path, task: str) -> Dataset:
    tasks = sorted(p.stem for p in folder.glob("*.json"))
    if task not in tasks:  # also rejects path tricks such as "../liar/train"
        wanted = (
            f"unknown BBH task {task!r}{did_you_mean(task, tasks)}" if task else "no BBH task given (use bbh:<task>)"
        )
        raise DataError(f"{wanted}; available tasks in {folder}: {', '.join(tasks) or '(none)'}")
    path = folder / f"{task}.json"
    try:
        examples = _json_value(_read_text(path))["examples"]
        samples = tuple(
            Sample(f"bbh/{task}/{i}", {"question": ex["input"]}, ex["target"].strip()) for i, ex in enumerate(examples)
        )
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except (KeyError, TypeError, AttributeError):
        shape = '{"examples": [{"input": ..., "target": ...}]}'
        raise DataError(f"{path}: expected {shape}") from None
    return Dataset(f"bbh:{task}", {"all": samples}, "exact")


# --- the user's own examples: a file, or records in memory ---------------------------


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


Records = Sequence[tuple[int, Mapping[str, object]]]  # (line, or row counted from 1, of a table file; the row)


def _load_user_file(path: Path) -> Dataset:
    return _user_data(path.name, {"all": [path]})


def _load_folder(folder: Path) -> Dataset:
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
        return list(_json_lines(path, head, most))
    if suffix in TABLE_SUFFIXES:
        return _arrow_records(path)
    return _table_records(path, suffix, head, most)


def first_rows(path: Path, count: int) -> Dataset:
    """A user's data file's first `count` rows (in file order), read from as few of its bytes as hold them: what
    `eval --limit N` scores of a file it scores whole, in a moment however long the file."""
    head = 1 << 20
    while True:
        records = _file_records(path, head, count)
        if len(records) >= count or head >= _size_of(path):
            return _user_data(path.name, {"all": [path]}, read={"all": [(path, records[:count])]})
        head *= 4


def _user_files(path: str) -> dict[str, list[Path]]:
    """A user's data by split: a folder's splits, or one file; DataError for anything else."""
    given = Path(path).expanduser()
    if _is_folder(given):
        return folder_splits(given)
    if given.suffix.lower() not in USER_SUFFIXES:
        raise DataError(f"{path}: a data file is .jsonl, .csv, .tsv, .parquet or .arrow, or a Hugging Face folder")
    return {"all": [given]}


def head_of(path: str) -> tuple[list[Mapping[str, object]], Dataset]:
    """The first rows of a user's data file or folder (each file's, as `check` reads them: CHECK_ROWS in
    CHECK_BYTES), read once: as they are, before a column is taken for the answer, and as a data set."""
    files = _user_files(path)
    read = {split: [(file, _file_records(file, CHECK_BYTES)) for file in paths] for split, paths in files.items()}
    folder = Path(path).expanduser() if _is_folder(Path(path).expanduser()) else None
    dataset = _user_data(Path(path).name, files, folder, read=read)
    return [record for parts in read.values() for _, records in parts for _, record in records], dataset


def fields_of(path: str) -> Fields | str:
    """The fields of a user's data file or folder (its answer column among them), the first row lacking each, and
    how many rows a file has at most; or why a run could not use it. Every bad row of the first CHECK_BYTES of
    each file is named, as a run would find them."""
    try:
        files = _user_files(path)
        folder = Path(path).expanduser() if _is_folder(Path(path)) else None
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


def fingerprint(*paths: str | None) -> str | None:
    """The sha256 of the data files a run reads (None for a built-in data set, or a file that is gone), so a record
    says whether its data changed since. A folder's files count with their names, so a renamed split is a change;
    each file after the first with its length, so a row moved from one file to the next is one too."""
    digest = hashlib.sha256()
    try:
        named = [p for p in paths if p and (p.lower().endswith(USER_SUFFIXES) or _is_folder(Path(p).expanduser()))]
        if not named:
            return None
        for number, given in enumerate(named):
            folder = Path(given).expanduser()
            if not _is_folder(folder):  # a pipe or device there now is refused, not waited on
                digest.update(b"%d\0" % folder.stat().st_size if number else b"")  # one file hashes as it always has
                for piece in _pieces(folder, piece=1 << 20):  # a long file in pieces, never whole in memory
                    digest.update(piece)
                continue
            for file in sorted(f for files in folder_splits(folder).values() for f in files):
                digest.update(str(file.relative_to(folder)).encode() + b"\0")
                for piece in _pieces(file, piece=1 << 20):
                    digest.update(piece)
    except (OSError, DataError):
        return None
    return digest.hexdigest()


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
    text, cut = _head_text(path, head)
    rows = _csv_rows(path, text, "\t" if tsv else ",", csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
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


# --- Hugging Face folders, and Parquet and Arrow files ----------------------------------


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
        found = _json_value(_read_text(path))
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


def _arrow_records(path: Path) -> list[tuple[int, dict[str, object]]]:
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
        _regular(path, path.stat())
    except OSError as exc:
        raise DataError(f"{path}: {_unopenable(path, exc)}") from None
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
        raise DataError(f"{path}: too large to read into memory ({_size(path)}); give a smaller file") from None


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
