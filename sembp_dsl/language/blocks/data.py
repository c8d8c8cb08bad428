"""Data named in the file: `data { file = "tickets.jsonl"  train = 20  validation = 20  seed = 1 }`, or each split's
own file, `data { train = "train.jsonl"  validation = "dev.jsonl"  test = "test.jsonl" }`.

The block names the file a run draws its examples from (relative to the pipeline's folder), and may say how
it is cut: the sizes and seed are the method's `train_size`, `val_size`, `test_size` and `seed`, written where
the data is, so one place says them. A split named by a file rather than a size is that file's pool, as a Hugging
Face folder's split is: the test split is drawn from the test file alone, so what is scored is never trained on.
Reading the files is the runtime's: `check` is handed a `FieldsOf` that reads one, and says here what it lacks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .. import ir
from ..diagnostics import Diagnostic, diagnostic, suggestion

SPLITS = ("train", "validation", "test")  # a split's size, or its own file
SIZE_OR_FILE = (int, str)
OWN_FILES = ("validation", "test")  # the splits a file of their own replaces in the train file's pool
NOT_A_FOLDER = "a split's own data is one file (.jsonl, .csv, .tsv, .parquet or .arrow), not a folder"
DATA_SETTINGS: dict[str, tuple] = {
    "file": (str,),
    **dict.fromkeys(SPLITS, SIZE_OR_FILE),
    "seed": (int,),
}
# A data block's size or seed -> the method setting it is.
METHOD_SETTINGS = MappingProxyType(
    {"train": "train_size", "validation": "val_size", "test": "test_size", "seed": "seed"}
)

#: The columns a run reads the expected output from, first found first, when the output names none
#: (`output answer from "verdict"` names one).
ANSWER_COLUMNS = ("answer", "label", "target")


@dataclass(frozen=True)
class Fields:
    """What `check` reads of a data file: its fields (every row's), where the first row without each of them is
    (a run refuses that row), and how many rows it has at most (None: not counted)."""

    columns: tuple[str, ...]
    lacking: Mapping[str, str]  # field -> "tickets.jsonl:7", the first row without it
    rows: int | None


#: The fields of the data file at a path, or why it cannot be used (the runtime reads it; the language cannot).
FieldsOf = Callable[[str], "Fields | Sequence[str] | str"]
#: How the checker reports: code, where, message, help.
Report = Callable[..., None]


@dataclass(frozen=True)
class DataSpec:
    """What a data block says: the file as written (the one pool, or train's own), where it is, the method settings
    it gives, and where the validation and test splits' own files are, when it names them."""

    file: str
    path: str  # relative to the pipeline's folder, as the current folder sees it
    method: Mapping[str, int]
    validation: str | None = None  # the validation split's own file, as `path` is given
    test: str | None = None  # the test split's own file


def data_block(pipeline: ir.Pipeline) -> ir.Block | None:
    return next((b for b in pipeline.blocks if b.kind == "data"), None)


def named_files(block: ir.Block) -> dict[str, ir.Setting]:
    """The block's settings that name a file, by key: `file`, or a split's own (a string; an empty one names none)."""
    return {s.key: s for s in block.settings if s.key in ("file", *SPLITS) and isinstance(s.value, str) and s.value}


def resolved(pipeline: ir.Pipeline, file: str) -> str:
    """A file the block names, as the current folder sees it: relative to the pipeline's folder."""
    return os.path.normpath(os.path.join(os.path.dirname(pipeline.path), os.path.expanduser(file)))


def data_spec(pipeline: ir.Pipeline) -> DataSpec | None:
    """The pipeline's data block, read; None when it names no file (the checker has said so). `file` is the one
    pool, else `train` the train split's file, beside the validation and test splits' own."""
    block = data_block(pipeline)
    if block is None:
        return None
    files = {key: s.value for key, s in named_files(block).items() if isinstance(s.value, str)}
    first = files.get("file") or files.get("train")
    if first is None:
        return None
    own = {} if "file" in files else {split: resolved(pipeline, files[split]) for split in OWN_FILES if split in files}
    method = {
        METHOD_SETTINGS[s.key]: s.value
        for s in block.settings
        if s.key in METHOD_SETTINGS and isinstance(s.value, int) and not isinstance(s.value, bool)
    }
    return DataSpec(first, resolved(pipeline, first), MappingProxyType(method), **own)


def check_data_blocks(pipeline: ir.Pipeline, report: Report) -> None:
    """One data block, unnamed, naming its file (one pool, or a file to train on) and not both ways; no file named
    for two splits; its sizes not also set in the optimize block."""
    blocks = [b for b in pipeline.blocks if b.kind == "data"]
    for extra in blocks[1:]:
        report("E133", extra.span, "a pipeline names one data block; merge this one into the first")
    if not blocks:
        return
    block = blocks[0]
    if block.name is not None:
        report("E130", block.span, "a data block takes no name", help='data { file = "examples.jsonl" }')
    files = named_files(block)
    if "file" not in files and "train" not in files:
        _no_file(block, files, report)
    own = [s for key, s in files.items() if key != "file"]
    if "file" in files and own:
        report(
            "E139",
            own[0].value_span,
            f"'file' names one pool the splits are cut from, and {_own_files(own)} named too: name the data one way",
            help='keep file = ... and give sizes (test = 50), or drop it and name train = "train.jsonl" too',
        )
    if "file" not in files:  # else E139 has said all there is
        _same_file_twice(pipeline, files, report)
    optimize = {s.key: s for b in pipeline.blocks if b.kind == "optimize" for s in b.settings}
    for s in block.settings:
        twin = optimize.get(METHOD_SETTINGS.get(s.key, ""))
        if twin is not None and not isinstance(s.value, str):  # a file is no size: the optimize block sizes its split
            report(
                "E132",
                s.span,
                f"'{s.key}' here and '{twin.key}' in the optimize block say the same thing: keep one",
            )


def _no_file(block: ir.Block, files: Mapping[str, ir.Setting], report: Report) -> None:
    """E131: nothing to draw examples from, or splits' own files with none to train on."""
    if not files:
        report("E131", block.span, "the data block names no file", help='add file = "examples.jsonl"')
        return
    report(
        "E131",
        block.span,
        f"the data block names no file to train on: {_own_files(list(files.values()))} named alone",
        help='add train = "train.jsonl" (the rows optimize learns from)',
    )


def _own_files(named: Sequence[ir.Setting]) -> str:
    """`the test split's own file is`, `the validation and test splits' own files are`."""
    if len(named) == 1:
        return f"the {named[0].key} split's own file is"
    return f"the {', '.join(s.key for s in named[:-1])} and {named[-1].key} splits' own files are"


def _same_file_twice(pipeline: ir.Pipeline, files: Mapping[str, ir.Setting], report: Report) -> None:
    """E140: two splits' files that are one file, whose rows would be trained on and scored alike."""
    first: dict[object, ir.Setting] = {}
    for key, s in files.items():
        path = same_file(resolved(pipeline, str(s.value)))
        if path in first:
            report(
                "E140",
                s.value_span,
                f"'{key}' names the file '{first[path].key}' names: its rows would be drawn for both splits",
                help="give each split a file of its own, or name one pool with file = ... and cut it by sizes",
            )
        first.setdefault(path, s)


def check_data_fields(pipeline: ir.Pipeline, fields_of: FieldsOf) -> list[Diagnostic]:
    """Every data file the block names exists and can be read, and its fields hold every input (and the output's
    answer field); a field missing from several files is one diagnostic naming them."""
    spec, block = data_spec(pipeline), data_block(pipeline)
    if spec is None or block is None:
        return []
    found: list[Diagnostic] = []
    lacking: dict[tuple[ir.Span, str], tuple[str, list[str]]] = {}  # (where, what) -> (help, the files without it)
    for literal in _files_to_read(pipeline, block):
        name, path = str(literal.value), resolved(pipeline, str(literal.value))
        folder = literal.key in OWN_FILES and os.path.isdir(path)  # a run reads a split's own data as one file
        fields = f"{path}: {NOT_A_FOLDER}" if folder else fields_of(path)
        if isinstance(fields, str):
            found.append(diagnostic("E134", literal.value_span, fields, file=pipeline.path, help=_nearby(path, name)))
            continue
        read = fields if isinstance(fields, Fields) else Fields(tuple(fields), {}, None)
        shown = _inside(pipeline, path)
        for span, what, help in _lacks(pipeline, read.columns, shown=shown):
            lacking.setdefault((span, what), (help, []))[1].append(name)
        for span, what, row in _rows_lacking(pipeline, read):
            help = "a run refuses a row without it: fill it in, or drop the row"
            lacking.setdefault((span, what), (help, []))[1].append(row if shown else f"a row of {name}")
        found += _too_few_rows(pipeline, block, literal, read.rows)
    for (span, what), (help, names) in lacking.items():
        verb = "do" if len(names) > 1 else "does"
        found.append(
            diagnostic(
                "E135", span, f"{what}, which {' and '.join(names)} {verb} not have", file=pipeline.path, help=help
            )
        )
    return found


def _rows_lacking(pipeline: ir.Pipeline, read: Fields) -> Iterator[tuple[ir.Span, str, str]]:
    """(where, what, the row) for each field an input reads that the file has but one of its rows lacks."""
    for i in pipeline.inputs:
        field = i.field or i.name
        if field in read.columns and field in read.lacking:
            yield i.span, f"input '{i.name}' reads the field '{field}'", read.lacking[field]


def _too_few_rows(pipeline: ir.Pipeline, block: ir.Block, literal: ir.Setting, rows: int | None) -> list[Diagnostic]:
    """E160: the sizes the file asks for (its data and optimize blocks') add up to more rows than the pool a file
    holds: a run would refuse them. sbpc's own defaults are never counted: a run scales them to fit."""
    if rows is None:
        return []
    asked = _sizes_asked(pipeline, block, literal)
    wanted = sum(s.value for s in asked.values() if isinstance(s.value, int))
    if wanted <= rows or not asked:
        return []
    sizes = " + ".join(f"{s.value} {split}" for split, s in asked.items())
    return [
        diagnostic(
            "E160",
            next(iter(asked.values())).span,
            f"the sizes add up to {wanted} rows ({sizes}), but {literal.value} has {rows}",
            file=pipeline.path,
            help=f"give sizes that add up to at most {rows}, or leave them out: a run then splits the file in "
            "proportion",
        )
    ]


def _sizes_asked(pipeline: ir.Pipeline, block: ir.Block, literal: ir.Setting) -> dict[str, ir.Setting]:
    """The sizes of the splits drawn from the file `literal` names, by split, as the data block or else the
    optimize block gives them."""
    own = {key for key in OWN_FILES if key in named_files(block)}
    pool = [split for split in SPLITS if split not in own] if literal.key in ("file", "train") else [literal.key]
    sized = {s.key: s for s in block.settings if isinstance(s.value, int)}
    optimize = {
        s.key: s for b in pipeline.blocks if b.kind == "optimize" for s in b.settings if isinstance(s.value, int)
    }
    found = {split: sized.get(split) or optimize.get(METHOD_SETTINGS[split]) for split in pool}
    return {split: s for split, s in found.items() if s is not None}


def _files_to_read(pipeline: ir.Pipeline, block: ir.Block) -> list[ir.Setting]:
    """The settings naming the files a run reads: the one pool, else each split's own file (once, when two
    name one: E140 says so)."""
    files = named_files(block)
    if "file" in files:
        return [files["file"]]
    paths: dict[object, ir.Setting] = {}
    for key in SPLITS:
        if key in files:
            paths.setdefault(same_file(resolved(pipeline, str(files[key].value))), files[key])
    return list(paths.values())


def same_file(path: str) -> object:
    """What tells one file from another: its device and inode when it is there (a link, a hard link or another
    spelling of a path is the file it names), else its path with every link resolved."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):  # not there (E134 says so), or a name no file can have
        return os.path.realpath(path)
    return (found.st_dev, found.st_ino)


def _nearby(path: str, written: str) -> str:
    """`did you mean 'train.jsonl'?` for a file that is not there, from the names in the folder it was looked for in."""
    try:
        if os.path.lexists(path):  # there, or a link to nothing: no other name to suggest
            return ""
        names = [name for name in os.listdir(os.path.dirname(path)) if not name.startswith(".")]
    except OSError:  # no such folder either, or one that cannot be listed: nothing to suggest
        return ""
    return suggestion(written, [os.path.join(os.path.dirname(written), name) for name in names])


def hides_fields(pipeline: ir.Pipeline, where: str) -> bool:
    """Whether the data file a row was read from (`where`, "path" or "path:line") is one the data block names that
    lies outside the pipeline's folder, whose fields no message shows: a stranger's pipeline could link `x.csv` to a
    file of secrets, and what a run says before any call lands in public CI logs as check's output does."""
    block = data_block(pipeline)
    if block is None or not where:
        return False
    path = os.path.realpath(where.rpartition(":")[0] if ":" in os.path.basename(where) else where)
    for literal in named_files(block).values():
        named = os.path.realpath(resolved(pipeline, str(literal.value)))
        if (path == named or path.startswith(os.path.join(named, ""))) and not _inside(pipeline, named):
            return True
    return False


def _inside(pipeline: ir.Pipeline, path: str) -> bool:
    """Whether a data file is, links resolved, in the pipeline's folder (or below it)."""
    folder = os.path.realpath(os.path.dirname(pipeline.path) or ".")
    return os.path.realpath(path).startswith(os.path.join(folder, ""))


def _lacks(pipeline: ir.Pipeline, found: Sequence[str], shown: bool = True) -> Iterator[tuple[ir.Span, str, str]]:
    """What a file with these fields lacks, as (where, what, help): a column to score the output against when it
    names none (`from`) and no metric of the file's own scores it, and each field an input or the output reads.
    A file outside the pipeline's folder (`shown` False) has its fields named in no help: a stranger's pipeline
    could link `x.csv` to a file of secrets, and a check's output lands in public CI logs."""
    own = {m.name for m in pipeline.metric_defs}
    if not any(f.casefold() in ANSWER_COLUMNS for f in found) and not any(m.name in own for m in pipeline.metrics):
        example = f'"{found[-1]}"' if found and shown else '"COLUMN"'
        for output in pipeline.outputs:
            if not output.field:
                what = (
                    f"output '{output.node.name}' is scored against the column named "
                    f"{', '.join(ANSWER_COLUMNS[:-1])} or {ANSWER_COLUMNS[-1]}"
                )
                help = f"name the column that holds the expected output: output {output.node.name} from {example}"
                yield output.span, what, help
    wanted = [(i.field or i.name, i.span, f"input '{i.name}'") for i in pipeline.inputs]
    wanted += [(o.field, o.span, f"output '{o.node.name}'") for o in pipeline.outputs if o.field]
    for field, span, who in wanted:
        if field not in found:
            if not shown:
                help = "its fields are not shown: the file is outside the pipeline's folder"
            else:
                help = suggestion(field, found) or f"its fields: {', '.join(found) or '(none)'}"
            yield span, f"{who} reads the field '{field}'", help
