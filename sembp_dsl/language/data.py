"""Data named in the file: `data { file = "tickets.jsonl"  train = 20  validation = 20  seed = 1 }`.

The block names the file a run draws its examples from (relative to the pipeline's folder), and may say how
it is cut: the sizes and seed are the method's `train_size`, `val_size`, `test_size` and `seed`, written where
the data is, so one place says them. Reading the file is the runtime's: `check` is handed a `FieldsOf` that
reads it, and says here what the file lacks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from . import ir
from .diagnostics import Diagnostic, diagnostic, suggestion

DATA_SETTINGS: dict[str, tuple] = {
    "file": (str,),
    "train": (int,),
    "validation": (int,),
    "test": (int,),
    "seed": (int,),
}
# A data block's size or seed -> the method setting it is.
METHOD_SETTINGS = MappingProxyType(
    {"train": "train_size", "validation": "val_size", "test": "test_size", "seed": "seed"}
)

#: The columns a run reads the expected output from, first found first, when the output names none
#: (`output answer from "verdict"` names one).
ANSWER_COLUMNS = ("answer", "label", "target")
#: The fields of the data file at a path, or why it cannot be used (the runtime reads it; the language cannot).
FieldsOf = Callable[[str], "Sequence[str] | str"]
#: How the checker reports: code, where, message, help.
Report = Callable[..., None]


@dataclass(frozen=True)
class DataSpec:
    """What a data block says: the file as written, where it is, and the method settings it gives."""

    file: str
    path: str  # relative to the pipeline's folder, as the current folder sees it
    method: Mapping[str, int]


def data_block(pipeline: ir.Pipeline) -> ir.Block | None:
    return next((b for b in pipeline.blocks if b.kind == "data"), None)


def data_spec(pipeline: ir.Pipeline) -> DataSpec | None:
    """The pipeline's data block, read; None when it names no file (the checker has said so)."""
    block = data_block(pipeline)
    settings = {s.key: s.value for s in block.settings} if block is not None else {}
    file = settings.get("file")
    if not isinstance(file, str) or not file:
        return None
    path = os.path.normpath(os.path.join(os.path.dirname(pipeline.path), os.path.expanduser(file)))
    method = {METHOD_SETTINGS[k]: v for k, v in settings.items() if k in METHOD_SETTINGS and isinstance(v, int)}
    return DataSpec(file, path, MappingProxyType(method))


def check_data_blocks(pipeline: ir.Pipeline, report: Report) -> None:
    """One data block, unnamed, naming its file; its sizes not also set in the optimize block."""
    blocks = [b for b in pipeline.blocks if b.kind == "data"]
    for extra in blocks[1:]:
        report("E133", extra.span, "a pipeline names one data block; merge this one into the first")
    if not blocks:
        return
    block = blocks[0]
    if block.name is not None:
        report("E130", block.span, "a data block takes no name", help='data { file = "examples.jsonl" }')
    if not any(s.key == "file" for s in block.settings):
        report("E131", block.span, "the data block names no file", help='add file = "examples.jsonl"')
    optimize = {s.key: s for b in pipeline.blocks if b.kind == "optimize" for s in b.settings}
    for s in block.settings:
        twin = optimize.get(METHOD_SETTINGS.get(s.key, ""))
        if twin is not None:
            report(
                "E132",
                s.span,
                f"'{s.key}' here and '{twin.key}' in the optimize block say the same thing: keep one",
            )


def check_data_fields(pipeline: ir.Pipeline, fields_of: FieldsOf) -> list[Diagnostic]:
    """The data file exists and can be read, and its fields hold every input (and the output's answer field)."""
    spec, block = data_spec(pipeline), data_block(pipeline)
    if spec is None or block is None:
        return []
    literal = next(s for s in block.settings if s.key == "file")
    found = fields_of(spec.path)
    if isinstance(found, str):
        return [diagnostic("E134", literal.value_span, found, file=pipeline.path)]
    wanted = [(i.field or i.name, i.span, f"input '{i.name}'") for i in pipeline.inputs]
    wanted += [(o.field, o.span, f"output '{o.node.name}'") for o in pipeline.outputs if o.field]
    missing = _no_answer_column(pipeline, spec, found)
    for field, span, who in wanted:
        if field not in found:
            help = suggestion(field, found) or f"its fields: {', '.join(found) or '(none)'}"
            message = f"{who} reads the field '{field}', which {spec.file} does not have"
            missing.append(diagnostic("E135", span, message, file=pipeline.path, help=help))
    return missing


def _no_answer_column(pipeline: ir.Pipeline, spec: DataSpec, found: Sequence[str]) -> list[Diagnostic]:
    """An output scored by a built-in metric against a column the data lack: it names none (`from`), and the data
    have no column a run reads the answer from by default."""
    own = {m.name for m in pipeline.metric_defs}
    if any(f.casefold() in ANSWER_COLUMNS for f in found) or any(m.name in own for m in pipeline.metrics):
        return []
    example = f'"{found[-1]}"' if found else '"COLUMN"'
    return [
        diagnostic(
            "E135",
            output.span,
            f"output '{output.node.name}' is scored against the column named {', '.join(ANSWER_COLUMNS[:-1])} or "
            f"{ANSWER_COLUMNS[-1]}, which {spec.file} does not have",
            file=pipeline.path,
            help=f"name the column that holds the expected output: output {output.node.name} from {example}",
        )
        for output in pipeline.outputs
        if not output.field
    ]
