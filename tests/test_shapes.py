"""Reply shapes: each constraint accepts every reply of its shape, which the parsers then read whole, and
rejects replies out of shape; the JSON Schema form reads back into the same text; providers get a JSON
Schema only where litellm says they take one."""

from __future__ import annotations

import asyncio
import json
import re
import time
from types import MappingProxyType

import jsonschema
import pytest
from fake_server import FakeServer
from gbnf import matches
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sembp_dsl.language import ir
from sembp_dsl.language.graph.graph import ModelSpec
from sembp_dsl.language.kinds.model import parse_reply
from sembp_dsl.language.nodes.node import GraphNode
from sembp_dsl.language.nodes.outputs import node_shape
from sembp_dsl.language.nodes.shapes import CHARS_PER_TOKEN, Field, Shape, first_json, hints_shape, prompt_shape
from sembp_dsl.learning.backward import hint_lines
from sembp_dsl.learning.descent import extract
from sembp_dsl.models import constraints, embedded, prices
from sembp_dsl.models.llm import LLM
from sembp_dsl.models.transport import serving

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(SETTINGS, max_examples=20)  # JSON replies: the matcher is slow on nested values
LABEL_WORDS = ("answer", "output", "label", "verdict", "the", "final")


def output_type(kind: str, choices: tuple[str, ...] = ()) -> ir.OutputType:
    return ir.OutputType(kind, choices, span=None)


def node(type_: ir.OutputType, parse: str = "reply") -> GraphNode:
    return GraphNode("n", type_, None, "", parse, (), (), (), ())


# -- what a valid reply is: characters as the grammar's classes say, lengths within the limits ------------


def line_char(c: str) -> bool:
    return ord(c) > 0x1F and c not in "\x7f\x85\u2028\u2029<"


def line_start(c: str) -> bool:
    return line_char(c) and not c.isspace() and c not in "*_"


CHARS = st.characters(blacklist_categories=("Cs",))
OPTIONS = st.lists(
    st.text(
        st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789()-+ "), min_size=1, max_size=8
    )
    .map(str.strip)
    .filter(lambda o: o and not o.casefold().startswith(LABEL_WORDS) and o[0] not in "+-("),
    min_size=1,
    max_size=4,
    unique_by=str.casefold,
)
JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(CHARS, max_size=10)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(CHARS, max_size=5), inner, max_size=3),
)


def json_text(value) -> str:
    """JSON as the grammar writes it: `<` only escaped, so a value cannot close an <output> tag."""
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


@st.composite
def field_value(draw, field: Field, limit: int | None):
    """A value of a field, within its limit: (its text in the reply, its value)."""
    bound = 40 if limit is None else min(limit, 40)
    if field.kind == "option":
        option = draw(st.sampled_from(field.options))
        return option, option
    if field.kind == "number":
        text = draw(st.from_regex(r"-?[0-9]{1,15}(\.[0-9]{1,6})?", fullmatch=True))
        return text, float(text)
    if field.kind == "json":
        value = draw(st.lists(JSON_VALUES, max_size=3) | st.dictionaries(st.text(CHARS, max_size=5), JSON_VALUES))
        return json_text(value), value
    if field.kind == "line":
        first = draw(CHARS.filter(line_start))
        rest = draw(st.text(CHARS.filter(line_char), max_size=bound - 1))
        if draw(st.booleans()):  # a limit is a limit, not a suggestion: take it all
            rest = (rest + "x" * bound)[: bound - 1]
        return first + rest, first + rest
    text = draw(st.text(CHARS.filter(lambda c: c != "<"), max_size=bound))
    return text, text


@st.composite
def reply_of(draw, shape: Shape, max_tokens: int | None):
    """A reply in the shape: its text, and each field's value."""
    limits = shape.limits(max_tokens)
    parts, values = [], {}
    for part in shape.parts:
        if isinstance(part, str):
            parts.append(part)
        else:
            text, values[part.name] = draw(field_value(part, limits.get(part.name)))
            parts.append(text)
    return "".join(parts), values


MAX_TOKENS = st.none() | st.integers(40, 300)


# -- GBNF: accepts every reply of the shape, which the parser reads whole ---------------------------------


@SETTINGS
@given(OPTIONS, MAX_TOKENS, st.data())
def test_a_choice_reply_starts_with_its_option_and_the_parser_reads_it(options, max_tokens, data):
    type_ = output_type("choice", tuple(options))
    shape = node_shape(type_)
    text, values = data.draw(reply_of(shape, max_tokens))
    assert matches(shape.grammar(max_tokens), text)
    assert parse_reply(node(type_), text) == (values["answer"], None)
    assert text.startswith(values["answer"])  # the paper's form: the option first, then a reason


@SETTINGS
@given(MAX_TOKENS, st.data())
def test_a_number_reply_ends_with_its_number_and_the_parser_reads_it(max_tokens, data):
    shape = node_shape(output_type("number"))
    text, values = data.draw(reply_of(shape, max_tokens))
    assert matches(shape.grammar(max_tokens), text)
    parsed, error = parse_reply(node(output_type("number")), text)
    assert error is None and float(parsed) == values["answer"]


@FEWER
@given(st.data())
def test_a_json_reply_is_a_json_object_or_array_and_the_parser_reads_it(data):
    shape = node_shape(output_type("json"))
    text, values = data.draw(reply_of(shape, None))
    assert matches(shape.grammar(None), text)
    parsed, error = parse_reply(node(output_type("json")), text)
    assert error is None and json.loads(parsed) == values["value"]


@SETTINGS
@given(st.sampled_from(["text", "number", "choice"]), OPTIONS, MAX_TOKENS, st.data())
def test_a_tagged_reply_holds_its_value_alone_in_the_tag(kind, options, max_tokens, data):
    type_ = output_type(kind, tuple(options) if kind == "choice" else ())
    shape = node_shape(type_, "tag")
    text, values = data.draw(reply_of(shape, max_tokens))
    assert matches(shape.grammar(max_tokens), text)
    parsed, error = parse_reply(node(type_, "tag"), text)
    assert error is None
    expected = values["output"]
    assert (float(parsed) == expected) if kind == "number" else parsed == expected.strip()


@SETTINGS
@given(st.integers(1, 6), MAX_TOKENS, st.data())
def test_a_backward_reply_has_one_hint_line_per_predecessor_and_each_is_read(count, max_tokens, data):
    shape = hints_shape(count)
    text, values = data.draw(reply_of(shape, max_tokens))
    assert matches(shape.grammar(max_tokens), text)
    lines = hint_lines(text, count)
    assert lines == {k: re.sub(r"[*_ \t]*$", "", values[f"hint_{k}"]).strip() for k in range(1, count + 1)}
    assert all(lines.values())  # no line missing, none empty


@SETTINGS
@given(st.none() | st.integers(1, 2000), MAX_TOKENS, st.data())
def test_an_optimizer_reply_is_one_closed_prompt_block(max_chars, max_tokens, data):
    shape = prompt_shape(max_chars)
    text, values = data.draw(reply_of(shape, max_tokens))
    assert matches(shape.grammar(max_tokens), text)
    assert extract(text) == (values["prompt"].strip(), None)


UNAMBIGUOUS = [  # shapes whose fields a reply's text splits into one way only
    hints_shape(3),
    prompt_shape(None),
    prompt_shape(30),
    node_shape(output_type("choice", ("Yes", "No"))),
    node_shape(output_type("text"), "tag"),
]


@SETTINGS
@given(st.sampled_from(UNAMBIGUOUS), st.none() | st.integers(1, 60), st.data())
def test_a_reply_that_fills_a_field_to_its_bound_ran_out(shape, max_tokens, data):
    """The grammar closes a field at its bound, so a reply whose field reached it was cut there by the grammar,
    not ended by the model; one whose every field stayed short ended by itself."""
    text, values = data.draw(reply_of(shape, max_tokens))
    limits = shape.limits(max_tokens)
    assert {f: shape.values(text)[f] for f in limits} == {f: values[f] for f in limits}
    full = any(n is not None and len(values[f]) >= n for f, n in limits.items())
    assert shape.ran_out(text, max_tokens) == full


def test_a_record_reply_out_of_shape_has_no_values_and_did_not_run_out():
    shape = node_shape(ir.OutputType("record", fields=(ir.Field("reason", output_type("text"), span=None),), span=None))
    assert shape.values('{"reason": "because"}') == {"reason": "because"}
    for text in ("not json", '["a list"]', "[" * 100_000 + "]" * 100_000):  # the last nests past Python's stack
        assert shape.values(text) == {} and not shape.ran_out(text, 10)


def test_reading_a_reply_by_its_shape_takes_linear_time():
    """Hint lines cannot hold a newline, so no reply under the grammar repeats `\nHint 2: `; one that does (from
    elsewhere) is not in the shape, and saying so must not backtrack over every split (a lazy regex took 1.3 s
    at 600 repeats, and minutes at 6,000)."""
    text = "Hint 1: " + "\nHint 2: x" * 6000 + "\nHint 3: y" * 6000
    started = time.perf_counter()
    assert not hints_shape(5).ran_out(text, 100) and hints_shape(5).values(text) == {}
    assert time.perf_counter() - started < 1.0


def test_an_optimizer_reply_the_grammar_closed_at_its_bound_is_cut_off():
    shape = prompt_shape(None)
    [limit] = shape.limits(60).values()
    assert limit is not None
    for length, cut in ((limit, True), (limit - 1, False)):
        text = "<prompt>" + "Analyze the statement and the speaker. " * 20
        text = text[: len("<prompt>") + length] + "</prompt>"
        assert shape.ran_out(text, 60) is cut and constraints.cut_at_bound(shape, constraints.GRAMMAR, 60, text) is cut
        assert not constraints.cut_at_bound(shape, constraints.NONE, 60, text)  # no grammar, no bound it closed at
        new, reason = extract(text, "length" if cut else "stop")
        assert (new is None and "cut off" in reason) if cut else (reason is None and new)


# -- GBNF: rejects replies out of shape -------------------------------------------------------------------


@SETTINGS
@given(OPTIONS, st.text(CHARS, min_size=1, max_size=10), MAX_TOKENS)
def test_a_choice_reply_not_starting_with_an_option_is_rejected(options, head, max_tokens):
    assume(not any(head.startswith(o) for o in options))
    grammar = node_shape(output_type("choice", tuple(options))).grammar(max_tokens)
    assert not matches(grammar, f"{head}\nbecause")
    assert not matches(grammar, options[0])  # the option alone: no reason
    assert not matches(grammar, f"{options[0]}\n ")  # a blank reason


@SETTINGS
@given(st.integers(1, 6), st.integers(40, 300), st.data())
def test_backward_replies_out_of_shape_are_rejected(count, max_tokens, data):
    shape = hints_shape(count)
    grammar = shape.grammar(max_tokens)
    text, _ = data.draw(reply_of(shape, max_tokens))
    lines = text.split("\n")
    assert not matches(grammar, "\n".join(lines[:-1]))  # a line missing
    assert not matches(grammar, text + "\nHint 99: more")  # a line too many
    assert not matches(grammar, text.replace("Hint 1: ", "Hint 1:  ", 1))  # a line starting blank
    too_long = "x" * (shape.limits(max_tokens)["hint_1"] + 1)
    assert not matches(grammar, "\n".join([f"Hint 1: {too_long}", *lines[1:]]))  # past its share of the budget


@SETTINGS
@given(st.integers(1, 2000), st.integers(40, 300), st.text(CHARS.filter(lambda c: c != "<"), max_size=20))
def test_optimizer_replies_out_of_shape_are_rejected(max_chars, max_tokens, body):
    shape = prompt_shape(max_chars)
    grammar = shape.grammar(max_tokens)
    limit = shape.limits(max_tokens)["prompt"]
    assert limit <= max_chars and limit <= CHARS_PER_TOKEN * max_tokens
    assert not matches(grammar, f"<prompt>{body}")  # not closed
    assert not matches(grammar, f"Sure. <prompt>{body}</prompt>")  # text around the block
    assert not matches(grammar, f"<prompt>{body}<b></prompt>")  # a tag inside
    assert not matches(grammar, f"<prompt>{'x' * (limit + 1)}</prompt>")  # too long


@FEWER
@given(st.data())
def test_json_replies_out_of_shape_are_rejected(data):
    grammar = node_shape(output_type("json")).grammar(None)
    text, _ = data.draw(reply_of(node_shape(output_type("json")), None))
    assert not matches(grammar, text[:-1])  # cut off
    assert not matches(grammar, '"a string"') and not matches(grammar, "42") and not matches(grammar, "{'a': 1}")


def test_number_replies_out_of_shape_are_rejected():
    grammar = node_shape(output_type("number")).grammar(100)
    for reply in ["42", "It is 42.", "so\nAnswer: forty", "so\nAnswer: 4.", "so\nAnswer: 1e5", "so\nAnswer: 42 apples"]:
        assert not matches(grammar, reply), reply


@SETTINGS
@given(MAX_TOKENS, st.data(), st.text(CHARS.filter(lambda c: c != "\n"), min_size=1, max_size=10))
def test_number_replies_with_a_last_line_that_is_not_a_number_are_rejected(max_tokens, data, tail):
    shape = node_shape(output_type("number"))
    grammar = shape.grammar(max_tokens)
    text, values = data.draw(reply_of(shape, max_tokens))
    reasoning = text.rsplit("\nAnswer: ", 1)[0]
    assume("\nAnswer: " not in reasoning)
    assume(tail[0] not in "0123456789.")  # "42" + "5" or ".5" is still a number
    assert not matches(grammar, reasoning)  # no answer line
    assert not matches(grammar, text + tail)  # text after the number
    word = re.sub(r"[0-9]", "", tail).strip()
    if word:
        assert not matches(grammar, f"{reasoning}\nAnswer: {word}")  # no number at all


@SETTINGS
@given(st.sampled_from(["text", "number", "choice"]), OPTIONS, MAX_TOKENS, st.data())
def test_tagged_replies_out_of_shape_are_rejected(kind, options, max_tokens, data):
    type_ = output_type(kind, tuple(options) if kind == "choice" else ())
    shape = node_shape(type_, "tag")
    grammar = shape.grammar(max_tokens)
    assume(not any(o.casefold() == "maybe" for o in options))
    text, _ = data.draw(reply_of(shape, max_tokens))
    reasoning = text.rsplit("\n<output>", 1)[0]
    assert not matches(grammar, text.removesuffix("</output>"))  # not closed
    assert not matches(grammar, text + "\nso there")  # text after the tag
    assert not matches(grammar, f"{reasoning}\n<output></output>")  # nothing in it
    assert not matches(grammar, f"{reasoning}\n<output>a\nb</output>")  # a value of two lines
    if kind != "text":
        assert not matches(grammar, f"{reasoning}\n<output>Maybe</output>")  # not an option, not a number


def test_every_bounded_reply_fits_its_max_tokens():
    """The free fields share CHARS_PER_TOKEN x max_tokens with the fixed text: the longest reply fits."""
    for shape in [
        hints_shape(5),
        prompt_shape(None),
        node_shape(output_type("choice", ("Yes", "No"))),
        node_shape(output_type("number")),
        node_shape(output_type("text"), "tag"),
    ]:
        for max_tokens in (40, 96, 160, 1024):
            longest = sum(len(p) for p in shape.parts if isinstance(p, str))
            longest += sum(shape.limits(max_tokens).values())
            longest += sum(3 if f.kind == "option" else 23 for f in shape.fields if not f.free)
            assert longest <= CHARS_PER_TOKEN * max_tokens, (shape.name, max_tokens)


def test_plain_text_has_no_shape_and_a_json_value_no_json_schema():
    assert node_shape(output_type("text")) is None
    assert node_shape(output_type("json")).schema() is None


# -- JSON Schema: valid values pass, the rest does not; the JSON reads back as the text form ---------------


SHAPES = [
    node_shape(output_type("choice", ("Yes", "No"))),
    node_shape(output_type("number")),
    node_shape(output_type("choice", ("(A)", "(B)", "(C)")), "tag"),
    hints_shape(3),
    prompt_shape(800),
]


@SETTINGS
@given(st.sampled_from(SHAPES), st.data())
def test_the_json_schema_accepts_the_shape_and_reads_back_as_its_text(shape, data):
    text, values = data.draw(reply_of(shape, 200))
    jsonschema.validate(values, shape.schema())
    written = shape.text(json.dumps(values, ensure_ascii=False))
    assert matches(shape.grammar(200), written)  # the JSON path gives a reply the grammar path could have
    if any(f.kind == "number" for f in shape.fields):  # "007" and "7.50" are written 7 and 7.5
        typed = node(output_type("number"))
        assert float(parse_reply(typed, written)[0]) == float(parse_reply(typed, text)[0])
    else:
        assert written == text


@SETTINGS
@given(st.sampled_from(SHAPES), st.data())
def test_the_json_schema_rejects_values_out_of_shape(shape, data):
    _, values = data.draw(reply_of(shape, 200))
    schema = shape.schema()
    name = data.draw(st.sampled_from(sorted(values)))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in values.items() if k != name}, schema)  # a field missing
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**values, "extra": "x"}, schema)  # a field not asked for
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**values, name: [values[name]]}, schema)  # a value of another type
    options = next((f.options for f in shape.fields if f.kind == "option"), None)
    if options:
        field = next(f.name for f in shape.fields if f.kind == "option")
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**values, field: "Maybe"}, schema)


def test_a_json_number_is_written_as_the_parser_reads_it():
    shape = node_shape(output_type("number"))
    for value, read in [(42, "42"), (42.0, "42"), (1e20, "100000000000000000000"), (1.5e-7, "0.00000015")]:
        text = shape.text(json.dumps({"reasoning": "so", "answer": value}))
        assert text == f"so\nAnswer: {read}"
        assert float(parse_reply(node(output_type("number")), text)[0]) == float(read)


def test_a_reply_that_is_not_the_asked_json_is_left_for_the_parser():
    shape = hints_shape(2)
    for reply in ["Hint 1: a\nHint 2: b", '{"hint_1": "a"}', '{"hint_1": "a", "hint_2": ', "[1, 2]"]:
        assert shape.text(reply) == reply
    assert shape.text('```json\n{"hint_1": "a", "hint_2": "b"}\n```') == "Hint 1: a\nHint 2: b"
    assert first_json(shape.text('{"hint_1": "a", "hint_2": "b"}')) is None


# -- which model gets which constraint -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, settings_, kind",
    [
        ("embedded/smollm2-135m", {}, constraints.GRAMMAR),
        ("embedded/smollm2-135m", {"constrain": "off"}, constraints.NONE),
        ("embedded/smollm2-135m", {"constrain": "schema"}, constraints.GRAMMAR),
        ("openai/gpt-4o-mini", {}, constraints.SCHEMA),
        ("gpt-4o-mini", {}, constraints.SCHEMA),
        ("openai/gpt-4o-mini", {"constrain": "off"}, constraints.NONE),
        ("openai/gpt-4o-mini", {"router": "router.yaml"}, constraints.NONE),
        ("openai/my-model", {"api_base": "http://localhost:8000/v1"}, constraints.NONE),
        ("openai/my-model", {"constrain": "schema"}, constraints.SCHEMA),
        ("lm_studio/qwen2.5-7b", {}, constraints.SCHEMA),
        ("ollama/llama3", {}, constraints.NONE),
        ("anthropic/claude-3-5-haiku-latest", {}, constraints.NONE),
    ],
)
def test_each_model_gets_the_constraint_its_provider_takes(name, settings_, kind):
    assert constraints.form(name, settings_, serving(name)()) == kind


@pytest.mark.slow  # imports litellm
def test_takes_schema_agrees_with_litellm():
    litellm = pytest.importorskip("litellm")
    names = [
        "openai/gpt-4o-mini",
        "gpt-4o",
        "openai/my-model",
        "anthropic/claude-3-5-haiku-latest",
        "gemini/gemini-1.5-flash",
        "ollama/llama3",
        "lm_studio/anything",
        "fireworks_ai/accounts/fireworks/models/llama-v3p1-8b-instruct",
        "groq/llama-3.1-8b-instant",
        "mistral/mistral-small-latest",
    ]
    assert {n: prices.supports_response_schema(n) for n in names} == {
        n: litellm.supports_response_schema(n) for n in names
    }


def replies_by_body(body: dict) -> str:
    """What a provider that keeps to a JSON Schema answers: one value per property, else plain text."""
    schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema")
    if schema is None:
        return "Yes, it is."
    return json.dumps({name: "Yes" if "enum" in p else "because" for name, p in schema["properties"].items()})


def test_response_format_is_sent_only_where_the_provider_takes_one():
    """A model litellm lists as taking a JSON Schema gets one and its JSON is read back as the text form;
    one it does not know gets none, unless its block says `constrain = schema`; `constrain = off` sends none."""
    shape = node_shape(output_type("choice", ("Yes", "No")))
    server = FakeServer(reply=lambda messages: replies_by_body(server.bodies[-1]))  # bodies are kept first

    async def ask(name: str, **extra):
        spec = ModelSpec("forward", name, MappingProxyType({"api_base": server.url, "temperature": 0, **extra}))
        return await LLM({"forward": spec}).complete("forward", "Is it? Answer Yes or No first.", shape)

    cases = [
        ("openai/gpt-4o-mini", {}),
        ("openai/my-model", {}),
        ("openai/my-model", {"constrain": "schema"}),
        ("openai/gpt-4o-mini", {"constrain": "off"}),
    ]
    with server:
        texts = [asyncio.run(ask(name, **extra)).text for name, extra in cases]
        formats = [body.get("response_format") for body in server.bodies]
        sent = [set(body) for body in server.bodies]
    assert [f is not None for f in formats] == [True, False, True, False]
    assert formats[0] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "strict": True, "schema": shape.schema()},
    }
    assert texts == ["Yes\nbecause", "Yes, it is.", "Yes\nbecause", "Yes, it is."]
    assert not any("constrain" in keys or "grammar" in keys for keys in sent)  # sbpc's setting, never sent


def test_the_constraint_is_part_of_the_cache_key(tmp_path):
    """A constrained reply is never served for an unconstrained request of the same prompt."""
    from sembp_dsl.models.cache import ResponseCache

    shape = node_shape(output_type("choice", ("Yes", "No")))
    with FakeServer(reply=lambda messages: '{"answer": "No", "reason": "r"}') as server:

        async def ask(llm: LLM, with_shape: bool):
            return await llm.complete("forward", "Is it?", shape if with_shape else None)

        spec = ModelSpec("forward", "openai/gpt-4o-mini", MappingProxyType({"api_base": server.url}))
        cache = ResponseCache(tmp_path / "c.sqlite")
        llm = LLM({"forward": spec}, cache=cache)
        first = asyncio.run(ask(llm, True))
        again = asyncio.run(ask(llm, True))
        plain = asyncio.run(ask(llm, False))
    assert (first.text, again.cached) == ("No\nr", True)
    assert not plain.cached and server.requests == 2
    assert llm.ledger.counters["constrained replies (schema)"] == 2


def test_compile_emit_constraints_prints_what_each_reply_is_held_to(capsys):
    """The embedded model gets each grammar; a model litellm lists gets the JSON Schema; `off` gets none."""
    from conftest import ROOT

    from sembp_dsl import cli

    assert cli.main(["compile", str(ROOT / "pipelines/liar.sbp"), "--emit", "constraints"]) == 0
    out = capsys.readouterr().out
    verdict = node_shape(output_type("choice", ("Yes", "No"))).grammar(96)
    assert f"=== node verdict: choice(Yes, No); forward model embedded/smollm2-135m: grammar ===\n{verdict}" in out
    assert "=== verdict: backward (all 5 hints): 5 hint lines; backward model embedded/smollm2-135m: grammar" in out
    assert out.count(": optimizer: <prompt> block; optimizer model embedded/smollm2-135m: grammar") == 6
    assert "statement_analysis" not in out  # a text node: any reply is one


def test_emit_names_the_schema_or_why_there_is_none(tmp_path, capsys):
    from sembp_dsl import cli

    path = tmp_path / "p.sbp"
    path.write_text(
        'pipeline p "t"\ninput q: text\nparam a = "Say."\nnode n: choice(A, B) { prompt = a }\nnode j: json { prompt = a }\n'
        "q -> n, j\noutput n\n"
        'model forward { name = "openai/gpt-4o-mini" }\nmodel backward { name = "openai/my-model" }\n'
        'model optimizer { name = "openai/gpt-4o-mini"  constrain = off }\n'
    )
    assert cli.main(["compile", str(path), "--emit", "constraints"]) == 0
    out = capsys.readouterr().out
    assert (
        '=== node n: choice(A, B); forward model openai/gpt-4o-mini: schema ===\nresponse_format = {\n  "type": "json_schema"'
        in out
    )
    assert (
        "node j: json; forward model openai/gpt-4o-mini: schema ===\n(no constraint: a JSON Schema cannot state this shape)"
        in out
    )
    assert "(no constraint: constrain = off)" in out


@pytest.mark.skipif(not embedded.available(), reason="embedded model not installed")
def test_the_plan_bounds_a_grammars_reply_at_a_token_a_character(capsys):
    """Under a grammar a call may take CHARS_PER_TOKEN x max_tokens tokens; a text node's reply is not held."""
    from conftest import ROOT

    from sembp_dsl import cli

    sizes = ["--train-size", "6", "--val-size", "6", "--iters", "2", "--plan", "--json"]
    assert cli.main(["optimize", str(ROOT / "pipelines/liar.sbp"), "--data", "liar", *sizes]) == 0
    plan = json.loads(capsys.readouterr().out)
    passes = (
        plan["calls"]["forward"] // 6
    )  # liar.sbp: five text analysts (max_tokens 96), the choice judge; optimizer 256
    assert plan["completion_tokens"] == {
        "forward": passes * (5 * 96 + CHARS_PER_TOKEN * 96),
        "backward": plan["calls"]["backward"] * CHARS_PER_TOKEN * 160,
        "optimizer": plan["calls"]["optimizer"] * CHARS_PER_TOKEN * 256,
    }


SENTENCE_WORDS = st.text(st.sampled_from("abcdefghij ,;'\n"), max_size=30).map(lambda t: "A" + t)


@SETTINGS
@given(st.integers(1, 5), st.lists(SENTENCE_WORDS, min_size=1, max_size=5), st.sampled_from(".!?"), MAX_TOKENS)
def test_a_prompt_held_to_sentences_closes_only_where_a_sentence_ends(count, sentences, end, max_tokens):
    """The optimizer's candidate may close only after a closed sentence and after at most `count` of them, so
    a small model's reply ends on its own instead of running on until the bound cuts it."""
    assume(max_tokens is None or max_tokens >= 160)
    shape = prompt_shape(800, count)
    grammar = shape.grammar(max_tokens)
    body = " ".join(s + end for s in sentences)
    assert matches(grammar, f"<prompt>{body}</prompt>") == (len(sentences) <= count)
    assert extract(f"<prompt>{body}</prompt>") == (body.strip(), None)
    assert not matches(grammar, f"<prompt>{body} And then</prompt>")  # an unclosed last sentence
    assert not matches(grammar, f"<prompt> {body}</prompt>")  # a sentence starting blank
    assert not shape.ran_out(f"<prompt>{sentences[0]}{end}</prompt>", max_tokens)


@SETTINGS
@given(st.integers(1, 4), st.integers(40, 300))
def test_a_sentence_the_bound_closed_is_cut_off(count, max_tokens):
    """A sentence as long as its share of the budget was closed by the grammar, not the model: cut off."""
    shape = prompt_shape(800, count)
    each = shape.fields[0].sentence_limit(shape.limits(max_tokens)["prompt"])
    assert each is not None
    full = "A" + "b" * (each - 2) + "."
    assert matches(shape.grammar(max_tokens), f"<prompt>{full}</prompt>")
    assert not matches(shape.grammar(max_tokens), f"<prompt>A{'b' * (each - 1)}.</prompt>")
    assert shape.ran_out(f"<prompt>{full}</prompt>", max_tokens)
    assert not shape.ran_out(f"<prompt>{full[1:]}</prompt>", max_tokens)
