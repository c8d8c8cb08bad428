"""An output type is one class and one line (docs/architecture.md): an `OutputKind` (language/nodes/outputs.py) in
OUTPUT_TYPES. This test adds a throwaway `upper` (text in capitals) that way: the .sbp and YAML forms take its name,
`check`, `fmt`, `run`, `eval` and the Python API read replies and values through it, and no other file changes."""

from __future__ import annotations

import json

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
