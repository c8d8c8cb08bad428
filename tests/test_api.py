"""The Python API (issue 9): every line of the README's example against the fake model, and `sbpc serve`
with real HTTP clients."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

import sembp_dsl as sbp

TRIAGE = '''\
pipeline triage "Decide whether a support ticket is urgent"

input ticket: text

param look = "Note what the ticket is about."
param decide = "Is the ticket urgent? Answer Yes or No."

node notes: text { prompt = look }
node urgent: choice(Yes, No) { prompt = decide }

ticket -> notes
ticket, notes -> urgent
output urgent
optimize { errors_per_gradient = 2 }
'''


def urgent_when_crash(prompt: str) -> str:
    ticket = re.search(r"Ticket:\s*(.*)", prompt).group(1)
    return "Yes" if "crash" in ticket else "No"


@pytest.fixture
def triage(tmp_path, fake_llm, script):
    script.verdict = urgent_when_crash
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url) as pipeline:
        yield pipeline


def tickets(n: int) -> list[dict]:
    return [{"ticket": f"ticket {i}: the app {'crashes' if i % 3 == 0 else 'looks odd'} on login"} for i in range(n)]


def test_public_names_are_listed_and_typed():
    assert set(sbp.__all__) == {"BudgetExceeded", "CallFailed", "DataError", "Evaluation", "LLMError", "Optimized",
                                "Pipeline", "PipelineError", "Prediction", "Usage", "load"}
    assert all(getattr(sbp, name) is not None for name in sbp.__all__)
    assert (Path(sbp.__file__).parent / "py.typed").exists()
    with pytest.raises(AttributeError):
        sbp.compile_file  # internals stay internal


def test_importing_the_package_does_not_import_litellm():
    code = "import sembp_dsl, sys; sembp_dsl.__version__; print('litellm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_a_call_returns_the_typed_output_its_trace_and_usage(triage, fake_llm):
    result = triage(ticket="The app crashes on login")
    assert result.output == "Yes" and result.error is None and not result.failed
    assert list(result.trace.nodes) == ["notes", "urgent"]
    assert result.usage.calls == 2 and result.usage.prompt_tokens > 0
    again = triage(ticket="The app crashes on login")
    assert again.usage.calls == 0 and again.usage.cache_hits == 2  # the response cache is shared
    assert fake_llm.requests == 2
    assert triage.ledger.calls == 2


def test_acall_runs_on_the_callers_loop(triage):
    async def main():
        results = await asyncio.gather(triage.acall(ticket="crash at start"), triage.acall(ticket="a typo"))
        await triage.aclose()
        return results
    assert [r.output for r in asyncio.run(main())] == ["Yes", "No"]


def test_sync_calls_inside_an_event_loop_say_what_to_use(triage):
    async def main():
        triage(ticket="x")
    with pytest.raises(RuntimeError, match="await pipeline.acall"):
        asyncio.run(main())


def test_batch_keeps_input_order_and_bounds_rows_in_flight(triage, fake_llm):
    fake_llm.configure(delay=0.02)
    rows = tickets(40)
    results = triage.batch(rows, concurrency=8)
    assert [r.output for r in results] == ["Yes" if i % 3 == 0 else "No" for i in range(40)]
    assert fake_llm.max_in_flight <= 8  # each row's two calls run one after the other


def test_inputs_are_checked_before_any_call(triage, fake_llm):
    with pytest.raises(ValueError, match="no input 'tickt'; did you mean 'ticket'"):
        triage(tickt="x")
    with pytest.raises(ValueError, match="missing input: ticket"):
        triage.batch([{"ticket": "fine"}, {}])
    assert fake_llm.requests == 0
    assert triage(ticket={"id": 7, "text": "crash"}).trace.inputs["ticket"] == '{"id": 7, "text": "crash"}'


def test_evaluate_in_memory_examples_with_a_python_metric(triage):
    examples = [{**row, "answer": "Yes"} for row in tickets(9)]
    report = triage.evaluate(examples)
    assert report.accuracy == pytest.approx(3 / 9)
    seen = []

    def lenient(prediction, example):
        seen.append(example)
        return 1.0 if prediction.output == example["answer"] else 0.5

    report = triage.evaluate(examples, metric=lenient)
    assert report.accuracy == pytest.approx((3 + 6 * 0.5) / 9)
    assert seen[0] is examples[0] or seen[0] in examples  # the example as it was given


def test_a_metric_that_returns_something_else_is_named(triage):
    def shout(prediction, example):
        return "yes"

    with pytest.raises(TypeError, match="'shout' returned 'yes'; a metric returns a bool or a number from 0 to 1"):
        triage.evaluate([{"ticket": "crash", "answer": "Yes"}], metric=shout)


def test_evaluate_a_data_file_by_path(triage, tmp_path):
    data = tmp_path / "tickets.jsonl"
    data.write_text("".join(json.dumps({**row, "label": "Yes"}) + "\n" for row in tickets(6)))
    report = triage.evaluate(str(data), train_size=0, val_size=0, test_size=6)
    assert len(report.results) == 6 and report.accuracy == pytest.approx(2 / 6)


def test_optimize_then_save_writes_back_like_the_cli(triage, script, tmp_path):
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else urgent_when_crash(prompt)
    script.improve = lambda param, prompt: f"Improved {param}: Answer Yes or No."
    examples = [{**row, "answer": "Yes"} for row in tickets(12)]
    path = Path(triage.path)
    before = path.read_text()
    outcome = triage.optimize(examples[:6], examples[6:], iters=1, gate_alpha=1, only=["decide"], runs_dir=tmp_path / "runs")
    assert outcome.outcome.iterations[0].accepted
    assert outcome.pipeline.prompts["decide"].startswith("Improved") and triage.prompts["decide"] == "Is the ticket urgent? Answer Yes or No."
    assert path.read_text() == before  # nothing is written until save()
    assert "+param decide" in outcome.diff
    assert outcome.pipeline.save() == path
    assert 'param decide = "Improved decide: Answer Yes or No."' in path.read_text()
    record = json.loads((outcome.record / "run.json").read_text())
    assert record["settings"]["data"] == "examples" and record["iterations"][0]["accepted"]


def test_optimize_rejects_what_cannot_run(triage):
    examples = [{**row, "answer": "Yes"} for row in tickets(4)]
    with pytest.raises(ValueError, match="gate split"):
        triage.optimize(examples)
    with pytest.raises(ValueError, match="did you mean 'decide'"):
        triage.optimize(examples, examples, only=["decid"])
    with pytest.raises(TypeError, match="did you mean 'iters'"):
        triage.optimize(examples, examples, iter=2)


def test_models_are_overridden_per_role(tmp_path, fake_llm):
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    pipeline = sbp.load(path, model="openai/fake", api_base=fake_llm.url,
                        roles={"backward": "openai/other", "optimizer": {"name": "openai/third", "temperature": 0.9}})
    settings = pipeline.method()
    assert settings.models == {"forward": "openai/fake", "backward": "openai/other", "optimizer": "openai/third"}
    with pytest.raises(ValueError, match="unknown model role"):
        sbp.load(path, roles={"backwards": "x"})


def test_a_bad_file_raises_pipeline_error_with_located_diagnostics(tmp_path):
    path = tmp_path / "bad.sbp"
    path.write_text(TRIAGE.replace("ticket -> notes", "tickt -> notes"))
    with pytest.raises(sbp.PipelineError) as caught:
        sbp.load(path)
    assert re.search(r"bad\.sbp:\d+:\d+: error: .*tickt", caught.value.render())


def test_a_call_the_provider_refuses_raises_with_its_message(triage, fake_llm):
    fake_llm.configure(failures=[401])
    with pytest.raises(sbp.LLMError, match="401|[Aa]uthenticat"):
        triage(ticket="x")


# --- sbpc serve -----------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path, fake_llm, script):
    script.verdict = urgent_when_crash
    fake_llm.configure(delay=0.05)
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    proc = subprocess.Popen([sys.executable, "-m", "sembp_dsl.cli", "serve", str(path), "--port", "0",
                             "--model", "openai/fake", "--concurrency", "32"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "OPENAI_API_BASE": fake_llm.url})
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://\S+", line)
        assert url, line + proc.stderr.read()
        yield url.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_answers_64_concurrent_clients_without_an_error(server, fake_llm):
    async def main():
        async with aiohttp.ClientSession() as session:
            async def one(i):
                async with session.post(server + "/", json={"ticket": f"#{i} the app {'crashes' if i % 2 else 'is fine'}"}) as r:
                    return r.status, await r.json()
            return await asyncio.gather(*(one(i) for i in range(64)))
    answers = asyncio.run(main())
    assert [status for status, _ in answers] == [200] * 64
    assert [body["output"] for _, body in answers] == ["Yes" if i % 2 else "No" for i in range(64)]
    assert fake_llm.max_in_flight <= 32


def test_serve_health_trace_and_bad_input(server):
    import urllib.error
    import urllib.request

    health = json.load(urllib.request.urlopen(server + "/health"))
    assert health["status"] == "ok" and health["inputs"] == ["ticket"] and health["output"] == "urgent"
    request = urllib.request.Request(server + "/?trace=1", data=b'{"ticket": "crash"}', method="POST")
    body = json.load(urllib.request.urlopen(request))
    assert body["output"] == "Yes" and set(body["trace"]["nodes"]) == {"notes", "urgent"}
    for payload, reason in ((b"not json", "not JSON"), (b"[1, 2]", "JSON object"), (b'{"tickt": 1}', "did you mean 'ticket'"),
                            (b"{}", "missing input"), (b"\xff\xfe", "not JSON"), (b"[" * 100_000, "nests too deeply")):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(server + "/", data=payload, method="POST"))
        assert caught.value.code == 400
        assert reason in json.load(caught.value)["error"]
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(server + "/", data=b'{"ticket": "' + b"x" * (2 << 20) + b'"}',
                                                      method="POST"))
    assert caught.value.code == 413
