"""Function nodes in the language: the `function` declaration and `function = NAME` node, their YAML twin,
their checks, `compile --emit`, and what the formatter and the editor know of them (issue 18)."""

from __future__ import annotations

import json

import pytest

from sembp_dsl.language.check.checker import check
from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.syntax.parser import parse
from sembp_dsl.language.syntax.yaml_form import parse_yaml
from sembp_dsl.language.tooling.editor import Document
from sembp_dsl.language.tooling.emit import EMITTERS
from sembp_dsl.language.tooling.fmt import format_text

SBP = """\
pipeline rag "Answer from passages"
input question: text
function search = "tools:search"
param write_query = "Write a search query."
node query: text { prompt = write_query }
node passages: json { function = search  timeout = 2.5 }
node answer: text {}
question -> query -> passages -> answer
question -> answer
output answer
"""

YAML = """\
pipeline: rag
description: Answer from passages
inputs: {question: text}
functions: {search: "tools:search"}
params: {write_query: Write a search query.}
nodes:
  query: {type: text, prompt: write_query}
  passages: {type: json, function: search, timeout: 2.5}
  answer: {type: text}
edges: ["question -> query -> passages -> answer", "question -> answer"]
output: answer
"""


def test_the_declaration_and_the_node_parse_into_the_ir_and_the_yaml_twin_is_equal():
    pipeline = parse(SBP, "rag.sbp")
    [function] = pipeline.functions
    assert (function.name, function.target) == ("search", "tools:search")
    passages = pipeline.nodes[1]
    assert passages.setting("function").value == "search" and passages.setting("timeout").value == 2.5
    assert parse_yaml(YAML, "rag.yaml") == pipeline


def test_the_graph_knows_its_function_node_and_what_it_may_take():
    graph = build(parse(SBP, "rag.sbp"))
    passages = graph.nodes["passages"]
    assert (passages.kind, passages.settings, passages.params) == (
        "function",
        {"function": "search", "timeout": 2.5},
        (),
    )
    assert graph.trainable == ("write_query",)  # a function node is never trained
    assert [n.name for n in graph.model_nodes] == ["query", "answer"]
    assert graph.functions == {}  # compiling binds no code


def test_emit_shows_the_function_and_the_ir_keeps_it():
    graph = build(parse(SBP, "rag.sbp"))
    assert '"passages" [label="passages: json, function search"];' in EMITTERS["dot"](graph)
    assert json.loads(EMITTERS["ir"](graph))["functions"][0]["target"] == "tools:search"
    prompts = EMITTERS["prompts"](graph)
    assert "=== passages: calls the function search(query=<query>), no model ===" in prompts
    assert "=== passages: forward ===" not in prompts
    assert "A Python function, search (tools:search)" in prompts  # its backward question


@pytest.mark.parametrize(
    "edit, code, message",
    [
        (("tools:search", "tools.py/search"), "E080", "names no callable"),
        (("function = search", "function = serach"), "E081", "undefined function 'serach'"),
        (("function = search", "function = search  prompt = write_query"), "E082", "it takes no 'prompt'"),
        (("function = search", "function = search  model = forward"), "E082", "it takes no 'model'"),
        (("node answer: text {}", "node answer: text { timeout = 3 }"), "E030", "unknown setting 'timeout'"),
        (("timeout = 2.5", "timeout = 0"), "E034", "'timeout' must be more than 0"),
        (("timeout = 2.5", 'timeout = "soon"'), "E033", "'timeout' must be a number"),
        (("node passages", 'function search = "x:y"\nnode passages'), "E020", "duplicate function 'search'"),
        (("node passages", 'function spare = "x:y"\nnode passages'), "W010", "function 'spare' is not used"),
        (("question -> answer", "question -> answer\nnode function: text {}"), "E021", "'function' is a reserved"),
    ],
)
def test_the_checker_reports_each_misuse(edit, code, message):
    text = SBP.replace(*edit)
    diagnostics = check(parse(text, "rag.sbp"))[1]
    found = [d for d in diagnostics if d.code == code]
    assert found and message in found[0].message, diagnostics


def test_fmt_lines_the_declaration_up_and_keeps_its_meaning():
    messy = SBP.replace('function search = "tools:search"', 'function   search="tools:search"')
    out = format_text(messy, "rag.sbp")
    assert 'function search = "tools:search"\n' in out and parse(out) == parse(SBP)


def test_the_editor_completes_hovers_renames_and_outlines_functions():
    text = SBP
    document = Document(text, "rag.sbp")
    cursor = text.index("function = search") + len("function = ")
    assert {c.label for c in document.completions(cursor)} == {"search"}
    hover = document.hover(cursor + 1)
    assert "`tools:search`" in hover and "used by: passages" in hover
    assert "calls the function search, no model" in document.describe("node", "passages")
    occurrences = document.rename(cursor + 1, "find")
    assert len(occurrences) == 2  # the declaration and the node's use
    assert [s.kind for s in document.outline if s.name == "search"] == ["function"]
