"""`eval --batch` / `evaluate(batch=True)`: the calls go through OpenAI's batch API (tests/fake_batch.py serves it on
loopback, answering each line as the chat server would), round by round, at the batch price, resumable after a
kill without a second batch; what the batch API does wrong is each sample's error, or the run's, with its cause."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ECHO, TRIAGE, wait_until
from fake_batch import FakeBatchServer

import sembp_dsl as sbp
from sembp_dsl.models import prices

MODEL = "openai/gpt-4o-mini"  # priced in litellm's table, with batch prices: the fake server answers it by name


def pipeline_at(folder: Path, source: str, url: str, name: str = "p.sbp") -> Path:
    path = folder / name
    path.write_text(source + f'\nmodel {{ name = "{MODEL}"  api_base = "{url}"  temperature = 0 }}\n')
    return path


def rows(folder: Path, count: int, answer=lambda i: "No") -> Path:
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps({"ticket": f"ticket {i}", "answer": answer(i)}) + "\n" for i in range(count)))
    return path


def topics(folder: Path, count: int) -> Path:
    path = folder / "topics.jsonl"
    path.write_text("".join(json.dumps({"topic": f"topic {i}", "answer": "Some notes."}) + "\n" for i in range(count)))
    return path


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setenv("SBPC_BATCH_POLL", "0.05")


def reply(messages) -> str:
    return "No" if "Answer Yes or No" in messages[-1]["content"] else "Some notes."


@pytest.mark.slow  # 30 s: a thousand samples through the whole path
def test_a_thousand_rows_finish_one_batch_a_round_at_the_batch_price(tmp_path):
    with FakeBatchServer(reply=reply) as server:
        heard: list[str] = []
        with sbp.load(pipeline_at(tmp_path, TRIAGE, server.url)) as triage:
            evaluation = triage.evaluate(
                str(rows(tmp_path, 1000)), runs_dir=tmp_path / "runs", batch=sbp.Batch(progress=heard.append)
            )
            ledger = triage.ledger
        assert evaluation.scored == 1000 and evaluation.accuracy == 1.0
        # two steps (notes, then urgent): two rounds, one batch each, every request a line of one
        assert server.batches_created == 2 and server.requests == 2000
        assert [b["request_counts"]["total"] for b in server.batches.values()] == [1000, 1000]
        assert any("completed, 1000 done, 0 failed" in line for line in heard)
    usage = ledger.roles["forward"]
    batch_price = prices.batch_cost(MODEL, usage.prompt_tokens, usage.completion_tokens)
    assert batch_price is not None and usage.cost == pytest.approx(batch_price)
    assert usage.cost == pytest.approx(prices.cost(MODEL, usage.prompt_tokens, usage.completion_tokens) / 2)
    assert ledger.counters["calls priced at batch rates"] == 2000
    record = json.loads((evaluation.record / "run.json").read_text())
    assert record["finished"] and record["ledger"]["cost"] == pytest.approx(batch_price)
    assert record["evaluation"]["batch"]["price"] == "batch"
    assert [b["status"] for b in record["evaluation"]["batch"]["batches"]] == ["completed", "completed"]
    shown = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "show", str(evaluation.record)], capture_output=True, text=True
    )
    assert f"2000 calls, {usage.prompt_tokens + usage.completion_tokens} tokens, $" in shown.stdout
    assert "at batch prices (2 batches)" in shown.stdout
    # the ids kept beside the record are the server's own batches
    kept = json.loads((evaluation.record / "batch.json").read_text())["batches"]
    assert [b["id"] for b in kept] == list(server.batches)


def test_the_same_eval_costs_the_batch_price_only_with_batch(tmp_path):
    with FakeBatchServer(reply=reply) as server:
        costs = []
        for batch in (False, True):
            with sbp.load(pipeline_at(tmp_path, TRIAGE, server.url), cache=False) as triage:
                triage.evaluate(str(rows(tmp_path, 20)), batch=batch)
                costs.append(triage.ledger.cost)
        assert server.batches_created == 2  # the first eval sent its calls at once
    assert costs[1] == pytest.approx(costs[0] / 2)  # gpt-4o-mini's batch prices are half its prices


def sbpc_process(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "SBPC_BATCH_POLL": "0.05"}
    return subprocess.Popen(
        [sys.executable, "-m", "sembp_dsl.cli", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.mark.slow  # 35 s: two processes that import litellm
def test_a_kill_while_waiting_then_resume_finishes_with_the_same_batch(tmp_path):
    with FakeBatchServer(hold=True, reply=reply) as server:
        path = pipeline_at(tmp_path, ECHO, server.url)
        data = topics(tmp_path, 30)
        killed = sbpc_process("eval", str(path), "--data", str(data), "--batch", cwd=tmp_path)
        try:
            wait_until(lambda: server.retrievals >= 3, within=120)  # created, and being waited on
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.wait()
        (folder,) = (tmp_path / ".sbpc" / "runs").iterdir()
        assert [b["id"] for b in json.loads((folder / "batch.json").read_text())["batches"]] == list(server.batches)
        server.hold = False
        resumed = sbpc_process("eval", str(path), "--data", str(data), "--batch", "--resume", cwd=tmp_path)
        out, err = (text.decode() for text in resumed.communicate(timeout=300))
        assert resumed.returncode == 0, err
        assert server.batches_created == 1 and server.uploads == 1 and server.requests == 30
    assert "accuracy 1.000 (30/30)" in out
    assert [p.name for p in (tmp_path / ".sbpc" / "runs").iterdir()] == [folder.name]  # the record the kill left
    assert json.loads((folder / "run.json").read_text())["finished"]


@pytest.mark.slow  # 35 s: two processes that import litellm
def test_a_kill_in_the_second_round_resumes_with_both_batches(tmp_path):
    with FakeBatchServer(hold=1, reply=reply) as server:  # the first batch runs, the second waits
        path = pipeline_at(tmp_path, TRIAGE, server.url)
        data = rows(tmp_path, 12)
        killed = sbpc_process("eval", str(path), "--data", str(data), "--batch", cwd=tmp_path)
        try:
            wait_until(lambda: server.batches_created == 2 and server.retrievals >= 5, within=120)
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.wait()
        server.hold = False
        resumed = sbpc_process("eval", str(path), "--data", str(data), "--batch", "--resume", cwd=tmp_path)
        out, err = (text.decode() for text in resumed.communicate(timeout=300))
        assert resumed.returncode == 0, err
        # the notes came from the first batch again (downloaded, not sent), the verdicts from the second
        assert server.batches_created == 2 and server.uploads == 2 and server.requests == 24
    assert "accuracy 1.000 (12/12)" in out and "batches sent" not in err


def test_resume_needs_an_unfinished_evaluation_asked_the_same(tmp_path, fake_llm):
    path = pipeline_at(tmp_path, ECHO, fake_llm.url)
    data = topics(tmp_path, 3)
    nothing = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "eval", str(path), "--data", str(data), "--batch", "--resume"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert nothing.returncode == 2 and "--resume: no unfinished evaluation of" in nothing.stderr, nothing.stderr
    assert fake_llm.requests == 0


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("anthropic/claude-3-5-haiku-20241022", "the provider 'anthropic'"),
        ("embedded/smollm2-135m", "runs in this process: it has no batch API"),
    ],
)
def test_a_model_without_a_batch_api_is_refused_before_any_call(tmp_path, fake_llm, model, said):
    path = tmp_path / "p.sbp"
    path.write_text(ECHO + f'\nmodel {{ name = "{model}" }}\n')
    ran = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "eval", str(path), "--data", str(topics(tmp_path, 3)), "--batch"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ran.returncode == 1
    assert f"the forward model '{model}' " in ran.stderr and said in ran.stderr
    assert "--batch sends OpenAI's batch API" in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / ".sbpc" / "runs").exists()  # refused before a record was begun


def test_the_python_api_names_its_option_in_the_refusal(tmp_path):
    path = tmp_path / "p.sbp"
    path.write_text(ECHO + '\nmodel { name = "anthropic/claude-3-5-haiku-20241022" }\n')
    with sbp.load(path) as echo, pytest.raises(sbp.LLMError, match=r"batch=True sends OpenAI's batch API"):
        echo.evaluate([{"topic": "x", "answer": "y"}], batch=True)


def test_a_failed_batch_stops_the_eval_with_the_providers_reasons(tmp_path):
    with FakeBatchServer(fail="The model 'gpt-4o-mini' is not available for batches") as server:
        with sbp.load(pipeline_at(tmp_path, ECHO, server.url)) as echo:
            with pytest.raises(sbp.BatchFailed, match=r"line 1: The model 'gpt-4o-mini' is not available"):
                echo.evaluate(str(topics(tmp_path, 5)), batch=True)
        assert server.batches_created == 1 and server.requests == 0


def test_a_failed_batch_is_an_error_on_the_command_line(tmp_path):
    with FakeBatchServer(fail="invalid input file") as server:
        path = pipeline_at(tmp_path, ECHO, server.url)
        ran = subprocess.run(
            [sys.executable, "-m", "sembp_dsl.cli", "eval", str(path), "--data", str(topics(tmp_path, 4)), "--batch"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "SBPC_BATCH_POLL": "0.05"},
        )
    assert ran.returncode == 1 and "failed: line 1: invalid input file; none of its requests ran" in ran.stderr
    assert "accuracy" not in ran.stdout


def test_an_expired_batch_keeps_what_ran_and_loses_the_rest_with_the_cause(tmp_path):
    with FakeBatchServer(expire=True, reply=reply) as server:
        with sbp.load(pipeline_at(tmp_path, ECHO, server.url)) as echo:
            evaluation = echo.evaluate(str(topics(tmp_path, 10)), batch=True)
        assert server.requests == 5
    assert evaluation.scored == 5 and evaluation.accuracy == 1.0
    assert evaluation.lost_causes() == {"batch expired": 5}
    assert all("This request could not be executed" in (r.trace.final.error or "") for r in evaluation.lost)


def test_lines_missing_or_unreadable_in_the_output_are_their_samples_errors(tmp_path):
    with FakeBatchServer(malformed=2, dropped=1, reply=reply) as server:
        with sbp.load(pipeline_at(tmp_path, ECHO, server.url)) as echo:
            evaluation = echo.evaluate(str(topics(tmp_path, 10)), batch=True)
            ledger = echo.ledger
        assert server.requests == 10
    assert evaluation.scored == 7 and evaluation.requested == 10 and len(evaluation.results) == 10
    assert evaluation.lost_causes() == {"missing from the batch output": 3}
    errors = [r.trace.final.error or "" for r in evaluation.lost]
    assert all("has no line for this request; 2 of its lines could not be read" in e for e in errors)
    assert "not JSON" in errors[0]
    assert ledger.counters["batch output lines that could not be read"] == 2


def test_a_failed_request_in_the_batch_is_its_samples_error_and_not_sent_again(tmp_path):
    with FakeBatchServer(failures=[400], reply=reply) as server:
        with sbp.load(pipeline_at(tmp_path, ECHO, server.url)) as echo:
            evaluation = echo.evaluate(str(topics(tmp_path, 4)), batch=True)
        assert server.batches_created == 1 and server.requests == 4
    assert evaluation.scored == 3 and evaluation.lost_causes() == {"400 Bad Request": 1}
    assert "scripted failure 400" in (evaluation.lost[0].trace.final.error or "")


def test_the_shipped_pipeline_on_the_embedded_model_is_refused_without_loading_it(tmp_path):
    from sembp_dsl.models import embedded

    if not embedded.available():
        pytest.skip("the embedded model is not installed: its refusal is the parametrized test's")
    liar = Path(__file__).resolve().parents[1] / "pipelines" / "liar.sbp"
    ran = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "eval", str(liar), "--data", "liar", "--limit", "2", "--batch"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert f"the forward model '{embedded.MODEL}' runs in this process: it has no batch API" in ran.stderr
    assert "--batch sends OpenAI's batch API" in ran.stderr and ran.stdout == ""
