"""More than one endpoint: litellm's Router over 4 loopback fake servers, rate limits kept before sending,
fallback past a dead deployment, per-role concurrency."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml
from fake_server import FakeServer, refused_url
from test_llm import TOY

from sembp_dsl import cli
from sembp_dsl.language.graph.graph import ModelSpec
from sembp_dsl.language.messages import Message
from sembp_dsl.models import limits, prices
from sembp_dsl.models.llm import LLM, CallFailed, LLMError


def router_file(tmp_path, deployments: list[tuple[str, str]], **settings) -> str:
    """A litellm Router config: (model group, base URL) per deployment."""
    path = tmp_path / f"router-{len(list(tmp_path.glob('router-*')))}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    {
                        "model_name": group,
                        "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": url, "api_key": "sk-router-test"},
                    }
                    for group, url in deployments
                ],
                "router_settings": settings,
            }
        )
    )
    return str(path)


def routed(path: str, group: str = "pool", **settings) -> dict[str, ModelSpec]:
    spec = MappingProxyType({"router": path, "temperature": 0, **settings})
    return {role: ModelSpec(role, group, spec) for role in ("forward", "backward", "optimizer")}


def timed(llm: LLM, prompts: list[str]) -> float:
    async def go():
        start = time.perf_counter()
        await asyncio.gather(*(llm.complete("forward", p) for p in prompts))
        return time.perf_counter() - start

    return llm.run(go())


def test_four_deployments_share_the_load(tmp_path):
    servers = [FakeServer(reply="ok", delay=0.05, slots=16).start() for _ in range(4)]
    try:
        path = router_file(tmp_path, [("pool", s.url) for s in servers], routing_strategy="least-busy")
        llm = LLM(routed(path), concurrency=64)
        timed(llm, [f"prompt {i}" for i in range(128)])
        assert sum(s.requests for s in servers) == 128
        assert min(s.requests for s in servers) >= 128 // 5, [s.requests for s in servers]  # each about its quarter
        for s in servers:  # the ledger shows how the Router spread the calls
            assert llm.ledger.counters[f"routed calls answered by {s.url}/chat/completions"] == s.requests
    finally:
        for server in servers:
            server.stop()


def test_rpm_is_kept_before_sending_across_deployments(tmp_path):
    servers = [FakeServer(reply="ok", rpm=120).start() for _ in range(4)]
    try:
        path = router_file(tmp_path, [("pool", s.url) for s in servers])
        llm = LLM(routed(path, rpm=120), concurrency=64)

        async def burst():
            calls = [asyncio.ensure_future(llm.complete("forward", f"p{i}")) for i in range(130)]
            for _ in range(600):  # the first 120 go out (however long a loaded machine takes to start)
                if sum(s.requests for s in servers) >= 120:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)  # the 121st would have gone out by now, were it not waiting for the minute
            unsent = sum(not call.done() for call in calls)
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            return unsent

        assert llm.run(burst()) == 10
        assert sum(s.requests for s in servers) == 120 and sum(s.rate_limited for s in servers) == 0
        assert min(s.requests for s in servers) > 0  # spread over all four
    finally:
        for server in servers:
            server.stop()


def test_a_dead_deployment_is_skipped_through_fallback(tmp_path, capsys):
    with FakeServer(reply="Yes") as live:
        path = router_file(tmp_path, [("main", refused_url()), ("backup", live.url)], fallbacks=[{"main": ["backup"]}])
        pipeline = tmp_path / "toy.sbp"
        pipeline.write_text(TOY + f'model {{ name = "main"  router = "{path}"  temperature = 0 }}\n')
        data = tmp_path / "d.jsonl"
        data.write_text("".join(json.dumps({"q": f"claim {i}", "answer": "Yes"}) + "\n" for i in range(6)))
        code = cli.main(
            [
                "eval",
                str(pipeline),
                "--data",
                str(data),
                "--train-size",
                "0",
                "--val-size",
                "0",
                "--test-size",
                "6",
                "--json",
            ]
        )
        report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["scored"] == 6 and report["lost"] == 0 and report["accuracy"] == 1.0
    assert live.requests == 6 and report["ledger"]["roles"]["forward"]["failures"] == 0
    counters = report["ledger"]["counters"]
    assert counters[f"routed calls answered by {live.url}/chat/completions"] == 6
    assert any(name.startswith("routed calls failed at") and "APIConnectionError" in name for name in counters)


def test_a_bad_router_file_is_a_clear_error(tmp_path):
    path = tmp_path / "router.yaml"
    path.write_text("model_list: []\n")
    with pytest.raises(LLMError, match="non-empty `model_list`"):
        LLM(routed(str(path))).run(LLM(routed(str(path))).complete("forward", "hi"))


def test_a_model_blocks_concurrency_bounds_its_role():
    with FakeServer(reply="ok", delay=0.1) as server:
        spec = MappingProxyType({"api_base": server.url, "concurrency": 2})
        llm = LLM({"forward": ModelSpec("forward", "openai/fake", spec)}, concurrency=16)
        timed(llm, [f"p{i}" for i in range(8)])
        assert server.requests == 8 and server.max_in_flight == 2


def test_rate_limits_wait_for_the_window(monkeypatch):
    monkeypatch.setattr(limits, "WINDOW", 0.3)

    async def go():
        rate = limits.RateLimit(rpm=2)
        start = time.perf_counter()
        for _ in range(3):
            await rate.acquire()
        assert time.perf_counter() - start >= 0.3  # the third waited for the first to leave the window
        tokens = limits.RateLimit(tpm=100)
        await tokens.acquire()
        tokens.spent(150)
        start = time.perf_counter()
        await tokens.acquire()
        assert time.perf_counter() - start >= 0.25

    asyncio.run(go())


def test_routed_calls_are_sent_by_the_fast_path_and_keep_price_and_cut_offs(tmp_path, monkeypatch):
    """The Router chooses; an OpenAI-compatible deployment's request goes out on the fast path (litellm's own
    call costs 6 ms of CPU against 0.4), priced from litellm's table, a cut-off reply still marked as one."""
    from sembp_dsl.models import transport

    litellm = transport.import_litellm()

    async def not_litellm(**kwargs):
        raise AssertionError("litellm.acompletion was called for an OpenAI-compatible deployment")

    monkeypatch.setattr(litellm, "acompletion", not_litellm)
    with FakeServer(reply="one two three four five") as server:
        path = router_file(tmp_path, [("pool", server.url)])
        llm = LLM(routed(path, max_tokens=2), concurrency=4)
        done = llm.run(llm.complete("forward", "hello"))
    assert server.requests == 1 and server.bodies[0]["model"] == "gpt-4o-mini"
    assert server.headers[0]["authorization"] == "Bearer sk-router-test"
    assert done.text == "one two" and done.finish_reason == "length" and done.cost > 0


def test_a_deployment_the_fast_path_cannot_send_goes_through_litellm(tmp_path):
    """A deployment with a parameter only litellm understands (here its `mock_response`) is litellm's call."""
    path = tmp_path / "router.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    {
                        "model_name": "pool",
                        "litellm_params": {
                            "model": "openai/gpt-4o-mini",
                            "api_key": "sk-x",
                            "mock_response": "answered by litellm",
                        },
                    }
                ]
            }
        )
    )
    llm = LLM(routed(str(path)))
    assert llm.run(llm.complete("forward", "hello")).text == "answered by litellm"


def test_a_routed_rate_limit_is_waited_out_as_the_server_asks(tmp_path):
    with FakeServer(reply="ok", failures=[429], retry_after=0.4) as server:
        path = router_file(tmp_path, [("pool", server.url)])
        llm = LLM(routed(path))
        start = time.perf_counter()
        assert llm.run(llm.complete("forward", "hello")).text == "ok"
    assert server.requests == 2 and time.perf_counter() - start >= 0.4
    assert llm.ledger.roles["forward"].retries == 1


def test_a_router_whose_every_deployment_is_dead_says_so(tmp_path):
    path = router_file(tmp_path, [("pool", refused_url()), ("pool", refused_url())])
    llm = LLM(routed(path), retries=1, backoff=0)
    with pytest.raises((LLMError, CallFailed), match="connection refused"):
        llm.run(llm.complete("forward", "hello"))


def test_a_router_file_is_found_beside_the_pipeline(tmp_path, monkeypatch, capsys):
    with FakeServer(reply="Yes") as live:
        folder = tmp_path / "pipelines"
        folder.mkdir()
        (folder / "router.yaml").write_text(Path(router_file(tmp_path, [("pool", live.url)])).read_text())
        (folder / "toy.sbp").write_text(TOY + 'model { name = "pool"  router = "router.yaml"  temperature = 0 }\n')
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        code = cli.main(["run", str(folder / "toy.sbp"), "--input", "q=is it?", "--json"])
    assert code == 0 and live.requests == 1, capsys.readouterr().err


def test_a_routed_deployment_without_a_key_is_a_key_error(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with FakeServer(reply="ok") as server:
        path = tmp_path / "router.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "model_list": [
                        {
                            "model_name": "pool",
                            "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": server.url},
                        }
                    ]
                }
            )
        )
        llm = LLM(routed(str(path)), retries=1, backoff=0)
        with pytest.raises(LLMError, match="(?i)api key|credentials"):
            llm.run(llm.complete("forward", "hello"))
    assert server.requests == 0


def test_a_deployments_own_rpm_is_kept_by_the_router_when_the_fast_path_sends(tmp_path):
    """The Router counts its deployments' requests itself, whoever sends them: with `rpm: 5` in the router file
    (usage-based routing), a call past the minute's allowance is never sent; it waits for a free deployment
    up to its timeout, then fails as a 429 that says why."""
    from sembp_dsl.models.faults import CallError
    from sembp_dsl.models.routing import Routers
    from sembp_dsl.models.transport import FastPath

    with FakeServer(reply="ok") as server:
        path = tmp_path / "router.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "model_list": [
                        {
                            "model_name": "pool",
                            "litellm_params": {
                                "model": "openai/gpt-4o-mini",
                                "api_base": server.url,
                                "api_key": "sk-x",
                                "rpm": 5,
                            },
                        }
                    ],
                    "router_settings": {"routing_strategy": "usage-based-routing-v2"},
                }
            )
        )
        fast = FastPath()
        routers = Routers(fast)
        # usage-based routing counts a deployment's requests per clock minute (litellm's key names the minute):
        # the 8 calls (~8 s with their timeouts) start where they all fall in one minute
        if (second := time.time() % 60) > 45:
            time.sleep(60.5 - second)

        async def go():
            outcomes = []
            for i in range(8):
                try:
                    await routers.send("pool", [Message.user(f"p{i}")], router=str(path), timeout=1.0)
                    outcomes.append("ok")
                except CallError as exc:
                    outcomes.append((exc.status_code, "no deployment" in exc.message))
            await fast.aclose()
            return outcomes

        outcomes = asyncio.run(go())
    # never more than the minute's allowance; on a loaded machine a call within it may also miss its timeout
    assert 0 < server.requests <= 5 and outcomes.count("ok") == server.requests
    assert {outcome for outcome in outcomes if outcome != "ok"} == {(429, True)}


def test_the_plan_bounds_a_routed_models_cost_by_its_dearest_deployment(tmp_path):
    def price(deployments: list[dict]) -> float | None:  # a new session per file: a session reads it once
        path = tmp_path / f"router-{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(
            yaml.safe_dump(
                {"model_list": [{"model_name": d.pop("group", "pool"), "litellm_params": d} for d in deployments]}
            )
        )
        return LLM(routed(str(path))).price("forward", 1000, 100)

    dearest = max(prices.cost(model, 1000, 100) for model in ("openai/gpt-4o-mini", "openai/gpt-4o"))
    assert price([{"model": "openai/gpt-4o-mini"}, {"model": "openai/gpt-4o", "group": "backup"}]) == dearest
    assert dearest > prices.cost("openai/gpt-4o-mini", 1000, 100)
    assert price([{"model": "openai/my-llama"}]) is None  # a deployment without a price: no bound
    own = {"model": "openai/my-llama", "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}
    assert price([own]) == pytest.approx(1000 * 1e-6 + 100 * 2e-6)  # its own prices


def test_a_routed_predictions_cost_is_what_its_calls_cost(tmp_path):
    """Not the plan's bound (the dearest deployment) and not 0 for a group name without a price."""
    import sembp_dsl as sbp

    with FakeServer(reply="Yes") as live:
        path = router_file(tmp_path, [("pool", live.url)])
        config = yaml.safe_load(Path(path).read_text())
        config["model_list"].append({"model_name": "backup", "litellm_params": {"model": "openai/gpt-4o"}})
        Path(path).write_text(yaml.safe_dump(config))
        (tmp_path / "toy.sbp").write_text(TOY + f'model {{ name = "pool"  router = "{path}"  temperature = 0 }}\n')
        with sbp.load(tmp_path / "toy.sbp", cache=False) as toy:
            one = toy(q="is it?")
            spent = toy.ledger.cost
    assert one.usage.calls == 1 and one.usage.cost == spent > 0


@pytest.mark.parametrize("written", ["tok-literal-secret-1234", "os.environ/ROUTER_TEST_KEY"])
def test_a_router_files_keys_never_reach_messages(tmp_path, monkeypatch, written):
    """A server that echoes the key it got (as OpenAI's 401 does) must not put a router file's key, written in the
    file or read from the environment, into an error, the ledger or a run record."""
    monkeypatch.setenv("ROUTER_TEST_KEY", "hf_env-secret-5678")
    with FakeServer(reply="ok", failures=["401"]) as server:
        path = tmp_path / "router.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "model_list": [
                        {
                            "model_name": "pool",
                            "litellm_params": {
                                "model": "openai/gpt-4o-mini",
                                "api_base": server.url,
                                "api_key": written,
                            },
                        }
                    ]
                }
            )
        )
        llm = LLM(routed(str(path)), retries=1, backoff=0)
        with pytest.raises(LLMError) as error:
            llm.run(llm.complete("forward", "hello"))
    shown = str(error.value) + getattr(error.value, "cli", "") + json.dumps(llm.ledger.to_json())
    assert "401" in shown and "secret" not in shown


def test_hostile_router_files_are_refused_with_their_reason(tmp_path):
    """A FIFO (which would block the reader), an alias bomb (which litellm would copy out in full), a binary file."""
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    bomb = tmp_path / "bomb.yaml"
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)
    ]
    bomb.write_text(
        "\n".join(levels) + "\nmodel_list: [{model_name: pool, litellm_params: {model: openai/x, extra: *a8}}]\n"
    )
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00model_list")
    for path, reason in ((fifo, "not a regular file"), (bomb, "aliases are expanded"), (binary, "router config")):
        llm = LLM(routed(str(path)))
        start = time.perf_counter()
        with pytest.raises(LLMError, match=reason):
            llm.run(llm.complete("forward", "hello"))
        assert time.perf_counter() - start < 5


def test_a_model_group_the_router_file_lacks_stops_at_once_with_a_did_you_mean(tmp_path):
    with FakeServer(reply="ok") as server:
        path = router_file(tmp_path, [("pool", server.url)])
        llm = LLM({"forward": ModelSpec("forward", "pools", MappingProxyType({"router": path}))})
        with pytest.raises(LLMError, match="unknown model group 'pools'; did you mean 'pool'"):
            llm.run(llm.complete("forward", "hello"))
        assert server.requests == 0 and llm.ledger.roles["forward"].retries == 0


def test_a_deployment_with_limits_weight_and_prices_of_its_own_is_still_sent_by_the_fast_path(tmp_path, monkeypatch):
    """rpm, tpm, weight and max_parallel_requests are the Router's to keep; input/output_cost_per_token price
    the reply as litellm would. None of them sends the call the slow way."""
    from sembp_dsl.models import transport

    litellm = transport.import_litellm()

    async def not_litellm(**kwargs):
        raise AssertionError("litellm.acompletion was called")

    monkeypatch.setattr(litellm, "acompletion", not_litellm)
    with FakeServer(reply="ok") as server:
        path = tmp_path / "router.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "model_list": [
                        {
                            "model_name": "pool",
                            "litellm_params": {
                                "model": "openai/my-llama",
                                "api_base": server.url,
                                "api_key": "sk-x",
                                "rpm": 600,
                                "tpm": 10**6,
                                "weight": 2,
                                "max_parallel_requests": 16,
                                "input_cost_per_token": 1e-6,
                                "output_cost_per_token": 3e-6,
                            },
                        }
                    ]
                }
            )
        )
        llm = LLM(routed(str(path)))
        done = llm.run(llm.complete("forward", "hello"))
    assert server.requests == 1 and server.bodies[0]["model"] == "my-llama"
    assert not {"rpm", "weight", "input_cost_per_token"} & set(server.bodies[0])
    assert done.cost == pytest.approx(done.prompt_tokens * 1e-6 + done.completion_tokens * 3e-6) and done.cost > 0
