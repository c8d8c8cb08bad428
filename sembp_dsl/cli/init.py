"""`sbpc init`: a starter pipeline from a data file and a one-line task, so nobody starts by copying one.

What it guesses (the answer field, the kind of answer and so its metric) it says; what it wrote it checks; it
never overwrites a file. With no data it asks nothing and writes a commented template.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..runtime.datasets import ANSWER_COLUMNS, USER_SUFFIXES, DataError, as_text, fields_of, rows_of
from .flags import UsageError
from .routers import router_problem

MAX_LABELS = 12  # more distinct answers than this, or longer ones, read as free text
MAX_LABEL_CHARS = 40
FULL_SPLIT = 20  # the method's default train and validation sizes; a smaller file is cut in two


@dataclass(frozen=True)
class Answer:
    """The answer column, why it was taken, and what its values are: labels, numbers or free text."""

    field: str
    why: str
    kind: str  # "labels" | "numbers" | "text"
    labels: tuple[str, ...]

    @property
    def metric(self) -> str:
        return {"labels": "exact", "numbers": "numeric", "text": "judge"}[self.kind]

    @classmethod
    def of(cls, rows: list, fields: list[str]) -> Answer:
        field, why = _answer_field(fields)
        values = [as_text(row[field]).strip() for row in rows if field in row]
        labels = tuple(dict.fromkeys(values))
        if values and all(_number(v) for v in values):
            return cls(field, why, "numbers", ())
        short = all(len(v) <= MAX_LABEL_CHARS and "\n" not in v for v in labels)
        if labels and short and len(labels) <= MAX_LABELS and len(labels) < len(values):
            return cls(field, why, "labels", labels)
        return cls(field, why, "text", ())


def _number(value: str) -> bool:
    """Whether an answer is a number and nothing else ("1,000", "-2.5"), which `numeric` compares as one."""
    try:
        return math.isfinite(float(value.replace(",", "")))
    except ValueError:
        return False


def _answer_field(fields: list[str]) -> tuple[str, str]:
    """The column sbpc reads the expected output from, as a run reads it (runtime/datasets.py)."""
    for wanted in ANSWER_COLUMNS:
        found = next((f for f in fields if f.casefold() == wanted), None)
        if found is not None:
            return found, f"the column named {wanted!r}, which sbpc reads as the expected output"
    raise UsageError(
        f"no answer column: sbpc reads the expected output from one named {', '.join(ANSWER_COLUMNS)}; rename "
        f"the column that holds it (fields: {', '.join(fields)})"
    )


def data_file(given: str) -> Path:
    """The file to read: `given`, or in a folder (a Hugging Face data set's) its train file, else its only one."""
    path = Path(given).expanduser()
    if not path.is_dir():
        return path
    found = sorted(p for p in path.rglob("*") if p.suffix.lower() in USER_SUFFIXES and p.is_file())
    train = [p for p in found if p.stem.lower().startswith("train")]
    if len(train) == 1 or len(found) == 1:
        return (train or found)[0]
    listed = ", ".join(str(p.relative_to(path)) for p in found) or "none"
    raise UsageError(f"{given}: no single train file (.jsonl, .csv, .tsv) in the folder (found: {listed}); give one")


def name_of(field: str) -> str:
    """A field's name as a pipeline name: letters, digits and _, never a reserved word."""
    from ..language.checker import RESERVED  # ~50 ms to import (measured): only init pays it, not every command

    name = re.sub(r"\W", "_", field, flags=re.ASCII) or "field"
    name = f"f_{name}" if name[0].isdigit() else name
    return f"{name}_" if name in RESERVED else name


def quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def starter(task: str, name: str, data: str, fields: list[str], answer: Answer, rows: int, model: str) -> str:
    """The pipeline: an input per field, one instruction, the output typed by the answer, its metric, the model."""
    inputs = [f for f in fields if f != answer.field]
    lines = [f"pipeline {name} {quoted(task)}", ""]
    lines += [f"# Written by `sbpc init` from {data}: the answer is {answer.field!r} ({answer.why})."]
    for field in inputs:
        own = name_of(field)
        lines.append(f"input {own}: text" + (f" from {quoted(field)}" if own != field else ""))
    kind = {"labels": f"choice({', '.join(map(quoted, answer.labels))})", "numbers": "number", "text": "text"}
    lines += ["", f"param instruction = {quoted(task)}", f"node answer: {kind[answer.kind]} {{ prompt = instruction }}"]
    lines += [f"{', '.join(name_of(f) for f in inputs)} -> answer", "output answer"]
    if answer.kind == "text":
        lines += [
            "",
            "# A judge scores free text: say in the rubric what makes an answer right.",
            'frozen param rubric = """',
            "  A good answer does what the task asks and agrees with the expected answer: {{ expected }}",
            '  """',
            "metric quality { prompt = rubric  scale = 1..5 }",
        ]
    else:
        lines.append(f"metric {answer.metric}")
    train = min(FULL_SPLIT, max(1, rows // 2))
    lines += ["", f"data {{ file = {quoted(data)}  train = {train}  validation = {min(FULL_SPLIT, rows - train)} }}"]
    lines.append(f"model {{ name = {quoted(model)} }}")
    return "\n".join(lines) + "\n"


TEMPLATE = """\
# A starter pipeline written by `sbpc init`: edit it, then `sbpc check {file}`.
# docs/language.md has every statement; `sbpc init --data FILE "task"` writes one from your data.
pipeline {name} "Say in one line what the pipeline does"

# An input per field of your data (a differently named field: `input text: text from "message"`).
input question: text

# The instruction the optimizer rewrites; a frozen param it never changes.
param instruction = "Answer the question."

# A node: its output type (text, number, json, choice(Yes, No), a record, list[text]) and its prompt.
node answer: text {{ prompt = instruction }}
question -> answer
output answer

# exact (labels), numeric (numbers), json, or a judge of your own for free text.
metric exact

# The examples a run reads, relative to this file; sizes and seed are optional.
# data {{ file = "examples.jsonl"  train = 20  validation = 20 }}

model {{ name = "{model}" }}
"""


def ask_task(given: str | None, data: Path) -> str:
    """The task: as given; else asked for on a terminal; else a placeholder to edit."""
    if given:
        return given
    if sys.stdin.isatty() and sys.stdout.isatty():
        answer = input("In one line, what should the pipeline do? ").strip()
        if answer:
            return answer
    return f"Give the answer for each example of {data.name}"


@dataclass(frozen=True)
class Written:
    """What init wrote and said: the file, its data and answer (None without data), and its check."""

    file: Path
    data: str | None
    answer: Answer | None
    inputs: tuple[str, ...]
    diagnostics: list

    @property
    def next_commands(self) -> list[str]:
        file = str(self.file)
        return [f"sbpc check {file}", f"sbpc eval {file}", f"sbpc optimize {file} --plan"]


def write(args, model: str) -> Written:
    """The pipeline written, from the data when given, else the template; never over an existing file."""
    inputs: tuple[str, ...] = ()
    if not args.data:
        out = Path(args.out or "pipeline.sbp")
        text, data, answer = TEMPLATE.format(file=out, name=name_of(out.stem), model=model), None, None
    else:
        source = data_file(args.data)
        out = Path(args.out or f"{source.stem}.sbp")
        try:
            rows = rows_of(str(source))
        except DataError as exc:
            raise UsageError(str(exc)) from None
        fields = list(dict.fromkeys(str(key) for row in rows for key in row))
        answer = Answer.of(rows, fields)
        data = os.path.relpath(source.absolute(), out.absolute().parent)
        task = ask_task(args.task, source)
        text = starter(task, name_of(out.stem), data, fields, answer, len(rows), model)
        inputs = tuple(f for f in fields if f != answer.field)
    # the formatter and the parser (lark) cost about 0.6 s to import: --help and the other commands never pay it
    from ..language.fmt import format_text
    from ..language.source import diagnose_file

    try:
        with open(out, "x", encoding="utf-8") as file:  # "x": an existing file is never overwritten
            file.write(format_text(text, str(out)))  # as `sbpc fmt` would lay it out
    except FileExistsError:
        raise UsageError(f"{out} exists, and init never overwrites a file: give another with --out") from None
    diagnostics = diagnose_file(str(out), router_problem, (), fields_of).diagnostics
    return Written(out, data, answer, inputs, diagnostics)


def cmd_init(args) -> int:
    # the model layer: only init names the embedded model; `sbpc check` stays free of it
    from ..models.embedded import MODEL as EMBEDDED

    written = write(args, args.model or EMBEDDED)
    errors = [d for d in written.diagnostics if d.severity == "error"]
    commands = written.next_commands
    if args.json:
        answer = written.answer
        print(
            json.dumps(
                {
                    "file": str(written.file),
                    "data": written.data,
                    "inputs": list(written.inputs),
                    "answer": answer and {"field": answer.field, "why": answer.why, "kind": answer.kind},
                    "metric": answer and answer.metric,
                    "ok": not errors,
                    "diagnostics": [d.message for d in written.diagnostics],
                    "next": commands,
                },
                indent=2,
            )
        )
        return 1 if errors else 0
    print(f"wrote {written.file}" + (f" from {written.data}" if written.data else " (a template: no data given)"))
    if written.answer:
        answer = written.answer
        print(f"  inputs: {', '.join(written.inputs)}")
        print(f"  answer: {answer.field!r}, {answer.why}; {answer.kind}, so metric {answer.metric}")
    for d in written.diagnostics:
        print(f"  {d.severity}[{d.code}]: {d.message}")
    print("checked: " + (f"{len(errors)} error(s) to fix first" if errors else "ok"))
    print("next:\n" + "\n".join(f"  {c}" for c in commands))
    if not args.model:
        print(f"(the model block names the embedded model, {EMBEDDED}: edit it, or give --model to init)")
    return 1 if errors else 0


def add_init(sub) -> None:
    init = sub.add_parser(
        "init",
        help="write a starter pipeline from a data file and a one-line task",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a starter pipeline from your data: an input per field, the answer field guessed\n"
        "(answer, label or target, as runs read it) and said, one instruction (the task), the\n"
        "metric that fits the answers (exact for labels, numeric for numbers, a judge to edit for free\n"
        "text), a data block naming the file, and a model block (--model, else the embedded model).\n"
        "It checks what it wrote and prints the next three commands. It never overwrites a file.\n"
        "Without --data it asks nothing and writes a commented template. It asks for the task only on a\n"
        "terminal, when none is given.",
        epilog="examples:\n"
        '  sbpc init --data tickets.jsonl "Decide whether a ticket is urgent" --model openai/gpt-4o-mini\n'
        "  sbpc init --data ./my_hf_dataset/ --out triage.sbp   # a folder: its train file\n"
        "  sbpc init                                             # a commented template, pipeline.sbp",
    )
    init.add_argument("task", nargs="?", metavar="TASK", help="what the pipeline should do, in one line")
    init.add_argument("--data", metavar="PATH", help="a .jsonl, .csv or .tsv file, or a folder holding one")
    init.add_argument("--model", metavar="MODEL", help="the model to call (default: the embedded model)")
    init.add_argument("--out", metavar="FILE", help="the file to write (default: named after the data)")
    init.add_argument("--json", action="store_true", help="say what was written as JSON, for scripts")
    init.set_defaults(run=cmd_init)
