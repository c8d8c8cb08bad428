"""The layers LLM composes, each on its own: shared calls in flight, slots, rate limits, retries, stops,
the request and its secrets. test_llm.py and test_faults.py test them together, through real HTTP."""

from __future__ import annotations

import asyncio
import json
import random
from types import MappingProxyType

import pytest

from sembp_dsl.language.messages import Ask, prompted
from sembp_dsl.models import spans, wire
from sembp_dsl.models.faults import CONFIG, REQUEST, TRANSIENT, Failure, LLMError
from sembp_dsl.models.inflight import InFlight
from sembp_dsl.models.ledger import Ledger
from sembp_dsl.models.limits import RateLimits, Slots
from sembp_dsl.models.request import Completion, ResolvedModel, prepare
from sembp_dsl.models.retry import Retries
from sembp_dsl.models.routing import Routers
from sembp_dsl.models.stops import BudgetExceeded, Stops
from sembp_dsl.models.transport import FastPath, Reply

HI = Ask(prompted("hi"))


def failure(kind: str = TRANSIENT, retry_after: float | None = None) -> Failure:
    return Failure(kind, "InternalServerError", 503, "http://127.0.0.1:1/v1", "busy", retry_after=retry_after)


def test_a_call_in_flight_is_made_once_and_outlives_all_but_its_last_caller():
    started = []

    async def slow(answer: str) -> str:
        started.append(answer)
        await asyncio.sleep(0.05)
        return answer

    async def main():
        calls: InFlight[str] = InFlight()
        first = asyncio.ensure_future(calls.join("k", lambda: slow("one")))
        await asyncio.sleep(0)
        assert "k" in calls
        second = asyncio.ensure_future(calls.join("k", lambda: slow("two")))
        await asyncio.sleep(0.01)
        first.cancel()  # one caller leaving does not cancel the call the other still waits for
        answer = await second
        assert "k" not in calls  # settled: the next ask makes a new call
        leaver = asyncio.ensure_future(calls.join("k", lambda: slow("three")))
        await asyncio.sleep(0.01)
        leaver.cancel()  # the last caller leaving cancels it
        await asyncio.gather(leaver, return_exceptions=True)
        return answer, "k" in calls

    assert asyncio.run(main()) == ("one", False)
    assert started == ["one", "three"]


def test_slots_bound_calls_per_loop_and_per_role():
    slots = Slots(concurrency=2)

    async def main():
        forward, everyone = slots.of("forward", 1)
        again, same = slots.of("forward", 5)  # the first limit given in this loop holds
        backward, _ = slots.of("backward", None)
        return forward is again and everyone is same, forward.value, everyone.value, backward.value

    assert asyncio.run(main()) == (True, 1, 2, 1 << 30)
    assert asyncio.run(main())[0]  # a new loop gets new slots (a waiting call's future belongs to one loop)


def test_rate_limits_are_kept_per_model_and_endpoint_only_when_asked():
    rates = RateLimits()
    assert rates.get("m", "http://a/v1", {"concurrency": 4}) is None
    window = rates.get("m", "http://a/v1", {"rpm": 60})
    assert window is rates.get("m", "http://a/v1", {"rpm": 60}) and window.rpm == 60
    assert rates.get("m", "http://b/v1", {"tpm": 1000}) is not window


def test_only_transient_failures_are_retried_with_growing_jittered_waits():
    retries = Retries(retries=2, backoff=1.0)
    random.seed(0)
    waits = [retries.wait(failure(), attempt) for attempt in range(3)]
    assert 0.5 <= waits[0] <= 1.5 and 1.0 <= waits[1] <= 3.0 and waits[2] is None  # two retries, then no more
    assert retries.wait(failure(retry_after=7.0), 0) == 7.0  # the server's Retry-After wins
    assert retries.wait(failure(REQUEST), 0) is None and retries.wait(failure(CONFIG), 0) is None


def test_stops_keep_budgets_and_stop_a_session_whose_first_calls_all_fail():
    ledger = Ledger()
    stops = Stops(ledger, max_calls=2)
    stops.check_budget()
    ledger.roles["forward"].calls = 2
    with pytest.raises(BudgetExceeded, match="max_calls=2 reached"):
        stops.check_budget()
    spec = ResolvedModel("forward", "openai/fake", MappingProxyType({}))
    stops = Stops(Ledger())
    stops.gave_up("forward", spec, failure())
    stops.gave_up("forward", spec, failure())
    stops.check_working()
    with pytest.raises(LLMError, match="the first 3 calls all failed"):
        stops.gave_up("forward", spec, failure())
    with pytest.raises(LLMError, match="the first 3 calls all failed"):
        stops.check_working()  # every later call fails at once, with the same reason
    answered = Stops(Ledger())
    answered.answered()
    for _ in range(5):
        answered.gave_up("forward", spec, failure())  # a session that worked once goes on
    assert answered.stopped is None


def test_the_cache_key_ignores_secrets_and_limits_and_secrets_are_named_for_masking(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-usual-key-123456")
    monkeypatch.setenv("MY_KEY", "sk-own-key-654321")
    transport = FastPath()
    routers = Routers(transport, Ledger().count)
    base = {"api_base": "http://127.0.0.1:1/v1", "temperature": 0}
    plain = prepare(ResolvedModel("forward", "openai/m", MappingProxyType(base)), HI, 120.0, transport, routers)
    limited = {**base, "api_key_env": "MY_KEY", "rpm": 10, "timeout": 5}
    own = prepare(ResolvedModel("forward", "openai/m", MappingProxyType(limited)), HI, 120.0, transport, routers)
    assert own.key == plain.key  # neither the key nor the bounds on sending change the answer
    assert own.limits == {"rpm": 10} and own.timeout == 5.0 and "rpm" not in own.settings
    assert own.settings["api_key"] == "sk-own-key-654321" and "sk-own" not in repr(own)
    assert own.secrets(routers) == ("sk-own-key-654321", "sk-usual-key-123456")
    hotter = {**base, "temperature": 1}
    assert (
        prepare(ResolvedModel("forward", "openai/m", MappingProxyType(hotter)), HI, 1, transport, routers).key
        != plain.key
    )


def test_a_completion_goes_into_the_cache_and_comes_back_as_a_hit():
    answered = Completion.answered(Reply("ok \ud800", 3, 2, 0.5, "length"), 0.5, 0.1)
    assert answered.text == "ok \ufffd" and not answered.cached  # half a surrogate pair is no character
    back = Completion.from_cache(answered.cache_entry())
    assert back == Completion("ok \ufffd", 3, 2, 0.0, True, 0.0, "length")


def test_prompt_tokens_the_providers_cache_served_are_counted_and_priced_at_the_cached_rate(monkeypatch):
    """OpenAI bills a repeated prompt prefix at its cached rate (usage.prompt_tokens_details.cached_tokens): the
    ledger counted every prompt token at the full price."""
    from fake_server import FakeServer

    from sembp_dsl.language.graph.graph import ModelSpec
    from sembp_dsl.models import prices
    from sembp_dsl.models.llm import LLM

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    head = " ".join(f"w{n}" for n in range(1100))  # a 1,024-word prefix is served from the cache the second time
    with FakeServer(reply="ok") as server:
        spec = ModelSpec("forward", "openai/gpt-4o-mini", MappingProxyType({"api_base": server.url}))
        llm = LLM({"forward": spec})
        first = llm.run(llm.complete("forward", head + " one"))
        second = llm.run(llm.complete("forward", head + " two"))
    assert first.cost == prices.cost("openai/gpt-4o-mini", 1101, 1) and second.prompt_tokens == 1101
    full, cached = 1.5e-07, 7.5e-08  # litellm's table: input_cost_per_token, cache_read_input_token_cost
    assert second.cost == pytest.approx(77 * full + 1024 * cached + 6e-07)
    usage = llm.ledger.to_json()
    assert usage["roles"]["forward"]["cached_tokens"] == 1024 == usage["cached_tokens"]
    assert "prompt tokens the provider's cache served: 1024 of 2202 (47%)" in llm.ledger.render()


def test_a_tool_calls_arguments_keep_the_models_words_in_spans_and_the_cache():
    """Decoded in the model layer, a call's arguments are a dict to the loop; its span and the cache keep the JSON
    as the model wrote it (no space after the colon here), as they did before the calls were typed."""
    [call] = wire.tool_calls(
        [{"id": "c", "type": "function", "function": {"name": "lookup", "arguments": '{"place":"Kesh"}'}}]
    )
    assert call.arguments == {"place": "Kesh"}
    done = Completion("", 3, 2, 0.0, False, 0.1, "tool_calls", (call,))
    [message] = json.loads(spans.output_messages(done)["gen_ai.output.messages"])
    assert message["parts"] == [{"type": "tool_call", "id": "c", "name": "lookup", "arguments": '{"place":"Kesh"}'}]
    back = Completion.from_cache(done.cache_entry())
    assert back.calls == (call,) and back.calls[0].arguments_text() == '{"place":"Kesh"}'
    assert done.cache_entry()["tool_calls"] == [{"id": "c", "name": "lookup", "arguments": '{"place":"Kesh"}'}]
