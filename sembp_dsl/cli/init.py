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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..files import WriteBackError
from ..language.blocks.data import ANSWER_COLUMNS
from ..language.diagnostics import did_you_mean
from ..runtime.datasets import DataError, answer_key, as_text, fields_of, head_of
from .flags import UsageError
from .routers import router_problem

MAX_LABELS = 12  # more distinct answers than this, or longer ones, read as free text
MAX_LABEL_CHARS = 40
# Names an answer column goes by, most telling first: those a run reads by default, then common ones.
ANSWER_NAMES = (
    *ANSWER_COLUMNS,
    *("output", "gold", "gold_label", "verdict", "class", "category", "y", "labels", "answers", "expected"),
    *("expected_output", "ground_truth", "truth", "solution", "result", "outcome", "sentiment", "response"),
)


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
    def of(cls, rows: list, fields: list[str], given: str | None = None) -> Answer:
        field, why = _answer_field(rows, fields, given)
        values = _values(rows, field)
        if values and all(_number(v) for v in values):
            return cls(field, why, "numbers", ())
        labels = _labels(values)
        return cls(field, why, "labels", labels) if labels else cls(field, why, "text", ())


def _values(rows: list, field: str) -> list[str]:
    """The column's answers, blank ones left out: no label is blank (E048), and a column blank in every row reads
    as free text."""
    return [text for row in rows if row.get(field) is not None and (text := as_text(row[field]).strip())]


def _labels(values: list[str]) -> tuple[str, ...]:
    """The distinct values, when they read as labels: few, short, one line each, and repeated; else ()."""
    labels = tuple(dict.fromkeys(values))
    short = all(len(v) <= MAX_LABEL_CHARS and "\n" not in v for v in labels)
    return labels if labels and short and len(labels) <= MAX_LABELS and len(labels) < len(values) else ()


def _number(value: str) -> bool:
    """Whether an answer is a number and nothing else ("1,000", "-2.5"), which `numeric` compares as one."""
    try:
        return math.isfinite(float(value.replace(",", "")))
    except ValueError:
        return False


def _answer_field(rows: list, fields: list[str], given: str | None) -> tuple[str, str]:
    """The column the expected output is read from, and why: --answer; else a column named as answers are (answer,
    label, target, output, gold, verdict, ...); else the last one whose values read as labels."""
    if given is not None:
        if given not in fields:
            raise UsageError(
                f"--answer {given}: no such column{did_you_mean(given, fields)} (columns: {', '.join(fields)})"
            )
        return given, "as --answer said"
    named = {re.sub(r"[\s-]+", "_", f.casefold()): f for f in reversed(fields)}
    for name in ANSWER_NAMES:
        if name in named:
            return named[name], "guessed from its name"
    for field in reversed(fields):
        labels = _labels(_values(rows, field))
        if labels and len(fields) > 1:
            return field, f"guessed: the last column with few distinct values ({len(labels)})"
    raise UsageError(
        f"no answer column: none is named as answers are ({', '.join(ANSWER_NAMES[:8])}, ...), nor holds a few "
        f"distinct values; say which one holds the expected output with --answer COLUMN (columns: {', '.join(fields)})"
    )


def name_of(field: str) -> str:
    """A field's name as a pipeline name: letters, digits and _, never a reserved word."""
    from ..language.check.context import RESERVED  # ~50 ms to import (measured): only init pays it, not every command

    name = re.sub(r"\W", "_", field, flags=re.ASCII) or "field"
    name = f"f_{name}" if name[0].isdigit() else name
    return f"{name}_" if name in RESERVED else name


def names_of(fields: Sequence[str], taken: Sequence[str] = ()) -> list[str]:
    """Each field's name as a pipeline name (name_of), one of its own and none of `taken` (the node's): "a b" and
    "a_b" are a_b and a_b_2, since two inputs of one name, or an input named as a node, are an error (E020)."""
    names: list[str] = [*taken]
    for field in fields:
        name, number = name_of(field), 1
        while (name if number == 1 else f"{name}_{number}") in names:
            number += 1
        names.append(name if number == 1 else f"{name}_{number}")
    return names[len(taken) :]


def quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def as_literal(task: str) -> str:
    """The task as a param's text that says it as written: a param holding `{{`, `{%` or `{#` is a template, so such
    a task is kept in a raw block (one that cannot end early: the task's own `endraw` is spaced out)."""
    if not re.search(r"\{[{%#]", task):
        return task
    return "{% raw %}" + re.sub(r"endraw", "end raw", task) + "{% endraw %}"


@dataclass(frozen=True)
class Starter:
    """What the starter pipeline is written from: the task, the data as the pipeline names it, its inputs and
    answer, and the model."""

    task: str
    name: str
    data: str
    inputs: tuple[str, ...]
    answer: Answer
    model: str

    def text(self) -> str:
        """The pipeline: an input per field, one instruction, the output typed by the answer and read from its
        column, its metric, the data and the model."""
        answer, node = self.answer, "answer"  # no input is named so: a run reads that column as the answer
        lines = [f"pipeline {self.name} {quoted(self.task)}", ""]
        lines += [f"# Written by `sbpc init` from {quoted(self.data)}."]  # quoted: a name may hold a line break
        names = names_of(self.inputs, taken=(node,))
        for field, own in zip(self.inputs, names):
            lines.append(f"input {own}: text" + (f" from {quoted(field)}" if own != field else ""))
        kind = {"labels": f"choice({', '.join(map(quoted, answer.labels))})", "numbers": "number", "text": "text"}
        lines += [
            "",
            f"param instruction = {quoted(as_literal(self.task))}",
            f"node {node}: {kind[answer.kind]} {{ prompt = instruction }}",
        ]
        lines += [f"{', '.join(names)} -> {node}"]
        lines += [
            f"# The expected output is the column {answer.field!r} ({answer.why}); another? Change `from` here.",
            f"output {node} from {quoted(answer.field)}",
        ]
        lines += _metric_lines(answer)
        # no sizes: a run cuts sbpc's defaults to fit the file, and `eval` scores it whole
        lines += ["", f"data {{ file = {quoted(self.data)} }}"]
        lines.append(f"model {{ name = {quoted(self.model)} }}")
        return "\n".join(lines) + "\n"


def _metric_lines(answer: Answer) -> list[str]:
    if answer.kind != "text":
        return [f"metric {answer.metric}"]
    return [
        "",
        "# A judge scores free text: say in the rubric what makes an answer right.",
        'frozen param rubric = """',
        "  A good answer does what the task asks and agrees with the expected answer: {{ expected }}",
        '  """',
        "metric quality { prompt = rubric  scale = 1..5 }",
    ]


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
        source = Path(args.data).expanduser()
        out = Path(args.out or f"{source.stem or 'pipeline'}.sbp")
        try:
            rows = head_of(str(source))[0]  # its first rows: enough to guess from, and quick however long
        except DataError as exc:
            raise UsageError(str(exc)) from None
        fields = list(dict.fromkeys(str(key) for row in rows for key in row))
        answer = Answer.of(rows, fields, args.answer)
        default = answer_key(fields)  # a run reads this column as the answer, so no input can
        # a column with no name (a table's index, as pandas writes one) is one no input can name: left out
        inputs = tuple(f for f in fields if f not in (answer.field, default, ""))
        if not inputs:
            also = f", and {default!r}, which a run reads as the answer" if default not in (None, answer.field) else ""
            raise UsageError(
                f"{args.data}: no column for the pipeline to read besides the answer, {answer.field!r}{also}"
            )
        data = os.path.relpath(source.absolute(), out.absolute().parent)
        task = ask_task(args.task, source)
        text = Starter(task, name_of(out.stem), data, inputs, answer, model).text()
    # the formatter and the parser (lark) cost about 0.6 s to import: --help and the other commands never pay it
    from ..language.graph.compile import diagnose_file
    from ..language.tooling.fmt import format_text

    _create(out, format_text(text, str(out)))  # as `sbpc fmt` would lay it out
    diagnostics = diagnose_file(str(out), router_problem, (), fields_of).diagnostics
    return Written(out, data, answer, inputs, diagnostics)


def _create(out: Path, text: str) -> None:
    """`text` in a new file at `out`, never over one that is there (nor through a link there); a file it could not
    finish is removed, so the next try is not told it exists."""
    try:
        file = open(out, "x", encoding="utf-8")  # "x": an existing file (or link) is never overwritten
    except FileExistsError:
        raise UsageError(f"{out} exists, and init never overwrites a file: give another with --out") from None
    except OSError as exc:  # no such folder, not allowed, a read-only file system
        raise WriteBackError(f"{out}: cannot write it: {exc.strerror or exc}") from None
    try:
        with file:
            file.write(text)
    except OSError as exc:  # the disk full: what was written is removed
        out.unlink(missing_ok=True)
        raise WriteBackError(f"{out}: cannot write it: {exc.strerror or exc}") from None


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
        print(
            f'  another answer column? change `from "{answer.field}"` in {written.file}, or give init --answer COLUMN'
        )
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
        description="Write a starter pipeline from your data: an input per field, the answer column guessed\n"
        "(by its name: answer, label, target, output, gold, verdict, class, ...; else the last column with\n"
        "few distinct values) and said, or named by --answer, one instruction (the task), the metric\n"
        "that fits the answers (exact for labels, numeric for numbers, a judge to edit for free text), a\n"
        "data block naming the data, and a model block (--model, else the embedded model).\n"
        "It checks what it wrote and prints the next three commands. It never overwrites a file.\n"
        "Without --data it asks nothing and writes a commented template. It asks for the task only on a\n"
        "terminal, when none is given.",
        epilog="examples:\n"
        '  sbpc init --data tickets.jsonl "Decide whether a ticket is urgent" --model openai/gpt-4o-mini\n'
        "  sbpc init --data ./my_hf_dataset/ --out triage.sbp   # a Hugging Face folder, its splits kept\n"
        "  sbpc init                                             # a commented template, pipeline.sbp",
    )
    init.add_argument("task", nargs="?", metavar="TASK", help="what the pipeline should do, in one line")
    init.add_argument(
        "--data",
        metavar="PATH",
        help="a .jsonl, .csv, .tsv, .parquet or .arrow file, or a Hugging Face data set's folder (save_to_disk's, "
        "or a hub snapshot's files by split); Parquet and Arrow need the hf extra",
    )
    init.add_argument("--answer", metavar="COLUMN", help="the column holding the expected output (default: guessed)")
    init.add_argument("--model", metavar="MODEL", help="the model to call (default: the embedded model)")
    init.add_argument("--out", metavar="FILE", help="the file to write (default: named after the data)")
    init.add_argument("--json", action="store_true", help="say what was written as JSON, for scripts")
    init.set_defaults(run=cmd_init)
