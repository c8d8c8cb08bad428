"""The Router path against hostile input: malformed router files, deployments that fail in every way,
cancellations, several threads. Each test names what it guards against."""

from __future__ import annotations

import asyncio
import time
from types import MappingProxyType

import pytest
import yaml
from fake_server import FakeServer
from test_llm import TOY

from sembp_dsl import cli
from sembp_dsl.language.graph.graph import ModelSpec
from sembp_dsl.models.cache import ResponseCache
from sembp_dsl.models.llm import LLM, CallFailed

KEY = "sk-hostile-secret-4242"


def deployment(group: str = "pool", url: str = "http://127.0.0.1:9/v1", **params) -> dict:
    return {
        "model_name": group,
        "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": url, "api_key": KEY, **params},
    }


def write(tmp_path, config, name: str = "router.yaml") -> str:
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return str(path)


def routed(path: str, group: str = "pool", **settings) -> dict[str, ModelSpec]:
    spec = MappingProxyType({"router": path, "temperature": 0, **settings})
    return {role: ModelSpec(role, group, spec) for role in ("forward", "backward", "optimizer")}


MALFORMED = {
    "an entry that is not a mapping": ({"model_list": ["pool", deployment()]}, "model_list entry 1 must be a mapping"),
    "no model_name": ({"model_list": [{"litellm_params": {"model": "openai/x"}}]}, "`model_name`"),
    "a number for model_name": (
        {"model_list": [{"model_name": 5, "litellm_params": {"model": "openai/x"}}]},
        "`model_name`",
    ),
    "litellm_params not a mapping": (
        {"model_list": [{"model_name": "pool", "litellm_params": "openai/x"}]},
        "`litellm_params` must be a mapping",
    ),
    "no model": (
        {"model_list": [{"model_name": "pool", "litellm_params": {"api_base": "http://x"}}]},
        "with a `model` string",
    ),
    "a word for a weight": ({"model_list": [deployment(weight="heavy")]}, "`weight` must be a number"),
    "a negative rpm": ({"model_list": [deployment(rpm=-1)]}, "`rpm` must be a number"),
    "max_parallel_requests at 0": (
        {"model_list": [deployment(max_parallel_requests=0)]},
        "`max_parallel_requests` must be more than 0",
    ),
    "a word for num_retries": (
        {"model_list": [deployment()], "router_settings": {"num_retries": "many"}},
        "`num_retries` must be a number",
    ),
    "a fallback to an unknown group": (
        {"model_list": [deployment()], "router_settings": {"fallbacks": [{"pool": ["backup"]}]}},
        "fallbacks: unknown model group 'backup'",
    ),
    "fallbacks as a mapping": (
        {"model_list": [deployment()], "router_settings": {"fallbacks": {"pool": "x"}}},
        "`fallbacks` must be a list of mappings",
    ),
    "an alias to an unknown group": (
        {"model_list": [deployment("main")], "router_settings": {"model_group_alias": {"pool": "mian"}}},
        "unknown model group 'mian'; did you mean 'main'",
    ),
    "an alias as a mapping without hidden": (
        {"model_list": [deployment("main")], "router_settings": {"model_group_alias": {"pool": {"model": "main"}}}},
        "model_group_alias 'pool': must name a model group",
    ),
    "a number for a key": ({"model_list": [deployment(api_key=12345678)]}, "`api_key` must be a string"),
    "an address that is no URL": (
        {"model_list": [deployment(url="localhost:8000")]},
        "`api_base` has no scheme: add http://",
    ),
    "a port out of range": (
        {"model_list": [deployment(url="http://127.0.0.1:99999/v1")]},
        "`api_base` has a port that is not a number from 0 to 65535",
    ),
    "a value its YAML tag cannot hold": (
        "model_list:\n  - model_name: pool\n    litellm_params: {model: openai/x, rpm: !!int abc}\n",
        "a value YAML cannot read",
    ),
    "nesting deeper than Python's stack": ("model_list: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    "an infinite rpm": ({"model_list": [deployment(rpm=float("inf"))]}, "`rpm` must be a number"),
    "a !!bool key among a deployment's settings": (
        "model_list:\n  - model_name: pool\n    litellm_params: {model: openai/x, !!bool true: 1}\n",
        "model_list[0].litellm_params: the key True is not a string",
    ),
    "a !!timestamp key for an alias": (
        "model_list: [{model_name: pool, litellm_params: {model: openai/x}}]\n"
        "router_settings: {model_group_alias: {!!timestamp 2020-01-01: pool}}\n",
        "router_settings.model_group_alias: the key 2020-01-01 is not a string",
    ),
    "a !!timestamp value sent with each call": (
        "model_list: [{model_name: pool, litellm_params: {model: openai/x, temperature: !!timestamp 2020-01-01}}]\n",
        "model_list[0].litellm_params.temperature: a date",
    ),
    "a !!binary value": (
        "model_list: [{model_name: pool, litellm_params: {model: openai/x, seed: !!binary aGVsbG8=}}]\n",
        "model_list[0].litellm_params.seed: bytes",
    ),
    # these ended check and run in a KeyError and an AttributeError from inside PyYAML
    "a !!bool that is no boolean": (
        "model_list: [{model_name: pool, litellm_params: {model: openai/x, stream: !!bool maybe}}]\n",
        "a value YAML cannot read (!!bool 'maybe'",
    ),
    "a !!timestamp that is no date": (
        "model_list: [{model_name: pool, litellm_params: {model: openai/x, seed: !!timestamp never}}]\n",
        "a value YAML cannot read (!!timestamp 'never'",
    ),
    # a list holding itself twice: walked until memory ran out (each level's path a longer string)
    "an alias that contains itself": (
        "model_list: [{model_name: pool, litellm_params: {model: openai/x, tags: &loop [*loop, *loop]}}]\n",
        "model_list[0].litellm_params.tags[0]: a YAML alias that contains itself",
    ),
    "a mapping alias that contains itself": (
        "model_list: [{model_name: pool, litellm_params: &loop {model: openai/x, again: *loop}}]\n",
        "model_list[0].litellm_params.again: a YAML alias that contains itself",
    ),
}


@pytest.mark.parametrize("config, reason", MALFORMED.values(), ids=list(MALFORMED))
def test_a_malformed_router_file_is_a_clear_error_naming_it(tmp_path, capsys, config, reason):
    """Each of these was a traceback from inside litellm (on the first call), an unclear one-liner
    ("AttributeError: 'str' object has no attribute 'get'"), or silently taken (a fallback never made)."""
    path = write(tmp_path, config)
    (tmp_path / "toy.sbp").write_text(TOY + f'model {{ name = "pool"  router = "{path}" }}\n')
    start = time.perf_counter()
    code = cli.main(["run", str(tmp_path / "toy.sbp"), "--input", "q=is it?", "--json"])
    error = capsys.readouterr().err
    assert code == 1 and f"router config {path}: " in error and reason in error, error
    assert "Traceback" not in error and "12345678" not in error and time.perf_counter() - start < 20


@pytest.mark.parametrize("config, reason", MALFORMED.values(), ids=list(MALFORMED))
def test_check_reports_the_router_file_a_pipeline_names(tmp_path, capsys, config, reason):
    """`sbpc check` passed every one of these pipelines; the run then failed on the file."""
    write(tmp_path, config)
    (tmp_path / "toy.sbp").write_text(TOY + 'model { name = "pool"  router = "router.yaml" }\n')
    code = cli.main(["check", str(tmp_path / "toy.sbp")])
    error = capsys.readouterr().err
    assert code == 1 and "error[E070]: router config " in error and reason in error, error
    assert "Traceback" not in error and "12345678" not in error


def test_check_reads_a_router_file_without_importing_litellm(tmp_path):
    """check stays fast (pre-commit hooks, editors): the router file is read as data."""
    import subprocess
    import sys

    write(tmp_path, {"model_list": [deployment()]})
    (tmp_path / "toy.sbp").write_text(TOY + 'model { name = "pool"  router = "router.yaml" }\n')
    probe = (
        "import sys\nfrom sembp_dsl import cli\ncode = cli.main(['check', sys.argv[1]])\n"
        "assert 'litellm' not in sys.modules, 'check imported litellm'\nsys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "toy.sbp")], capture_output=True, text=True)
    assert done.returncode == 0 and "toy.sbp: ok" in done.stdout, done.stderr


@pytest.mark.parametrize("settings", [{"num_retries": 1_000_000}, {"num_retries": 5, "retry_after": 1_000_000}])
def test_a_router_files_retries_end_with_the_calls_timeout(tmp_path, settings):
    """The Router's own retries (and its waits between them) ran past any timeout: `sbpc run --timeout 5`
    never ended against a failing server."""
    from sembp_dsl.models.transport import import_litellm

    import_litellm()  # not timed
    with FakeServer(reply="ok", fault_rate=1.0, fault_kinds=[500]) as server:
        path = write(tmp_path, {"model_list": [deployment(url=server.url)], "router_settings": settings})
        llm = LLM(routed(path), timeout=1.0, retries=0, backoff=0)
        start = time.perf_counter()
        with pytest.raises(CallFailed, match="timed out"):
            llm.run(llm.complete("forward", "hello"))
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("fault", ["null-content", "malformed", "no-choices"])
def test_a_malformed_reply_behind_the_router_is_retried_and_never_cached(tmp_path, fault):
    """The fast path's BadReply reached the Router as a 200 failure, which litellm cools down at once even
    for a lone deployment: the retry then died on a raw "no deployments available" ValueError."""
    with FakeServer(reply="ok", failures=[fault]) as server:
        path = write(tmp_path, {"model_list": [deployment(url=server.url)]})
        cache = ResponseCache(tmp_path / "cache")
        llm = LLM(routed(path), retries=2, backoff=0, cache=cache)
        assert llm.run(llm.complete("forward", "hello")).text == "ok"
        assert server.requests == 2 and llm.ledger.roles["forward"].retries == 1
        assert any(cause.startswith("malformed reply") for cause in llm.ledger.faults)
        again = LLM(routed(path), cache=ResponseCache(tmp_path / "cache"))
        hit = again.run(again.complete("forward", "hello"))
    assert hit.cached and hit.text == "ok" and server.requests == 2


def test_every_deployment_cooling_down_is_waited_out_not_a_traceback(tmp_path):
    """When every deployment is cooling down the Router raises its own RouterRateLimitError (a ValueError,
    not an API error), which was a traceback: the call now waits out the cooldown, then goes through."""
    with FakeServer(reply="ok", failures=["429"]) as one, FakeServer(reply="ok", failures=["429"]) as two:
        path = write(
            tmp_path,
            {
                "model_list": [deployment(url=one.url), deployment(url=two.url)],
                "router_settings": {"cooldown_time": 0.5},
            },
        )
        llm = LLM(routed(path), retries=4, backoff=0)
        start = time.perf_counter()
        assert llm.run(llm.complete("forward", "hello")).text == "ok"
    assert time.perf_counter() - start >= 0.5  # the cooldown the Router asked for was waited out
    assert one.requests + two.requests == 3 and llm.ledger.faults == {"429 Too Many Requests": 2}
    assert llm.ledger.counters["routed calls that waited for a free deployment"] == 1


def test_a_router_file_pointing_a_group_elsewhere_is_not_answered_from_the_cache(tmp_path):
    """The cache key named the file, not what it routes to: after `pool` was moved to another model on another
    server, the old model's answers came back as the new one's. A new key or limit still finds the cache."""
    with FakeServer(reply="from mini") as mini, FakeServer(reply="from big") as big:
        path = write(tmp_path, {"model_list": [deployment(url=mini.url)]})

        def ask() -> str:
            llm = LLM(routed(path), cache=ResponseCache(tmp_path / "cache"))
            return llm.run(llm.complete("forward", "hello")).text

        assert ask() == "from mini"
        write(tmp_path, {"model_list": [deployment(url=mini.url, api_key="sk-rotated-key-1", rpm=60)]})
        assert ask() == "from mini" and mini.requests == 1  # same deployment: the cache answers
        write(tmp_path, {"model_list": [deployment(url=big.url, model="openai/gpt-4o")]})
        assert ask() == "from big" and big.requests == 1


@pytest.mark.parametrize("where", ["deployment", "router_settings"])
def test_a_router_files_own_timeout_cuts_a_hanging_deployment_short(tmp_path, where):
    """sbpc passed its own timeout (the model block's, 120 s by default) to every routed call, which beats
    a deployment's or router_settings' `timeout` in litellm: a hanging deployment was waited on that long.
    The shorter of the two now applies."""
    from sembp_dsl.models.transport import import_litellm

    import_litellm()  # not timed
    with FakeServer(reply="ok", failures=["hang"], hang_seconds=60) as server:
        config = (
            {"model_list": [deployment(url=server.url, timeout=0.3)]}
            if where == "deployment"
            else {"model_list": [deployment(url=server.url)], "router_settings": {"timeout": 0.3}}
        )
        llm = LLM(routed(write(tmp_path, config)), timeout=30, backoff=0)
        start = time.perf_counter()
        assert llm.run(llm.complete("forward", "hello")).text == "ok"
    assert time.perf_counter() - start < 10 and llm.ledger.faults == {"Timeout": 1}


def test_the_model_blocks_timeout_still_bounds_a_routed_call(tmp_path):
    with FakeServer(reply="ok", failures=["hang"], hang_seconds=60) as server:
        path = write(
            tmp_path, {"model_list": [deployment(url=server.url, timeout=120)], "router_settings": {"timeout": 120}}
        )
        llm = LLM(routed(path, timeout=0.3), timeout=30, backoff=0)
        assert llm.run(llm.complete("forward", "hello")).text == "ok"
    assert llm.ledger.faults == {"Timeout": 1} and server.requests == 2


def test_calls_wait_for_a_free_deployment_instead_of_failing(tmp_path):
    """Every deployment at its limit (here max_parallel_requests: 1), the Router refuses a call before sending
    it. Each refusal was a failed attempt: samples were lost once the retries ran out. Now the call waits for a
    free deployment (up to its timeout) and no attempt fails."""
    with FakeServer(reply="ok", delay=0.05) as one, FakeServer(reply="ok", delay=0.05) as two:
        path = write(tmp_path, {"model_list": [deployment(url=s.url, max_parallel_requests=1) for s in (one, two)]})
        llm = LLM(routed(path), retries=0, concurrency=16)

        async def burst():
            return await asyncio.gather(*(llm.complete("forward", f"prompt {i}") for i in range(12)))

        assert [done.text for done in llm.run(burst())] == ["ok"] * 12
    assert one.requests + two.requests == 12 and one.max_in_flight == two.max_in_flight == 1
    assert llm.ledger.faults == {} and llm.ledger.counters["routed calls that waited for a free deployment"] > 0


def test_a_router_that_never_frees_a_deployment_gives_up_at_the_timeout_saying_why(tmp_path):
    with FakeServer(reply="ok", hang=True, hang_seconds=60) as server:
        path = write(tmp_path, {"model_list": [deployment(url=server.url, max_parallel_requests=1)]})
        patient, impatient = (MappingProxyType({"router": path, "timeout": t}) for t in (60.0, 0.5))
        llm = LLM(
            {"backward": ModelSpec("backward", "pool", patient), "forward": ModelSpec("forward", "pool", impatient)},
            retries=0,
        )

        async def go():
            holder = asyncio.ensure_future(llm.complete("backward", "holds the only slot"))
            for _ in range(1000):  # until its request is at the server (litellm is imported by then)
                if server.in_flight:
                    break
                await asyncio.sleep(0.01)
            try:
                with pytest.raises(CallFailed) as refused:
                    await llm.complete("forward", "waits for it")
            finally:
                holder.cancel()
                await asyncio.gather(holder, return_exceptions=True)
            return str(refused.value)

        message = llm.run(go())
    assert server.requests == 1 and message.startswith("429 Too Many Requests from litellm router")
    assert "no deployment of model group 'pool' can take a call now" in message
    assert llm.ledger.counters["routed calls that waited for a free deployment"] == 1


def test_cancelled_routed_calls_close_their_requests_and_leave_no_busy_deployment(tmp_path):
    """Calls cancelled while their deployment hangs (asyncio.wait_for, Ctrl-C) close the request and give back
    least-busy's in-flight counts: later calls still go to that deployment, not only to the other one."""
    with FakeServer(reply="A", failures=["hang"] * 3, hang_seconds=60) as a, FakeServer(reply="B") as b:
        path = write(
            tmp_path,
            {
                "model_list": [deployment(url=a.url), deployment(url=b.url)],
                "router_settings": {"routing_strategy": "least-busy"},
            },
        )
        llm = LLM(routed(path), concurrency=16)

        async def go():
            calls = asyncio.gather(*(llm.complete("forward", f"cancelled {i}") for i in range(6)))
            for _ in range(1000):  # until a request hangs at A (litellm is imported by then)
                if a.in_flight:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            calls.cancel()
            await asyncio.gather(calls, return_exceptions=True)
            for _ in range(200):  # the server sees the connection close
                if not a.in_flight:
                    break
                await asyncio.sleep(0.01)
            assert a.in_flight == 0 and a.requests >= 1
            a.configure(failures=[])  # A answers from now on
            return [(await llm.complete("forward", f"later {i}")).text for i in range(8)]

        later = llm.run(go())
    assert "A" in later, later  # a leaked in-flight count would send every later call to B


def test_an_address_read_from_the_environment_is_left_to_litellm(tmp_path):
    """litellm reads `api_base: os.environ/NAME` itself: the shape check must not take it for a bad URL."""
    from sembp_dsl.models.routing import router_config

    path = write(tmp_path, {"model_list": [deployment(url="os.environ/POOL_API_BASE")]})
    assert router_config(path)["model_list"][0]["litellm_params"]["api_base"] == "os.environ/POOL_API_BASE"


def test_a_key_read_from_an_unset_variable_is_named_in_one_line_before_any_call(tmp_path, capsys, monkeypatch):
    """`api_key: os.environ/NAME` with NAME unset gave 92 litellm error blocks over 25 s, the last one
    blaming OPENAI_API_KEY."""
    monkeypatch.delenv("SBPC_UNSET_KEY", raising=False)
    with FakeServer(reply="ok") as server:
        path = write(tmp_path, {"model_list": [deployment(url=server.url, api_key="os.environ/SBPC_UNSET_KEY")]})
        (tmp_path / "toy.sbp").write_text(TOY + f'model {{ name = "pool"  router = "{path}" }}\n')
        start = time.perf_counter()
        code = cli.main(["run", str(tmp_path / "toy.sbp"), "--input", "q=is it?", "--no-cache"])
        assert server.requests == 0
    error = capsys.readouterr().err
    assert code == 1 and time.perf_counter() - start < 20
    lines = [line for line in error.splitlines() if "SBPC_UNSET_KEY" in line]
    assert len(lines) == 1 and path in lines[0] and "$SBPC_UNSET_KEY, which is not set" in lines[0], error
    assert "OPENAI_API_KEY" not in error and "Traceback" not in error


def test_check_names_a_model_group_the_router_file_does_not_define(tmp_path, capsys):
    """check passed a pipeline whose model block names a group the file lacks; run refused it."""
    write(tmp_path, {"model_list": [deployment("pool")]})
    (tmp_path / "toy.sbp").write_text(TOY + 'model { name = "pol"  router = "router.yaml" }\n')
    code = cli.main(["check", str(tmp_path / "toy.sbp")])
    error = capsys.readouterr().err
    assert code == 1 and "error[E070]: router config " in error, error
    assert "unknown model group 'pol'; did you mean 'pool'" in error, error


def test_a_router_file_with_its_own_retries_fails_within_the_timeout(tmp_path):
    """With `num_retries` in the file, sbpc retried each timed-out Router call on top of the Router's own
    retries: `--timeout 5` took 88-95 s to fail. The file's retries are the whole retry chain."""
    from sembp_dsl.models.transport import import_litellm

    import_litellm()  # not timed
    with FakeServer(reply="ok", fault_rate=1.0, fault_kinds=[500]) as server:
        path = write(tmp_path, {"model_list": [deployment(url=server.url)], "router_settings": {"num_retries": 3}})
        llm = LLM(routed(path), timeout=1.0)  # sbpc's own retries and backoff as a run has them
        start = time.perf_counter()
        with pytest.raises(CallFailed):
            llm.run(llm.complete("forward", "hello"))
    assert time.perf_counter() - start < 4  # the timeout, and the slack of a loaded machine


@pytest.mark.parametrize("asked", [False, True])
def test_litellms_logging_stays_off_stderr_unless_asked_for(asked):
    """With `fallbacks`, the Router's "LiteLLM Router:ERROR ... Cooldown" lines reached stderr (10 for one
    run), beside sbpc's own report of the same failures. litellm logs only when LITELLM_LOG asks it to."""
    import os
    import subprocess
    import sys

    probe = (
        "import logging\nfrom sembp_dsl.models.transport import import_litellm\nimport_litellm()\n"
        "logging.getLogger('LiteLLM Router').error('Cooldown probe')\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "LITELLM_LOG"}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**env, "LITELLM_LOG": "ERROR"} if asked else env,
    )
    assert done.returncode == 0 and ("Cooldown probe" in done.stderr) == asked, done.stderr
