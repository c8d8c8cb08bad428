"""Issue 43's reproducers for `--objective cost` (learning/pricing.py, records/costs.py, learning/gating.py): the
saving a run reports is measured on the samples both pipelines ran, a move chosen for cost is kept only when its
measured cost per sample falls, and a model that cannot answer is that move's rejection, not the run's end."""

from __future__ import annotations

import json

import pytest
from fake_server import HANG, FakeServer

from sembp_dsl import cli
from sembp_dsl.models import llm as llm_module
from sembp_dsl.records.runs import resolve

SHORT, LONG = "claim", " ".join(["word"] * 300)

ONE_NODE = """\
pipeline relay "Answer a claim"

input q: text

param a_task = "Read the claim."

node a: text { prompt = a_task  model = strong }

q -> a
output a
metric METRIC

model cheap     { name = "openai/cheap"   api_base = "CHEAP"   max_tokens = 64  input_price = PRICE  output_price = PRICE }
model strong    { name = "openai/strong"  api_base = "STRONG"  max_tokens = 64  input_price = 1  output_price = 1 }
model backward  { name = "openai/helper"  api_base = "STRONG"  max_tokens = 16 }
model optimizer { name = "openai/helper"  api_base = "STRONG"  max_tokens = 16 }

optimize { iterations = 1  models = [cheap, strong]  margin = 0.05 }
"""


def write(folder, text: str, rows: list[dict]) -> None:
    (folder / "p.sbp").write_text(text)
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


OPTIMIZE = ["optimize", "p.sbp", "--data", "data.jsonl", "--train-size", "4", "--val-size", "100"]
COST = ["--objective", "cost", "--gate-alpha", "0.1", "--strategies", "models"]


def short_right(messages: list) -> str:
    """Right on a short claim, wrong on a long one, whichever model answers: the gate's losses can only come from
    the short ones, so a gate that stops once settled may never run a long one."""
    return "No" if LONG in str(messages) else "Yes"


def test_a_saving_is_measured_on_the_samples_both_pipelines_ran(tmp_path, capsys, monkeypatch):
    """A model at 0.9x the price is a 10% saving: the gate ran the cheaper model on the short samples only, and the
    run compared that with the whole split's mean (long samples included), reporting a saving of most of the cost."""
    monkeypatch.chdir(tmp_path)
    rows = [{"q": f"{SHORT} {i}" if i % 2 else f"{LONG} {i}", "answer": "Yes"} for i in range(104)]
    with FakeServer(reply=short_right) as server:
        pipeline = ONE_NODE.replace("CHEAP", server.url).replace("STRONG", server.url)
        write(tmp_path, pipeline.replace("METRIC", "exact").replace("PRICE", "0.9"), rows)
        code = cli.main([*OPTIMIZE, *COST])
        out, err = capsys.readouterr()
    assert code == 0, err
    assert "model = cheap" in (tmp_path / "p.sbp").read_text()
    run = resolve("-1", tmp_path / ".sbpc/runs")
    (step,) = run.iterations
    assert step.accepted and step.per_1000 is not None and step.per_1000_before is not None
    assert step.per_1000 / step.per_1000_before == pytest.approx(0.9)
    assert step.per_1000_samples == len(step.costs) and set(step.costs) <= set(run.record.initial_costs)
    kept = run.record.cost_kept()
    assert kept is not None and kept.after / kept.before == pytest.approx(0.9)
    assert "(-10%)" in out  # the run's own line says the measured saving
    assert cli.main(["show", "-1"]) == 0
    shown = capsys.readouterr().out
    assert f"the pipeline per 1,000 samples: {kept.words()}" in shown and "(-10%)" in shown


def verbose(messages: list) -> str:
    return " ".join(["Let me think this through carefully, step by step."] * 6) + " The answer is 4."


def test_a_model_cheap_per_token_but_verbose_is_rejected_for_its_measured_cost(tmp_path, capsys, monkeypatch):
    """Half the price per token, ten times the words: as accurate, yet dearer per sample. Ranked by the list price
    of a nominal call and gated on accuracy alone it was accepted while costing more; now the gate passes it and
    its measured cost rejects it, saying both figures."""
    monkeypatch.chdir(tmp_path)
    rows = [{"q": f"{SHORT} {i}", "answer": "4"} for i in range(104)]
    with FakeServer(reply="4") as terse, FakeServer(reply=verbose) as wordy:
        pipeline = ONE_NODE.replace("CHEAP", wordy.url).replace("STRONG", terse.url)
        pipeline = pipeline.replace("node a: text", "node a: number").replace("METRIC", "numeric")
        write(tmp_path, pipeline.replace("PRICE", "0.5"), rows)
        before = (tmp_path / "p.sbp").read_text()
        code = cli.main([*OPTIMIZE, *COST])
        out, err = capsys.readouterr()
    assert code == 0, err
    assert (tmp_path / "p.sbp").read_text() == before
    run = resolve("-1", tmp_path / ".sbpc/runs")
    (step,) = run.iterations
    assert not step.accepted and step.gate is not None and step.gate.losses == []
    assert step.per_1000 is not None and step.per_1000_before is not None and step.per_1000 > step.per_1000_before
    assert step.note.startswith("the gate passed it, but its measured cost per sample does not fall: $")
    assert step.note in out and "passes" in out  # the accuracy test passed: the cost decided
    (move,) = [c for c in step.candidates if c.param == "a.model"]
    assert move.fate.startswith("rejected by the gate") and move.new == "cheap"


RELAY = """\
pipeline relay "Pass the answer along"

input q: text

param a_task = "Read the claim."
param b_task = "Restate it."

node a: text { prompt = a_task  model = strong }
node b: text { prompt = b_task  model = strong }

q -> a -> b
output b
metric exact

model dead      { name = "openai/gpt-4o-mini"     api_base = "DEAD"  max_tokens = 16 }
model fast      { name = "openai/gpt-3.5-turbo"   api_base = "GOOD"  max_tokens = 16 }
model strong    { name = "openai/gpt-4o"          api_base = "GOOD"  max_tokens = 16 }
model backward  { name = "openai/gpt-3.5-turbo"   api_base = "GOOD"  max_tokens = 16 }
model optimizer { name = "openai/gpt-3.5-turbo"   api_base = "GOOD"  max_tokens = 16 }

optimize { iterations = 4  models = [dead, fast, strong]  margin = 0.05 }
"""

ROWS = [{"q": f"claim {i}", "answer": "Yes"} for i in range(104)]


@pytest.mark.parametrize("fault", [500, 429, HANG, 404, 401])
def test_a_model_that_cannot_answer_is_its_moves_rejection_and_the_run_goes_on(tmp_path, capsys, monkeypatch, fault):
    """The cheapest model fails every call: its move was proposed first, lost every gate sample and stopped the
    run, and `--resume` proposed it again, for ever. Now that move is rejected with the cause, no move to that model
    is proposed again, and the run moves both nodes to the next cheaper model."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(llm_module, "BACKOFF", 0.01)
    with FakeServer(reply="Yes") as good, FakeServer(fault_rate=1.0, fault_kinds=[fault], hang_seconds=30) as dead:
        write(tmp_path, RELAY.replace("GOOD", good.url).replace("DEAD", dead.url), ROWS)
        code = cli.main([*OPTIMIZE, *COST, "--timeout", "0.5"])
        out, err = capsys.readouterr()
        dead_requests = dead.requests
    assert code == 0, err
    text = (tmp_path / "p.sbp").read_text()
    assert "node a: text { prompt = a_task  model = fast }" in text and "model = fast }" in text.split("node b")[1]
    run = resolve("-1", tmp_path / ".sbpc/runs")
    first, *rest = run.iterations
    cause = {500: "500 Internal Server Error", 429: "429 Too Many Requests", HANG: "Timeout"}.get(fault, str(fault))
    assert first.note.startswith("the model it moves to does not answer ('dead')") and cause in first.note
    (move,) = [c for c in first.candidates if c.new == "dead"]
    assert move.fate.startswith("rejected by the gate: the model it moves to does not answer")
    assert not first.accepted and all(c.new != "dead" for it in rest for c in it.candidates)
    assert [it.accepted for it in rest][:2] == [True, True]
    assert first.note in out
    assert dead_requests > 0


def test_the_pipelines_own_models_failing_still_stop_the_run_with_the_cause(tmp_path, capsys, monkeypatch):
    """The one server every model of the pipeline is on fails every call, while the cache holds the current
    pipeline's answers: the move's samples are lost at the node it moved, but the pipeline's own model does not
    answer either (asked past the cache), so this is no rejection of the move: the run stops with the cause and
    exits non-zero, as it did."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(llm_module, "BACKOFF", 0.01)
    on_train = ["--gate", "train", "--train-size", "100", "--val-size", "4"]
    with FakeServer(reply="Yes") as good:
        pipeline = RELAY.replace("GOOD", good.url).replace("DEAD", good.url)
        write(tmp_path, pipeline.replace("models = [dead, fast, strong]", "models = [fast, strong]"), ROWS)
        before = (tmp_path / "p.sbp").read_text()
        assert cli.main([*OPTIMIZE, *COST, *on_train, "--iters", "0"]) == 0  # the current answers, cached
        good.configure(fault_rate=1.0, fault_kinds=[500])
        code = cli.main([*OPTIMIZE, *COST, *on_train])
        out, err = capsys.readouterr()
    assert code != 0, out
    said = out + err
    assert "500 Internal Server Error" in said and "the model 'strong' the pipeline uses does not answer either" in said
    assert (tmp_path / "p.sbp").read_text() == before
    run = resolve("-1", tmp_path / ".sbpc/runs")
    assert not any(it.note.startswith("the model it moves to does not answer") for it in run.iterations)


def test_resume_after_a_model_that_cannot_answer_does_not_try_it_again(tmp_path, capsys, monkeypatch):
    """The issue's loop: the run stopped at the failing move, and `--resume` proposed the same move and stopped the
    same way, every time. Now the rejection is in the record, and a resumed run goes on from it: a budget stops the
    run in its second iteration, `--resume` finishes it, and no move to the failing model is proposed again."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(llm_module, "BACKOFF", 0.01)
    one_node = RELAY.replace("node b: text { prompt = b_task  model = strong }\n", "").replace("a -> b", "a")
    rows = [{"q": f"claim {i}", "answer": "Yes"} for i in range(104)]
    argv = [*OPTIMIZE, *COST, "--no-cache", "--runs-dir"]
    with FakeServer(reply="Yes") as good, FakeServer(fault_rate=1.0, fault_kinds=[500]) as dead:
        write(
            tmp_path, one_node.replace("output b", "output a").replace("GOOD", good.url).replace("DEAD", dead.url), rows
        )
        assert cli.main([*argv, "first", "--iters", "1"]) == 0, capsys.readouterr().err
        first = resolve("-1", tmp_path / "first").record.ledger["cost"]
        assert first > 0
        cli.main([*argv, "runs", "--iters", "3", "--max-cost", f"{first * 1.01:.10f}"])
        stopped = resolve("-1", tmp_path / "runs")
        assert not stopped.record.finished and len(stopped.iterations) == 1
        assert stopped.iterations[0].note.startswith("the model it moves to does not answer ('dead')")
        dead.reset()
        assert cli.main([*argv, "runs", "--iters", "3", "--resume"]) == 0, capsys.readouterr().err
        assert dead.requests == 0  # the resumed run never called it
    resumed = resolve("-1", tmp_path / "runs")
    assert resumed.record.finished and len(resumed.iterations) == 3
    assert all(c.new != "dead" for it in resumed.iterations[1:] for c in it.candidates)
    assert resumed.iterations[1].accepted and "model = fast" in (tmp_path / "p.sbp").read_text()
