"""A kind of node is one module: the checker, the graph, the runtime, the backward pass, the emitters and the
displays ask a node's kind (language/kinds), so a new kind is a class and one line in KINDS, and nothing outside
kinds/ asks whether a node calls a function or what a kind keeps on its traces."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from conftest import eval_samples

import sembp_dsl
from sembp_dsl.cli.commands import main
from sembp_dsl.language import ir
from sembp_dsl.language.check.checker import check
from sembp_dsl.language.codes import lookup
from sembp_dsl.language.codes.code import Code
from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.kinds import KINDS, kind_of, shown
from sembp_dsl.language.kinds.kind import Checking, Compiled, Model, NodeKind
from sembp_dsl.language.nodes.node import GraphNode
from sembp_dsl.language.nodes.trace import FIELDS, NodeTrace, Shown
from sembp_dsl.language.syntax.parser import parse
from sembp_dsl.language.tooling.editor import Document
from sembp_dsl.language.tooling.emit import emit_dot, emit_prompts
from sembp_dsl.language.tooling.hover import setting_help
from sembp_dsl.learning.backward import backward_calls
from sembp_dsl.models.llm import LLM
from sembp_dsl.runtime.forward import run

PACKAGE = Path(sembp_dsl.__file__).parent
KINDS_FOLDER = PACKAGE / "language" / "kinds"
# What may be read as `.function` outside kinds/: a metric's `module:function` (ir.MetricDef, MetricSpec).
METRIC_RECEIVERS = {"metric", "spec", "defined", "self"}


def test_nothing_outside_the_kinds_asks_whether_a_node_calls_a_function():
    asked = []
    for path in PACKAGE.rglob("*.py"):
        if KINDS_FOLDER in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setting":
                if any(isinstance(a, ast.Constant) and a.value in ("function", "timeout") for a in node.args):
                    asked.append(f"{where}: {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and node.attr in ("function", "timeout"):
                receiver = node.value.id if isinstance(node.value, ast.Name) else ast.unparse(node.value)
                if node.attr == "function" and receiver not in METRIC_RECEIVERS:
                    asked.append(f"{where}: {ast.unparse(node)}")
    assert not asked, asked
    assert not {"function", "timeout"} & {f.name for f in fields(GraphNode)}  # a kind's own settings: `settings`


class Echo(NodeKind):
    """A throwaway kind: the node answers with the value of the input its `echo` setting names, no model call, and
    keeps on its trace what it copied (`echoed`), which it says in words to every display. Its setting's hover text
    and the code its own check reports, with its `sbpc explain` page, are its own too."""

    name = "echo"
    marker = "echo"
    settings = {"echo": (str,)}
    help = {"echo": "the input the node repeats, word for word"}
    prompted = False
    trace_keys = ("echoed",)
    codes = (
        Code(
            "E159",
            "a node that echoes itself",
            "An echo node repeats the input its `echo` setting names; naming the node itself repeats nothing.",
            "node copy: text { echo = copy }",
            "node copy: text { echo = question }",
        ),
    )

    def check(self, cx: Checking, node: ir.Node) -> None:
        source = node.setting("echo")
        if source is not None and source.value == node.name:
            cx.report("E159", source.value_span, f"node '{node.name}' echoes itself")

    def model_calls(self, node: GraphNode) -> int:
        return 0

    async def forward(self, node: GraphNode, graph: Compiled, model: Model, values: Mapping[str, str]) -> NodeTrace:
        value = values[str(node.settings["echo"])]
        echoed = {"from": node.settings["echo"], "chars": len(value)}
        return NodeTrace(
            node.name, f"echo {node.settings['echo']}", value, value, None, 0, 0, 0.0, False, extra={"echoed": echoed}
        )

    def instruction(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> str:
        return "It repeats its input."

    def label(self, node: GraphNode) -> str:
        return f"{node.name}: {node.type}, echo"

    def sections(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> Iterator[str]:
        yield f"=== {node.name}: echoes {node.settings['echo']}, no model ==="

    def shown(self, extra: Mapping[str, Any], full: bool) -> Sequence[Shown]:
        echoed = extra["echoed"]
        said = f"copied {echoed['chars']} characters from {echoed['from']}"
        return [Shown("echoed", f"{said}, in full" if full else said)]


ECHO = """\
pipeline echoing
input question: text
node copy: text { echo = question }
question -> copy
output copy
"""


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setitem(KINDS, Echo.name, Echo())  # the one line a new kind adds to the registry


def test_a_new_kind_is_a_class_and_one_registration_line(echo):
    pipeline = parse(ECHO, "echo.sbp")
    _, diagnostics = check(pipeline)
    assert not [d for d in diagnostics if d.severity == "error"], diagnostics
    graph = build(pipeline)
    copy = graph.nodes["copy"]
    assert isinstance(kind_of(copy), Echo) and kind_of(pipeline.nodes[0]) is kind_of(copy)
    assert (copy.kind, dict(copy.settings)) == ("echo", {"echo": "question"})
    assert graph.model_nodes == ()  # the plan counts no call for it
    assert '"copy: text, echo"' in emit_dot(graph)
    assert "=== copy: echoes question, no model ===" in emit_prompts(graph)
    assert "It repeats its input." in graph.backward_questions(copy, {"question": "q"}, "q", "fine", True)[0][1]
    assert backward_calls(graph, "sibling", params=()) == 0

    llm = LLM(graph.models)  # names no model: a call would fail
    trace = asyncio.run(run(graph, llm, {"question": "What is the capital of France?"}))
    assert trace.output == "What is the capital of France?" and trace.final.prompt == "echo question"


def test_its_own_checks_are_asked_and_the_registry_is_what_makes_it_a_kind(echo, monkeypatch):
    with pytest.raises(PipelineError, match="node 'copy' echoes itself"):
        build(parse(ECHO.replace("echo = question", "echo = copy"), "echo.sbp"))
    monkeypatch.delitem(KINDS, Echo.name)
    with pytest.raises(PipelineError, match="unknown setting 'echo' in node 'copy'"):
        build(parse(ECHO, "echo.sbp"))


def test_a_new_kinds_code_and_hover_text_are_its_own(echo, tmp_path, monkeypatch, capsys):
    """Echo declares E159 and its setting's words; check reports the code, explain and hover read them from it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "echo.sbp").write_text(ECHO.replace("echo = question", "echo = copy"))
    assert main(["check", "echo.sbp"]) == 1
    assert "error[E159]: node 'copy' echoes itself" in capsys.readouterr().err
    assert main(["explain", "e159"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("E159: a node that echoes itself (error)") and "naming the node itself" in page
    assert main(["explain"]) == 0
    assert "E150 " in (listed := capsys.readouterr().out) and listed.index("E159 ") > listed.index("E150 ")
    assert Document(ECHO, "echo.sbp").hover(ECHO.index("echo =")) == (
        "**echo**: the input the node repeats, word for word"
    )

    monkeypatch.delitem(KINDS, Echo.name)  # the code and the words go with the kind
    with pytest.raises(SystemExit, match="2"):
        main(["explain", "E159"])
    assert "unknown code 'E159'" in capsys.readouterr().err and lookup("E159") is None
    assert Document(ECHO, "echo.sbp").hover(ECHO.index("echo =")) is None


def test_a_new_kinds_own_trace_data_is_shown_by_run_trace_show_and_the_report(echo, tmp_path, monkeypatch, capsys):
    """Echo keeps `echoed` on its traces and says it through `shown`; no display file knows of it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "echo.sbp").write_text(ECHO)
    question = "What is the capital of France?"
    (tmp_path / "echo.jsonl").write_text(json.dumps({"question": question, "answer": question}) + "\n")

    assert main(["run", "echo.sbp", "--input", f"question={question}", "--trace"]) == 0
    out = capsys.readouterr().out
    assert (
        "--- reply ---\nWhat is the capital of France?\n--- echoed ---\ncopied 30 characters from question, in full\n"
        in out
    )
    assert main(["run", "echo.sbp", "--input", f"question={question}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["nodes"]["copy"]["echoed"] == {"from": "question", "chars": 30}

    assert main(["eval", "echo.sbp", "--data", "echo.jsonl"]) == 0
    [run_dir] = (tmp_path / ".sbpc" / "runs").iterdir()
    [sample] = eval_samples(run_dir / "run.json")
    assert sample["nodes"]["copy"]["echoed"] == {"from": "question", "chars": 30}
    capsys.readouterr()
    assert main(["show", str(run_dir)]) == 0
    said = capsys.readouterr().out
    assert "    copy replied: What is the capital of France?\n      copied 30 characters from question\n" in said
    assert "in full" not in said  # show asks for the short form
    assert main(["report", str(run_dir), "--out", "report.html"]) == 0
    page = (tmp_path / "report.html").read_text()
    assert '<p class="muted">echoed</p><pre>copied 30 characters from question</pre>' in page

    monkeypatch.delitem(KINDS, Echo.name)  # a record of a kind this sbpc lacks: its data shown as JSON, never lost
    assert main(["show", str(run_dir)]) == 0
    assert '      {\n        "from": "question",\n        "chars": 30\n      }' in capsys.readouterr().out


def test_a_kinds_data_it_cannot_read_is_shown_as_json_and_no_kind_may_hide_a_field(echo):
    assert shown({"echoed": {"from": "question", "chars": 3}}) == [Shown("echoed", "copied 3 characters from question")]
    assert shown({"echoed": ["not", "a", "mapping"]}) == [Shown("echoed", '[\n  "not",\n  "a",\n  "mapping"\n]')]
    assert shown({"steps": "garbled"}) == [Shown("steps", '"garbled"')]  # the tool loop's, from a stranger's record
    with pytest.raises(ValueError, match="may not be named as a NodeTrace field"):
        NodeTrace("n", "", "", None, None, 0, 0, 0.0, False, extra={"reply": "hidden"})
    owned = [key for kind in KINDS.values() for key in kind.trace_keys]
    assert len(owned) == len(set(owned)) and not set(owned) & FIELDS  # each key is one kind's, and no field's


def test_every_setting_of_every_kind_has_its_hover_text():
    """A kind's settings and their words live together: the editor's hover reads them from the kind."""
    from sembp_dsl.language.nodes import maps

    taken = {key for kind in KINDS.values() for key in kind.accepts} | set(maps.SETTINGS)
    assert {key for key in taken if not setting_help(key)} == set()
    assert all(set(kind.help) <= set(kind.settings) for kind in KINDS.values())
    text = 'pipeline t\ninput task: text\nfunction lookup = "tools:lookup"\n'
    text += "node solve: text { tools = [lookup]  max_steps = 4 }\ntask -> solve\noutput solve\n"
    for key in ("tools", "max_steps"):  # hovered where they are written, in a tool loop's node
        at = text.index(f"{key} = ")
        assert Document(text, "p.sbp").hover(at) == f"**{key}**: {KINDS['tools'].help[key]}"
