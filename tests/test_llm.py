"""The LLM layer over real HTTP to a fake server: retries, timeouts, cache, budgets, concurrency."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
import time
from types import MappingProxyType

import pytest
from conftest import ROOT, with_fake_model
from fake_server import HANG, FakeServer

from sembp_dsl import cli
from sembp_dsl.language.graph.graph import ModelSpec
from sembp_dsl.models.cache import ResponseCache, default_path
from sembp_dsl.models.llm import LLM, BudgetExceeded, CallFailed, LLMError


def models(url: str, **settings) -> dict[str, ModelSpec]:
    spec = MappingProxyType({"api_base": url, "temperature": 0, **settings})
    return {role: ModelSpec(role, "openai/fake", spec) for role in ("forward", "backward", "optimizer")}


def complete_all(llm: LLM, prompts: list[str], role: str = "forward"):
    async def go():
        return await asyncio.gather(*(llm.complete(role, p) for p in prompts))

    return llm.run(go())


def test_retries_transient_failures_with_backoff():
    with FakeServer(reply="ok", failures=[429, 500, 503]) as server:
        llm = LLM(models(server.url), backoff=0.01)
        [result] = complete_all(llm, ["hi"])
        assert result.text == "ok"
        assert server.requests == 4
        assert llm.ledger.roles["forward"].retries == 3


def test_no_retry_on_errors_that_cannot_succeed():
    for status in (401, 404):
        with FakeServer(reply="ok", failures=[status]) as server:
            llm = LLM(models(server.url), backoff=0.01)
            with pytest.raises(LLMError) as err:
                complete_all(llm, ["hi"])
            assert server.requests == 1
            assert "forward model 'openai/fake'" in str(err.value) and "\n" not in str(err.value)


def test_timeout_is_retried_then_reported():
    with FakeServer(reply="ok", failures=[HANG, HANG]) as server:
        llm = LLM(models(server.url), timeout=0.3, retries=1, backoff=0.01)
        with pytest.raises(CallFailed):
            complete_all(llm, ["hi"])
        assert server.requests == 2 and llm.ledger.roles["forward"].failures == 1


def test_concurrency_limit_holds():
    with FakeServer(reply="ok", delay=0.1) as server:
        llm = LLM(models(server.url), concurrency=3)
        complete_all(llm, [f"prompt {i}" for i in range(12)])
        assert server.requests == 12
        assert server.max_in_flight == 3


def test_identical_requests_in_flight_share_one_call():
    with FakeServer(reply="ok", delay=0.1) as server:
        llm = LLM(models(server.url))
        results = complete_all(llm, ["same"] * 5)
        assert server.requests == 1 and {r.text for r in results} == {"ok"}


def test_budget_stops_calls():
    with FakeServer(reply="ok") as server:
        llm = LLM(models(server.url), max_calls=2)
        complete_all(llm, ["a", "b"])
        with pytest.raises(BudgetExceeded):
            complete_all(llm, ["c"])
        assert server.requests == 2


@pytest.mark.slow  # four processes at once
def test_cache_is_shared_across_processes_and_keeps_no_secrets(tmp_path):
    with FakeServer(reply="from the server") as server:
        child = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(ROOT / "tests")!r})
            from test_llm import models
            from sembp_dsl.models.llm import LLM
            from sembp_dsl.models.cache import ResponseCache
            llm = LLM(models({server.url!r}), cache=ResponseCache())
            print(llm.run(llm.complete("forward", sys.argv[1])).text)
        """)
        procs = [
            subprocess.Popen([sys.executable, "-c", child, f"prompt {i % 2}"], stdout=subprocess.PIPE, text=True)
            for i in range(4)
        ]  # four processes writing the same database at once
        assert all(p.communicate(timeout=120)[0].strip() == "from the server" and p.returncode == 0 for p in procs)
        seen = server.requests
        llm = LLM(models(server.url), cache=ResponseCache())
        results = complete_all(llm, ["prompt 0", "prompt 1"])
        assert server.requests == seen  # both answered from the other processes' cache
        assert all(r.cached for r in results) and llm.ledger.roles["forward"].cache_hits == 2
    dump = "\n".join(map(str, sqlite3.connect(default_path()).execute("SELECT * FROM responses")))
    assert "from the server" in dump and "sk-test" not in dump


def test_a_different_setting_is_a_different_cache_entry(tmp_path):
    with FakeServer(reply="ok") as server:
        cache = ResponseCache(tmp_path / "c.sqlite")
        complete_all(LLM(models(server.url), cache=cache), ["p"])
        complete_all(LLM(models(server.url, temperature=0.7), cache=cache), ["p"])
        complete_all(LLM(models(server.url), cache=cache), ["p"])
        assert server.requests == 2


TOY = textwrap.dedent("""\
    pipeline toy "Decide"
    input q: text
    param p = "Answer Yes or No."
    node verdict: choice(Yes, No) { prompt = p }
    q -> verdict
    output verdict
    """)


def test_parse_failures_are_recorded_and_scored_wrong(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "Perhaps. It is hard to say." if "claim 0" in prompt else "Yes, clearly."
    path = tmp_path / "toy.sbp"
    path.write_text(with_fake_model(TOY, fake_llm.url))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"q": f"claim {i}", "answer": "Yes"}) + "\n" for i in range(3)))
    code = cli.main(
        [
            "eval",
            str(path),
            "--data",
            str(data),
            "--train-size",
            "0",
            "--val-size",
            "0",
            "--test-size",
            "3",
            "--json",
            "--errors",
            "5",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["scored"] == 3 and report["correct"] == 2
    [wrong] = report["errors"]
    assert wrong["output"] is None and wrong["reply"].startswith("Perhaps")
    code = cli.main(["run", str(path), "--input", "q=claim 0", "--json"])
    trace = json.loads(capsys.readouterr().out)["trace"]
    assert code == 1 and trace["nodes"]["verdict"]["error"] == "the reply does not start with one of Yes, No"


def test_no_model_configured_says_how_to_choose(tmp_path, capsys, monkeypatch):
    from sembp_dsl.models import embedded

    monkeypatch.setattr(embedded, "available", lambda: False)
    path = tmp_path / "toy.sbp"
    path.write_text(TOY)
    assert cli.main(["run", str(path), "--input", "q=x"]) == 1
    err = capsys.readouterr().err
    assert "no model is configured for forward calls" in err and "pip install 'sbpc[embedded]'" in err
    assert "Traceback" not in err


def test_ledger_prices_known_models_and_counts_unknown_ones():
    with FakeServer(reply="four words in reply") as server:
        priced = LLM(
            {"forward": ModelSpec("forward", "openai/gpt-4o-mini", MappingProxyType({"api_base": server.url}))}
        )
        complete_all(priced, ["What is two plus two?"])
        usage = priced.ledger.roles["forward"]
        assert usage.calls == 1 and usage.prompt_tokens > 0 and usage.completion_tokens == 4
        assert 0 < priced.ledger.cost < 0.001
        unpriced = LLM(models(server.url))
        complete_all(unpriced, ["What is two plus two?"])
        assert unpriced.ledger.cost == 0 and unpriced.ledger.counters["calls without a known price"] == 1


def test_a_failed_call_stops_its_sample_not_the_run(tmp_path):
    from sembp_dsl.language.graph.compile import compile_file
    from sembp_dsl.runtime.forward import run

    path = tmp_path / "chain.sbp"
    path.write_text("pipeline c\ninput q: text\nnode a: text {}\nnode b: text {}\nq -> a -> b\noutput b\n")
    graph = compile_file(str(path))
    with FakeServer(reply="fine", failures=[500]) as server:
        llm = LLM(models(server.url), retries=0)
        trace = llm.run(run(graph, llm, {"q": "x"}))
        assert trace.nodes["a"].error == (
            f"call failed: 500 Internal Server Error from {server.url}/chat/completions: scripted failure 500"
        )
        assert trace.nodes["b"].failure == trace.nodes["a"].failure  # the cause travels to the output node
        assert trace.nodes["b"].error == "not run: a predecessor's call failed" and trace.output is None
        assert server.requests == 1  # b spent nothing on a sample already lost
        assert llm.run(run(graph, llm, {"q": "y"})).output == "fine"


def test_a_model_name_without_a_provider_is_a_clear_failure_not_a_crash(tmp_path, fake_llm, capsys):
    """`--model bare-name --api-base URL` once raised IndexError while choosing the call path."""
    path = tmp_path / "toy.sbp"
    path.write_text(with_fake_model(TOY, fake_llm.url))
    code = cli.main(
        ["run", str(path), "--input", "q=x", "--model", "bare-model", "--api-base", fake_llm.url, "--no-cache"]
    )
    said = capsys.readouterr()  # refused before any call: litellm knows no such model, and it names no provider
    assert code == 1 and "model name 'bare-model' names no provider" in said.err and fake_llm.requests == 0


def test_a_caller_leaving_a_shared_call_does_not_cancel_it_for_the_others(fake_llm):
    """Identical calls in flight are made once; one caller cancelled (a client that hung up) leaves the call to
    the others, and only the last one leaving cancels it."""
    fake_llm.configure(delay=2.0)  # far longer than it may take to see both callers leave
    llm = LLM({"forward": ModelSpec("forward", "openai/fake", MappingProxyType({"api_base": fake_llm.url}))})

    async def until(condition) -> float:  # a condition, not a clock: the seconds it took
        start = time.monotonic()
        for _ in range(3000):
            if condition():
                return time.monotonic() - start
            await asyncio.sleep(0.01)
        raise AssertionError("not within 30 s")

    async def go():
        first = asyncio.ensure_future(llm.complete("forward", "same prompt"))
        second = asyncio.ensure_future(llm.complete("forward", "same prompt"))
        await until(lambda: fake_llm.in_flight == 1 and [c.waiting for c in llm.inflight._calls.values()] == [2])
        first.cancel()
        answer = await second
        third, fourth = (asyncio.ensure_future(llm.complete("forward", "another prompt")) for _ in range(2))
        await until(lambda: fake_llm.in_flight == 1 and [c.waiting for c in llm.inflight._calls.values()] == [2])
        third.cancel()
        fourth.cancel()
        await asyncio.wait([third, fourth])
        return first.cancelled(), answer, await until(lambda: fake_llm.in_flight == 0)

    first_cancelled, answer, closed_after = llm.run(go())
    assert first_cancelled and answer.text and fake_llm.requests == 2
    assert closed_after < 1.0  # the call both callers left was cancelled, its request closed: it did not run out


def test_an_answer_shared_by_identical_calls_in_flight_is_paid_for_once(fake_llm):
    """The second caller's completion is a cache hit, as the ledger counts it: two predictions never both
    claim the one call's tokens and cost."""
    fake_llm.configure(delay=0.2)
    llm = LLM({"forward": ModelSpec("forward", "openai/gpt-4o-mini", MappingProxyType({"api_base": fake_llm.url}))})

    async def go():
        return await asyncio.gather(*(llm.complete("forward", "same prompt") for _ in range(3)))

    answers = llm.run(go())
    assert fake_llm.requests == 1 and [a.cached for a in answers] == [False, True, True]
    assert answers[0].cost > 0 and answers[1].cost == answers[2].cost == 0.0
    assert llm.ledger.roles["forward"].calls == 1 and llm.ledger.roles["forward"].cache_hits == 2
