"""An output type is one class and one line (docs/architecture.md): an `OutputKind` (language/nodes/outputs.py) in
OUTPUT_TYPES. This test adds a throwaway `upper` (text in capitals) that way: the .sbp and YAML forms take its name,
`check`, `fmt`, `run`, `eval`, the editor and the Python API read replies and values through it, and no other file
changes. A throwaway `verdict` with labels of its own is branched on by them; and no module outside outputs.py and
ir.py asks a type's kind."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import Script
from fake_server import FakeServer
from test_optimize import write

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.language import ir
from sembp_dsl.language.nodes.outputs import OUTPUT_TYPES, OutputKind, answer_format, output_text, words


class Upper(OutputKind):
    """Throwaway: text, read in capital letters."""

    name = "upper"
    said = "text in capital letters"
    told = "Answer in capital letters."

    def parse(self, type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
        return (text.upper(), None) if text else (None, "an empty reply")

    def read(self, type_: ir.OutputType, value: object, shown: str) -> tuple[object, str | None]:
        read, problem = super().read(type_, value, shown)
        return (None, problem) if problem is not None else (str(read).upper(), None)


PIPELINE = """\
pipeline shout "Say it loud"

input q: text

param p = "Say something."

node loud: upper { prompt = p }

q -> loud
output loud
"""

YAML = """\
pipeline: shout
description: Say it loud
inputs: {q: text}
params: {p: Say something.}
nodes:
  loud: {type: upper, prompt: p}
edges: [q -> loud]
output: loud
"""


@pytest.fixture
def upper(monkeypatch):
    monkeypatch.setitem(OUTPUT_TYPES, Upper.name, Upper())  # its one line


def test_an_output_type_is_a_class_and_one_line_and_runs_end_to_end(upper, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    loud = ir.OutputType("upper", span=None)
    assert words(loud) == "text in capital letters" and answer_format(loud) == "Answer in capital letters."
    assert output_text(loud, "quiet") == ("QUIET", None)
    with FakeServer(delay=0.0, reply=Script()) as server:
        path = write(tmp_path, "shout.sbp", PIPELINE, server.url)
        assert cli.main(["check", str(path)]) == 0
        assert cli.main(["fmt", "--check", str(path)]) == 0  # the canonical layout keeps the type's name
        capsys.readouterr()
        assert cli.main(["run", str(path), "--input", "q=hello", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["trace"]["output"] == "AN ANALYSIS."
        rows = tmp_path / "rows.jsonl"
        rows.write_text(json.dumps({"q": "hello", "answer": "an analysis"}) + "\n")
        assert cli.main(["eval", str(path), "--data", str(rows), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0  # the exact metric, its default
        with sbp.load(path) as pipeline:
            assert pipeline(q="hello").output == "AN ANALYSIS."
        yaml_path = tmp_path / "shout.yaml"
        yaml_path.write_text(YAML)
        assert cli.main(["check", str(yaml_path)]) == 0


def test_without_its_line_the_name_is_no_type(tmp_path, capsys):
    path = tmp_path / "shout.sbp"
    path.write_text(PIPELINE)
    assert cli.main(["check", str(path)]) == 1
    assert "error[" in capsys.readouterr().err
    yaml_path = tmp_path / "shout.yaml"
    yaml_path.write_text(YAML)
    assert cli.main(["check", str(yaml_path)]) == 1
    assert "'upper' is not a type" in capsys.readouterr().err


def test_the_editor_offers_a_registered_type(upper):
    from sembp_dsl.language.tooling.editor import Document

    text = PIPELINE.replace("node loud: upper", "node loud: ")
    offset = text.index("node loud: ") + len("node loud: ")
    offered = {c.label for c in Document(text, "shout.sbp").completions(offset)}
    assert {"upper", "text", "choice()", "list[]"} <= offered


# Where an output type's kind may be named: the registry's own module, and the IR, which spells the keyword types.
KIND_OWNERS = {"language/nodes/outputs.py", "language/ir.py"}
ONLY_A_TYPES = {"choice", "record"}  # kinds no other `.kind` in the code (a block's, a shape field's) is


def literals(node: ast.expr, constants: dict[str, set[str]]) -> set[str]:
    """The strings an expression spells: a literal, a tuple/list/set of them, or a module-level name bound to one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for each in node.elts for s in literals(each, constants)}
    return constants.get(node.id, set()) if isinstance(node, ast.Name) else set()


def kind_branches(source: str) -> list[str]:
    """The comparisons of an output type's `.kind` with a type's name in a module: `type_.kind == "choice"`,
    `node.type.kind in ("text", "choice")`, `t.kind != "record"`, `type_.kind in SCALAR_KINDS`."""
    tree = ast.parse(source)
    constants = {
        target.id: literals(statement.value, {})
        for statement in tree.body
        if isinstance(statement, ast.Assign)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for side, other in zip(sides, reversed(sides)):
            if not (isinstance(side, ast.Attribute) and side.attr == "kind"):
                continue
            named = literals(other, constants) & set(ir.KEYWORD_TYPES)
            if named and ("type" in ast.unparse(side.value) or named & ONLY_A_TYPES):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_branches_on_a_types_kind_are_its_output_kinds():
    """A question about what only some types have (a choice's labels, a record's fields, a list's item, an MCP
    input's schema) is the OutputKind's to answer, so that a new type answers it in its own class."""
    package = Path(sbp.__file__).parent
    found = {
        f"{path.relative_to(package).as_posix()}:{branch}"
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).as_posix() not in KIND_OWNERS
        for branch in kind_branches(path.read_text(encoding="utf-8"))
    }
    assert found == set()


def test_the_branch_finder_finds_the_forms_it_forbids():
    source = (
        'SCALAR = ("text", "number")\n'
        'a = type_.kind == "choice"\n'
        'b = node.type.kind not in ("text", "choice")\n'
        'c = "record" != found.kind\n'
        "d = type_.kind in SCALAR\n"
        'e = block.kind == "model" or field.kind == "list" or answer.kind != "text"\n'  # kinds of other things
    )
    assert [line.split(":")[0] for line in kind_branches(source)] == ["2", "3", "4", "5"]


class Verdict(OutputKind):
    """Throwaway with structure of its own: one of two labels, which a condition may branch on."""

    name = "verdict"

    def labels(self, type_: ir.OutputType) -> tuple[str, ...]:
        return ("GUILTY", "INNOCENT")


BRANCHING = """\
pipeline court "Decide, then explain"

input q: text

param p = "Decide."

node v: verdict { prompt = p }
node why: text { prompt = p }
node mercy: text { prompt = p }

q -> v
v -> why when v == GUILTY
v -> mercy when v == OPTION
output why | mercy
"""


def test_a_registered_type_with_labels_is_branched_on_by_them(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(OUTPUT_TYPES, Verdict.name, Verdict())
    path = tmp_path / "court.sbp"
    path.write_text(BRANCHING.replace("OPTION", "INNOCENT"))
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
    path.write_text(BRANCHING.replace("OPTION", "INOCENT"))
    assert cli.main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "error[E122]" in err and "has no option 'INOCENT'" in err and "did you mean 'INNOCENT'" in err
