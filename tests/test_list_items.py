"""List replies are held to their item type (issue 42's leftover): a model node's reply, a function node's return
value, the JSON Schema and grammar that constrain a reply, and the words a prompt says it in."""

from __future__ import annotations

import json
from functools import partial

import jsonschema
import pytest
from fake_server import FakeServer
from gbnf import matches

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.language import ir
from sembp_dsl.language.kinds.model import parse_reply
from sembp_dsl.language.nodes.node import GraphNode
from sembp_dsl.language.nodes.shapes import answer_format, node_shape, output_text

T = partial(ir.OutputType, span=None)
VERDICT = T(
    "record", fields=(ir.Field("verdict", T("choice", ("Yes", "No")), span=None), ir.Field("n", T("number"), span=None))
)
NUMBERS, CHOICES, RECORDS = (
    T("list", item=T("number")),
    T("list", item=T("choice", ("Yes", "No"))),
    T("list", item=VERDICT),
)
NESTED, TEXTS = T("list", item=T("list", item=T("text"))), T("list", item=T("text"))


def node(type_: ir.OutputType) -> GraphNode:
    return GraphNode("n", type_, None, "", "reply", (), (), (), ())


@pytest.mark.parametrize(
    "type_, reply, expected",
    [
        (NUMBERS, '["abc", {"x": 1}]', (None, 'item 1 is not a number: "abc"')),
        (NUMBERS, '[1, {"x": 1}]', (None, 'item 2 is not a number: {"x": 1}')),
        (NUMBERS, 'The numbers: [1, "2.5", 3.0]', ("[1, 2.5, 3]", None)),  # each read as a number reads
        (CHOICES, '["yes", "No"]', ('["Yes", "No"]', None)),
        (CHOICES, '["Yes", "Maybe"]', (None, 'item 2 is "Maybe", not one of Yes, No')),
        (TEXTS, '["a", ["b"]]', (None, 'item 2 is not text: ["b"]')),
        (NESTED, '["a", "b"]', (None, 'item 1 is not a JSON array: "a"')),  # a flat list is not a list of lists
        (NESTED, '[["a"], ["b", {}]]', (None, "item 2, item 2 is not text: {}")),
        (NESTED, '[["a"], []]', ('[["a"], []]', None)),
        (RECORDS, '[{"n": "2", "verdict": "yes", "extra": 1}]', ('[{"verdict": "Yes", "n": 2}]', None)),
        (RECORDS, '[{"verdict": "No", "n": 1}, {"verdict": "No"}]', (None, "item 2 has no field 'n'")),
        (RECORDS, '[{"verdict": "Maybe", "n": 1}]', (None, "item 1, field 'verdict' is \"Maybe\", not one of Yes, No")),
        (
            RECORDS,
            "[3]",
            (
                None,
                'item 1 is not a JSON object with exactly the fields "verdict" (one of "Yes", "No"), "n" (a number): 3',
            ),
        ),
        (NUMBERS, '{"x": [1]}', (None, "no JSON array in the reply")),
    ],
)
def test_a_list_reply_is_read_item_by_item_against_its_item_type(type_, reply, expected):
    assert parse_reply(node(type_), reply) == expected


def test_a_list_nodes_json_schema_names_its_item_type_and_reads_back():
    schema = node_shape(RECORDS).schema()
    assert schema is not None
    items = schema["properties"]["value"]["items"]
    assert items["properties"]["verdict"] == {"type": "string", "enum": ["Yes", "No"]} and items["required"] == [
        "verdict",
        "n",
    ]
    assert node_shape(NESTED).schema()["properties"]["value"] == {
        "type": "array",
        "items": {"type": "array", "items": {"type": "string"}},
    }
    jsonschema.validate({"value": [{"verdict": "No", "n": 1}]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"value": [{"verdict": "No", "n": "many"}]}, schema)
    assert node_shape(RECORDS).text('{"value": [{"verdict": "No", "n": 1}]}') == '[{"verdict": "No", "n": 1}]'
    assert node_shape(T("list", item=T("json"))).schema() is None  # any JSON value: a strict schema cannot say it


@pytest.mark.parametrize(
    "type_, fits, does_not",
    [
        (NUMBERS, ["[1, 2.5]", "[]"], ['["abc"]', '{"x": 1}', "[1, {}]"]),
        (CHOICES, ['["Yes", "No"]'], ['["Maybe"]', '{"a": "Yes"}']),
        (NESTED, ['[["a"], []]'], ['["a"]', "[[1]]"]),
        (
            RECORDS,
            ['[{"verdict": "Yes", "n": 1}]'],
            ['[{"n": 1}]', '{"verdict": "Yes", "n": 1}', '[{"verdict": "Yes", "n": 1, "x": 2}]'],
        ),
    ],
)
def test_a_list_nodes_grammar_is_an_array_of_its_item_type_never_an_object(type_, fits, does_not):
    grammar = node_shape(type_).grammar(200)
    assert all(matches(grammar, text) for text in fits)
    assert not any(matches(grammar, text) for text in does_not)
    for text in fits:  # whatever the grammar lets through, the parser reads
        assert parse_reply(node(type_), text)[1] is None


def test_compile_emits_the_item_types_grammar_and_schema(tmp_path, capsys):
    source = 'pipeline t\ninput q: text\nparam p = "List them."\nnode scores: list[number] {{ prompt = p }}\nq -> scores\noutput scores\n{model}'
    path = tmp_path / "t.sbp"
    path.write_text(source.format(model=""))  # the default: the embedded model, held to a grammar
    assert cli.main(["compile", str(path), "--emit", "constraints"]) == 0
    out = capsys.readouterr().out
    assert (
        "=== node scores: list[number];" in out
        and 'value ::= "[" json-ws ((json-number) ("," json-ws (json-number))*)? "]"' in out
    )
    path.write_text(
        source.format(model='model { name = "openai/my-own"  api_base = "http://localhost:1"  constrain = schema }')
    )
    assert cli.main(["compile", str(path), "--emit", "constraints"]) == 0
    sent = json.loads(capsys.readouterr().out.split("response_format = ", 1)[1].split("\n\n===", 1)[0])
    assert sent["json_schema"]["schema"]["properties"]["value"] == {"type": "array", "items": {"type": "number"}}


def test_a_function_nodes_list_is_held_to_its_item_type():
    assert output_text(NUMBERS, [1, "abc"]) == (None, 'is a list whose item 2 is not a number: "abc"')
    assert output_text(NESTED, ["a", "b"]) == (None, 'is a list whose item 1 is not a JSON array: "a"')
    assert output_text(RECORDS, [{"n": 2.0, "verdict": "yes"}]) == ('[{"verdict": "Yes", "n": 2}]', None)


def test_a_function_that_returns_a_list_of_the_wrong_items_fails_its_sample(tmp_path):
    path = tmp_path / "f.sbp"
    path.write_text(
        'pipeline f\ninput q: text\nfunction lookup = "tools:lookup"\n'
        "node found: list[number] { function = lookup }\nq -> found\noutput found\n"
    )
    with sbp.load(path, functions={"lookup": lambda q: [1, q]}) as pipeline:
        wrong, right = pipeline(q="abc"), pipeline(q="2")
    assert (
        wrong.output is None
        and wrong.error == 'function failed: what lookup returned is a list whose item 2 is not a number: "abc"'
    )
    assert right.error is None and right.output == [1, 2]


PIPELINE = """\
pipeline s
input q: text
param p = "List the scores."
node scores: list[number] {{ prompt = p }}
q -> scores
output scores
model {{ name = "openai/fake"  api_base = "{url}"  temperature = 0 }}
"""


def test_a_model_reply_with_an_item_that_does_not_fit_is_the_nodes_error_and_scored_wrong(tmp_path):
    prompts: list[str] = []

    def reply(messages) -> str:
        prompts.append(messages[-1]["content"])
        return '["abc", 2]' if "bad" in prompts[-1] else "[1, 2.0]"

    with FakeServer(delay=0.0, reply=reply) as server:
        path = tmp_path / "s.sbp"
        path.write_text(PIPELINE.format(url=server.url))
        with sbp.load(path) as pipeline:
            bad = pipeline(q="bad")
            evaluation = pipeline.evaluate(
                [{"q": "bad", "answer": "[1, 2]"}, {"q": "good", "answer": "[1, 2]"}], "json"
            )
    assert bad.output is None and bad.trace.nodes["scores"].error == 'item 1 is not a number: "abc"'
    assert [r.score for r in evaluation.results] == [0.0, 1.0]
    assert all(p.endswith("Reply with a JSON array, each item a number.") for p in prompts)  # no schema reaches it


def test_an_agent_is_told_a_lists_item_type_in_words():
    assert answer_format(NESTED) == "Answer with a JSON array, each item a JSON array, each item text."
    assert answer_format(RECORDS) == (
        'Answer with a JSON array, each item a JSON object with exactly the fields "verdict" (one of "Yes", "No"), '
        '"n" (a number).'
    )


def test_a_list_of_json_keeps_its_objects_keys_sorted_and_a_records_fields_in_order():
    assert parse_reply(node(T("list", item=T("json"))), '[{"b": 1, "a": 2}]') == ('[{"a": 2, "b": 1}]', None)
    assert parse_reply(node(RECORDS), '[{"n": 1, "verdict": "No"}]') == ('[{"verdict": "No", "n": 1}]', None)


def test_a_list_reply_under_a_grammar_closes_within_max_tokens_and_one_at_its_bound_was_cut():
    """A small model lists on and on (1, 2, 3, ... to max_tokens, an array never closed): the grammar takes at
    most a number's width of the budget an item, and an array that reached that bound was cut there."""
    shape = node_shape(NUMBERS)
    grammar = shape.grammar(46)  # 3 x 46 characters, 23 an item: 6 items
    assert matches(grammar, "[1, 2, 3, 4, 5, 6]") and not matches(grammar, "[1, 2, 3, 4, 5, 6, 7]")
    assert shape.ran_out("[1, 2, 3, 4, 5, 6]", 46) and not shape.ran_out("[1, 2]", 46)
    assert not shape.ran_out("[1, 2, 3, 4, 5, 6, 7]", None) and matches(shape.grammar(None), "[" + "1, " * 50 + "1]")
