"""The built-in benchmarks (LIAR, GSM8K, BIG-Bench Hard), read from a data folder that is never part of the
repository: where it is looked for, and each benchmark's own files."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from ...errors import Option
from ...language.diagnostics import did_you_mean
from .dataset import DataError, Dataset, Sample
from .reading import csv_rows, json_lines, json_value, read_text

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


def find_folder(sub: str, flag: str | None) -> Path:
    """First data dir holding `sub`; the error lists every place looked at."""
    dirs = data_dirs(flag)
    for base in dirs:
        if (base / sub).is_dir():
            return base / sub
    looked = "\n".join(f"  {base / sub}" for base in dirs)
    raise DataError(f"data set folder {sub}/ not found; looked in:\n{looked}\n", *_HOW_TO_GET)


LIAR_FILES = ("train", "valid", "test")
GSM8K_FILES = ("train", "test")


def load_liar(folder: Path) -> Dataset:
    train = _liar_file(folder, "train") + _liar_file(folder, "valid")
    return Dataset("liar", {"train": train, "test": _liar_file(folder, "test")}, "exact")


def _liar_file(folder: Path, split: str) -> tuple[Sample, ...]:
    path = folder / f"{split}.tsv"
    samples = []
    # QUOTE_NONE: some statements hold unbalanced '"', which default quoting
    # would treat as a quoted field running across lines, merging records.
    for line, row in csv_rows(path, read_text(path), "\t", csv.QUOTE_NONE):
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


def load_gsm8k(folder: Path) -> Dataset:
    pools = {split: _gsm8k_file(folder, split) for split in GSM8K_FILES}
    return Dataset("gsm8k", pools, "numeric")


def _gsm8k_file(folder: Path, split: str) -> tuple[Sample, ...]:
    path = folder / f"{split}.jsonl"
    samples = []
    for index, (line, record) in enumerate(json_lines(path)):
        question, solution = record.get("question"), record.get("answer")
        if not isinstance(question, str) or not isinstance(solution, str) or "####" not in solution:
            raise DataError(f'{path}:{line}: expected "question" and an "answer" containing \'#### \'')
        final = solution.rsplit("####", 1)[1].strip().replace(",", "")
        samples.append(Sample(f"gsm8k/{split}/{index}", {"question": question}, final, origin=f"{path}:{line}"))
    return tuple(samples)


def load_bbh(folder: Path, task: str) -> Dataset:
    tasks = sorted(p.stem for p in folder.glob("*.json"))
    if task not in tasks:  # also rejects path tricks such as "../liar/train"
        wanted = (
            f"unknown BBH task {task!r}{did_you_mean(task, tasks)}" if task else "no BBH task given (use bbh:<task>)"
        )
        raise DataError(f"{wanted}; available tasks in {folder}: {', '.join(tasks) or '(none)'}")
    path = folder / f"{task}.json"
    try:
        examples = json_value(read_text(path))["examples"]
        samples = tuple(
            Sample(f"bbh/{task}/{i}", {"question": ex["input"]}, ex["target"].strip()) for i, ex in enumerate(examples)
        )
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except (KeyError, TypeError, AttributeError):
        shape = '{"examples": [{"input": ..., "target": ...}]}'
        raise DataError(f"{path}: expected {shape}") from None
    return Dataset(f"bbh:{task}", {"all": samples}, "exact")
