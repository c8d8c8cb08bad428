"""A model's reply is data from a stranger too: what it puts in a reply or a tool call gives that sample or that
call a clear, bounded error, never a traceback, a quadratic scan or an unbounded echo."""

from __future__ import annotations

import json
import time

from test_agent import Agent, write

import sembp_dsl as sbp
from sembp_dsl.language.kinds.agent import steps_of
from sembp_dsl.language.kinds.agent.toolcalls import RESULT_CHARS, call_json
from sembp_dsl.language.nodes.shapes import first_json, first_object
from sembp_dsl.models import wire


def test_reading_a_reply_as_json_is_linear_in_its_braces():
    """A parse tried at every brace, each failure costing its position: 100k braces 1.6 s, 1 MB about 150 s."""
    for junk in ("{" * 200_000, "[" * 200_000, '{"a":' * 100_000, "[1," * 100_000, '{"a": "' + "{" * 200_000):
        started = time.monotonic()
        assert first_json(junk) is None and first_object(junk) is None
        assert time.monotonic() - started < 2, junk[:10]


def test_the_first_json_value_after_junk_or_in_prose_is_still_found():
    assert first_json("{" * 100_000 + ' then {"a": [1, {"b": "}"}]} and {"c": 2}') == {"a": [1, {"b": "}"}]}
    assert first_object("[" * 50_000 + ' {"a": "x\\"}"}') == {"a": 'x"}'}
    assert first_json('Sure! ["one", "two"] is it') == ["one", "two"]
    assert first_object('I said "yes" {"answer": 1} ok') == {"answer": 1}
    assert first_json('{not json} [1, 2] {"a": 1}') == [1, 2]
    assert first_object('{"outer": {"inner": 1}, broken}') == {"inner": 1}  # the first object that parses


def test_native_arguments_nested_20000_deep_are_that_calls_error():
    def call(id_: str, arguments: str) -> dict:
        return {"id": id_, "type": "function", "function": {"name": "lookup", "arguments": arguments}}

    [flat, deep] = wire.tool_calls(
        [call("c1", "[" * 20_000 + "]" * 20_000), call("c2", '{"a": ' + "[" * 900 + "]" * 900 + "}")]
    )
    assert flat.name == "lookup" and list(flat.arguments) == ["(not a JSON object)"]
    assert list(deep.arguments) == ["(nested too deeply)"]
    json.dumps(call_json(deep))  # the record can hold it


def test_a_call_nested_too_deeply_ends_in_that_calls_error_and_the_loop_goes_on(tmp_path):
    from fake_server import FakeServer

    deep = {"id": "d", "type": "function", "function": {"name": "lookup", "arguments": "[" * 20_000 + "]" * 20_000}}
    with FakeServer(reply=Agent([deep])) as server:
        with sbp.load(write(tmp_path, server.url)) as pipeline:
            prediction = pipeline(question="Deep.")
    [result] = steps_of(prediction.trace.nodes["solve"])[0].results
    assert result.error and "do not fit lookup's schema" in result.content
    assert prediction.output == "18400"


def test_what_a_model_puts_in_a_call_is_echoed_back_bounded(tmp_path):
    """A 5 MB wrong-typed argument came back as a 5 MB message, a 2 MB unknown tool name as a 2 MB result, and
    both went whole into the record."""
    from fake_server import FakeServer

    calls = [
        {
            "id": "a",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"place": ["x" * 5_000_000]})},
        },
        {"id": "b", "type": "function", "function": {"name": "n" * 2_000_000, "arguments": "{}"}},
        {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": json.dumps("x" * 5_000_000)}},
    ]
    agent = Agent(calls)
    with FakeServer(reply=agent) as server:
        with sbp.load(write(tmp_path, server.url)) as pipeline:
            prediction = pipeline(question="Big.")
    step = steps_of(prediction.trace.nodes["solve"])[0]
    for result in step.results:
        assert result.error and len(result.content) < RESULT_CHARS + 100, len(result.content)
    kept = json.dumps(prediction.trace.nodes["solve"].extra)
    assert len(kept) < 10 * (RESULT_CHARS + 100), len(kept)
    sent = agent.seen[-1]
    assert max(len(json.dumps(m)) for m in sent) < 4 * (RESULT_CHARS + 100)


def test_a_reply_holding_a_lone_surrogate_is_printed_by_run_trace_on_a_pipe(tmp_path):
    """The escape \\ud800 in a reply decodes to half a UTF-16 pair, which UTF-8 cannot write: `run --trace` to a
    pipe or a file ended in a UnicodeEncodeError."""
    from conftest import sbpc, with_fake_model
    from fake_server import FakeServer

    source = 'pipeline t\ninput q: text\nparam p = "Say."\nnode a: json { prompt = p }\nq -> a\noutput a\n'
    with FakeServer(delay=0.0, reply=lambda messages: '{"verdict": "half \\ud800 a pair"}') as server:
        (tmp_path / "t.sbp").write_text(with_fake_model(source, server.url))
        done = sbpc("run", "t.sbp", "--input", "q=x", "--trace", "--no-cache", cwd=tmp_path)
    assert "UnicodeEncodeError" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "half \\ud800 a pair" in done.stdout, done.stdout
