"""Tool schemas read from source without importing it, and the text form of tool calls."""

import json
import sys

import jsonschema
import pytest

from sembp_dsl.language.kinds.agent.toolcalls import (
    Answer,
    ToolCall,
    Unreadable,
    argument_problem,
    bounded,
    read_reply,
    reply_schema,
)
from sembp_dsl.language.signatures import read_tool

SOURCE = '''
import this_module_does_not_exist  # never imported: the file is only read
from typing import Literal, Optional

def lookup(city: str, field: Literal["population", "country"] = "population", limit: int | None = None) -> str:
    """Look a fact up about a city.

    Args:
        city: the city's name alone,
            never a whole question
        field: which fact
    Returns:
        the fact
    """

async def fetch(urls: list[str], headers: "dict[str, str]" = {}, *, retries: Optional[int] = 2): ...

def spread(*values): ...
def anything(**options): ...
def positional(a, /, b): ...
def socket_user(conn: socket.socket): ...
def odd_literal(x: Literal[print]): ...
def untyped(x, y=3): ...
'''


def test_schema_comes_from_the_signature_and_docstring():
    spec = read_tool(SOURCE, "lookup")
    assert spec.description == "Look a fact up about a city."
    schema = spec.schema()
    assert schema["required"] == ["city"]
    assert schema["properties"]["city"] == {
        "type": "string",
        "description": "the city's name alone, never a whole question",
    }
    assert schema["properties"]["field"]["enum"] == ["population", "country"]
    assert schema["properties"]["field"]["default"] == "population"
    assert schema["properties"]["limit"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert schema["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(schema)
    assert spec.to_openai()["function"]["name"] == "lookup"
    assert spec.to_openai("better words")["function"]["description"] == "better words"


def test_reading_imports_nothing():
    read_tool(SOURCE, "lookup")
    assert "this_module_does_not_exist" not in sys.modules


def test_generics_quoted_hints_and_keyword_only_arguments():
    schema = read_tool(SOURCE, "fetch").schema()
    assert schema["properties"]["urls"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["headers"] == {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "default": {},
    }
    assert schema["properties"]["retries"]["default"] == 2
    assert schema["required"] == ["urls"]


@pytest.mark.parametrize(
    "name, words",
    [
        ("spread", "*values takes any number of arguments by position"),
        ("anything", "**options takes any keyword"),
        ("positional", "'a' is positional-only"),
        ("socket_user", "the type 'socket.socket' has no JSON form"),
        ("odd_literal", "a Literal of values other than"),
        ("missing", "the module defines no function 'missing'"),
    ],
)
def test_a_signature_with_no_json_form_says_why(name, words):
    problem = read_tool(SOURCE, name)
    assert isinstance(problem, str) and words in problem


def test_untyped_parameters_take_any_json_value():
    schema = read_tool(SOURCE, "untyped").schema()
    assert schema["properties"] == {"x": {}, "y": {"default": 3}}
    assert schema["required"] == ["x"]


def test_a_module_that_does_not_parse_says_where():
    assert "line 1" in read_tool("def broken(:\n", "broken")


TOOLS = {"lookup": read_tool(SOURCE, "lookup")}


def test_the_reply_schema_takes_calls_that_fit_and_answers_only():
    schema = reply_schema(list(TOOLS.values()))
    jsonschema.validate({"tool": "lookup", "arguments": {"city": "Kesh"}}, schema)
    jsonschema.validate({"answer": "18400"}, schema)
    for bad in ({"tool": "lookup", "arguments": {}}, {"tool": "nope", "arguments": {}}, {"answer": 1, "x": 2}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_replies_are_read_and_bad_calls_are_explained():
    call = read_reply('Sure! ```json\n{"tool": "lookup", "arguments": {"city": "Kesh"}}\n```', TOOLS, 1)
    assert call == ToolCall("call_1", "lookup", {"city": "Kesh"})
    assert argument_problem(call, TOOLS) is None
    assert read_reply('{"answer": 18400}', TOOLS, 2) == Answer("18400")
    assert isinstance(read_reply("I think it is 18400", TOOLS, 3), Unreadable)
    unknown = ToolCall("c", "lokup", {})
    assert "there is no tool 'lokup'; the tools are lookup" in argument_problem(unknown, TOOLS)
    wrong = ToolCall("c", "lookup", {"city": 3})
    assert "do not fit lookup's schema at 'city'" in argument_problem(wrong, TOOLS)


def test_results_are_bounded():
    assert bounded("x" * 10, 20) == "x" * 10
    cut = bounded("x" * 5_000_000, 100)
    assert len(cut) < 200 and "4999900 more characters not shown" in cut
    json.dumps(cut)


def test_every_string_of_the_text_form_is_bounded_so_a_constrained_reply_closes():
    from sembp_dsl.language.kinds.agent.toolcalls import TEXT_FORM_CHARS

    schema = reply_schema(list(TOOLS.values()))
    jsonschema.validate({"answer": "x" * TEXT_FORM_CHARS}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"answer": "x" * (TEXT_FORM_CHARS + 1)}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tool": "lookup", "arguments": {"city": "K" * (TEXT_FORM_CHARS + 1)}}, schema)
    assert "maxLength" not in TOOLS["lookup"].schema()["properties"]["city"]  # what a native caller is offered


def test_the_embedded_grammar_of_the_text_form_admits_no_raw_control_character():
    embedded = pytest.importorskip("sembp_dsl.models.embedded")
    pytest.importorskip("llama_cpp")
    grammar = embedded.schema_grammar(json.dumps(reply_schema(list(TOOLS.values()))))
    char = next(line for line in grammar.splitlines() if line.startswith("char ::="))
    assert "\\x00-\\x1F" in char, char
