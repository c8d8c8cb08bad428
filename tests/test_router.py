"""More than one endpoint: litellm's Router over 4 loopback fake servers, rate limits kept before sending,
fallback past a dead deployment, per-role concurrency."""

from __future__ import annotations

import asyncio
import json
import time
from types import MappingProxyType

import pytest
import yaml

from fake_server import FakeServer, refused_url
from sembp_dsl import cli, limits
from sembp_dsl.graph import ModelSpec
from sembp_dsl.llm import LLM, LLMError
from test_llm import TOY


def router_file(tmp_path, deployments: list[tuple[str, str]], **settings) -> str:
    """A litellm Router config: (model group, base URL) per deployment."""
    path = tmp_path / f"router-{len(list(tmp_path.glob('router-*')))}.yaml"
    path.write_text(yaml.safe_dump({
        "model_list": [{"model_name": group, "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": url,
                                                                "api_key": "sk-router-test"}}
                       for group, url in deployments],
        "router_settings": settings}))
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
    """Through litellm's Router each call costs about 10 ms of client CPU on this loaded 2-core machine, which
    caps the four-server run; bench/router_throughput.py measures the ratio (see docs/performance.md)."""
    servers = [FakeServer(reply="ok", delay=1.0, slots=16).start() for _ in range(4)]
    try:
        prompts = [f"prompt {i}" for i in range(128)]
        seconds = {}
        for n in (1, 4):
            path = router_file(tmp_path, [("pool", s.url) for s in servers[:n]], routing_strategy="least-busy")
            llm = LLM(routed(path), concurrency=64)
            timed(llm, ["warm-up: litellm and the router are loaded here"])
            seconds[n] = timed(llm, prompts)
        assert sum(s.requests for s in servers) == 2 * 128 + 2
        assert min(s.requests for s in servers) >= 128 // 5  # each of the four took about its quarter
        assert seconds[1] / seconds[4] >= 1.5, seconds
    finally:
        for server in servers:
            server.stop()


def test_rpm_is_kept_before_sending_across_deployments(tmp_path):
    servers = [FakeServer(reply="ok", rpm=120).start() for _ in range(4)]
    try:
        path = router_file(tmp_path, [("pool", s.url) for s in servers])
        llm = LLM(routed(path, rpm=120), concurrency=64)

        async def burst():
            with pytest.raises(asyncio.TimeoutError):  # the 121st request waits for the minute to pass
                await asyncio.wait_for(asyncio.gather(*(llm.complete("forward", f"p{i}") for i in range(130))), 4)
        llm.run(burst())
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
        code = cli.main(["eval", str(pipeline), "--data", str(data), "--train-size", "0", "--val-size", "0",
                         "--test-size", "6", "--json"])
        report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["scored"] == 6 and report["lost"] == 0 and report["accuracy"] == 1.0
    assert live.requests == 6 and report["ledger"]["roles"]["forward"]["failures"] == 0


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
