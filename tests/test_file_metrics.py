"""Metrics declared in the file (issue 19): an LLM judge grades free text by a rubric, its reasons start the
backward pass and its calls are the ledger's and the plan's "judge"; scores between 0 and 1 flow through eval
and the gate; a metric that fails on a sample leaves that sample unscored, and the run goes on."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import Script, eval_samples

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.syntax.parser import parse
from sembp_dsl.language.syntax.yaml_form import parse_yaml
from sembp_dsl.learning.gate import Gate

ROOT = Path(__file__).resolve().parents[1]

SUPPORT = textwrap.dedent("""\
    pipeline support "Reply to a customer's support message"
    input message: text
    param needs_task = "Say what the customer needs."
    param reply_task = "Write a reply."
    frozen param rubric = "Full marks for a polite reply that gives {{ message }} a next step."
    template read = "{{ prompt }}\\nMessage: {{ message }}"
    template write = "{{ prompt }}\\nMessage: {{ message }}\\nNeeds: {{ needs }}"
    node needs: text { prompt = needs_task  template = read }
    node reply: text { prompt = reply_task  template = write }
    message -> needs
    message, needs -> reply
    output reply
    metric helpful { prompt = rubric  scale = 1..5 }
    """)

ROWS = [{"message": f"Help with problem {i}", "answer": f"Fix {i}, then write back."} for i in range(8)]
JUDGE_REASON = "It ignores the problem and gives no next step."


class Support(Script):
    """The forward model replies well once its instruction was improved; the judge gives 5 of 5 to a reply with
    a next step, 2 otherwise, with a reason (or what `verdict` says, for the failure tests)."""

    def __init__(self):
        super().__init__()
        self.verdict = lambda output: (
            {"reason": "Polite, with a next step.", "score": 5}
            if "next step" in output
            else {"reason": JUDGE_REASON, "score": 2}
        )

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        if not prompt.startswith("You grade one output"):
            if self.kind(prompt) == "forward" and "Needs:" in prompt:
                self.prompts.append(prompt)
                return "Here is a fix; the next step is to restart." if "Improved" in prompt else "Whatever."
            return super().__call__(messages)
        self.prompts.append(prompt)
        output = prompt.split("# Output to grade\n", 1)[1].split("\n", 1)[0]
        return json.dumps(self.verdict(output))

    def judged(self) -> list[str]:
        return [p for p in self.prompts if p.startswith("You grade one output")]


@pytest.fixture
def support(tmp_path, monkeypatch):
    from fake_server import FakeServer

    script = Support()
    with FakeServer(delay=0.0, reply=script) as server:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "support.sbp").write_text(
            SUPPORT + f'model {{ name = "openai/fake"  api_base = "{server.url}"  temperature = 0 }}\n'
        )
        (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
        yield tmp_path / "support.sbp", server, script


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exit:
            code = exit.code
    return code, out.getvalue(), err.getvalue()


# --- the language --------------------------------------------------------------------------------------------


def test_a_judge_and_a_function_parse_into_the_ir_and_the_yaml_twin_is_the_same():
    sbp_text = SUPPORT + 'metric overlap = "metrics:overlap"\nmetric overlap\n'
    pipeline = parse(sbp_text)
    judge, function = pipeline.metric_defs
    assert (judge.name, judge.kind, function.name, function.kind) == ("helpful", "judge", "overlap", "function")
    assert {s.key: s.value for s in judge.settings} == {"prompt": "rubric", "scale": "1..5"}
    assert function.function == "metrics:overlap" and [m.name for m in pipeline.metrics] == ["overlap"]
    yaml_text = textwrap.dedent("""\
        pipeline: support
        description: Reply to a customer's support message
        inputs: {message: text}
        params:
          needs_task: Say what the customer needs.
          reply_task: Write a reply.
          rubric: {text: "Full marks for a polite reply that gives {{ message }} a next step.", frozen: true}
        templates:
          read: "{{ prompt }}\\nMessage: {{ message }}"
          write: "{{ prompt }}\\nMessage: {{ message }}\\nNeeds: {{ needs }}"
        nodes:
          needs: {type: text, prompt: needs_task, template: read}
          reply: {type: text, prompt: reply_task, template: write}
        edges: ["message -> needs", "message, needs -> reply"]
        output: reply
        metric: overlap
        metrics:
          helpful: {prompt: rubric, scale: 1..5}
          overlap: "metrics:overlap"
        """)
    assert parse_yaml(yaml_text) == pipeline


def test_the_metric_scored_is_the_named_one_else_the_first_defined():
    graph = build(parse(SUPPORT))
    assert graph.metric == "helpful" and graph.metrics["helpful"].scale == (1.0, 5.0)
    assert graph.metrics["helpful"].model == "forward" and graph.trainable == ("needs_task", "reply_task")
    assert build(parse(SUPPORT + "metric exact\n")).metric == "exact"
    assert not build(parse(SUPPORT)).warnings  # the rubric counts as used, by the judge
    from sembp_dsl.language.tooling.emit import emit_prompts

    prompts = emit_prompts(graph)  # the judge's question, with placeholders, after the loss
    judged = prompts.split("=== helpful: judge (a record reply, {reason, score}) ===\n", 1)[1]
    assert judged.startswith("You grade one output") and "gives <message> a next step" in judged
    assert "# Output to grade\n<output of reply>" in judged and "from 1 (worst) to 5 (best)" in judged


def test_a_shipped_pipeline_compiles_unchanged_in_ir_when_it_defines_no_metric():
    """`metric exact` and no definitions: the IR has no metric_defs key, as before issue 19."""
    from sembp_dsl.language.graph.compile import compile_file
    from sembp_dsl.language.tooling.emit import emit_ir

    assert "metric_defs" not in emit_ir(compile_file(str(ROOT / "pipelines/liar.sbp")))
    assert '"metric_defs"' in emit_ir(compile_file(str(ROOT / "pipelines/replies.sbp")))


def test_fmt_keeps_a_judge_and_a_range_as_written(tmp_path):
    from sembp_dsl.language.tooling.fmt import format_text

    text = SUPPORT + 'metric overlap   =   "metrics:overlap"\n'
    out = format_text(text)
    assert "metric helpful { prompt = rubric  scale = 1..5 }" in out
    assert 'metric overlap = "metrics:overlap"' in out
    assert parse(out) == parse(text)


# --- a judge, end to end on the fake server --------------------------------------------------------------------


def test_a_judge_scores_free_text_on_its_scale_with_its_reason(support):
    path, _, script = support
    with sbp.load(path) as pipeline:
        evaluation = pipeline.evaluate("rows.jsonl", runs_dir=path.parent / "runs")
        ledger = pipeline.ledger
    assert evaluation.accuracy == pytest.approx(0.25)  # 2 on 1..5
    assert {r.reason for r in evaluation.results} == {JUDGE_REASON} and evaluation.correct == 0
    assert ledger.roles["judge"].calls == len(ROWS) and ledger.roles["forward"].calls == 2 * len(ROWS)
    asked = script.judged()[0]
    assert "Full marks for a polite reply that gives Help with problem" in asked  # the rubric, rendered
    assert "# Reference answer\nFix" in asked and "from 1 (worst) to 5 (best)" in asked
    assert re.search(r"^judge\s+8 ", ledger.render(), re.M), ledger.render()
    # the evaluation's record: each sample's reason and the judge's reply, its calls in the record's ledger
    record = json.loads((evaluation.record / "run.json").read_text())
    sample = eval_samples(evaluation.record / "run.json")[0]
    assert sample["reason"] == JUDGE_REASON and json.loads(sample["judge"]["reply"])["score"] == 2
    assert record["ledger"]["calls"] == 3 * len(ROWS)  # two nodes and the judge, per row
    code, out, _ = run("show", str(evaluation.record))
    assert code == 0 and f"why: {JUDGE_REASON}" in out and "the judge replied:" in out, out
    from sembp_dsl.records.report import sample_html

    page = sample_html(sample)  # the report's sample: the reason, then the judge beside each node
    assert f"<p>why: {JUDGE_REASON}</p>" in page and page.index("<h3>reply</h3>") < page.index("<h3>the judge</h3>")


def test_a_pipeline_with_a_judge_optimizes_end_to_end_and_learns_from_its_reasons(support):
    path, _, script = support
    with sbp.load(path) as pipeline:
        plan = pipeline.plan("rows.jsonl", iterations=1, train_size=4, val_size=4, test_size=0)
        found = pipeline.optimize(
            "rows.jsonl", iterations=1, train_size=4, val_size=4, test_size=0, runs_dir=path.parent / "runs"
        )
        ledger = pipeline.ledger
    [iteration] = found.outcome.iterations
    assert iteration.accepted and iteration.gate_before == pytest.approx(0.25) and iteration.gate_after == 1.0
    assert len(iteration.gate.wins) == 4 and not iteration.gate.losses
    backward = script.of_kind("backward")
    assert backward and all(f"The output scored 0.25 out of 1. {JUDGE_REASON}" in p for p in backward)
    assert all("A reference answer: Fix" in p for p in backward)
    assert ledger.roles["judge"].calls > 0
    # the plan counts the judge: one call per answer scored (4 initial gate, 4 training, 4 gate)
    assert plan.calls["judge"] == 12 and "judge" in plan.render()
    assert ledger.roles["judge"].calls <= plan.calls["judge"]
    record = json.loads((found.record / "run.json").read_text())
    assert record["ledger"]["roles"]["judge"]["calls"] == ledger.roles["judge"].calls


def test_a_judge_that_fails_on_a_sample_leaves_it_unscored_and_the_run_goes_on(support):
    path, _, script = support
    replies = iter(
        [{"reason": "fine", "score": 9}, "not json", {"reason": "ok", "score": 4}] + [{"reason": "ok", "score": 3}] * 5
    )
    script.verdict = lambda output: next(replies)
    with sbp.load(path) as pipeline:
        evaluation = pipeline.evaluate("rows.jsonl", limit=3)
    errors = sorted(r.metric_error or "" for r in evaluation.results)
    assert evaluation.scored == 1 and evaluation.accuracy == pytest.approx(0.75)
    assert errors[0] == "" and "judge 'helpful' gave 9, off its scale 1..5" in errors[1] + errors[2]
    assert "judge 'helpful': its reply could not be read (no JSON object in the reply)" in errors[1] + errors[2]
    assert evaluation.lost_causes() == {"metric failed": 2}


def test_sbpc_eval_and_optimize_take_metric_and_name_an_unknown_one(support):
    path, _, _ = support
    code, out, err = run("eval", str(path), "--data", "rows.jsonl", "--metric", "exact", "--json")
    assert code == 0 and json.loads(out)["metric"] == "exact" and json.loads(out)["accuracy"] == 0
    code, out, err = run("eval", str(path), "--data", "rows.jsonl", "--metric", "helpfull")
    assert code == 2 and "--metric: no metric 'helpfull'; did you mean 'helpful'?" in err, err
    code, out, err = run("eval", str(path), "--data", "rows.jsonl", "--errors", "1")
    assert code == 0 and "metric helpful" in out and f"why: {JUDGE_REASON}" in out, out
    sizes = ("--train-size", "4", "--val-size", "4", "--test-size", "0")
    code, out, err = run("optimize", str(path), "--data", "rows.jsonl", "--plan", "--iterations", "1", *sizes)
    assert code == 0 and re.search(r"^  judge\s+12 calls", out, re.M), out + err
    code, out, err = run("optimize", str(path), "--data", "rows.jsonl", "--plan", "--metric", "exact", *sizes)
    assert code == 0 and "judge" not in out, out + err


# --- Python metrics: partial credit, and failures of one sample --------------------------------------------------


def test_a_python_metric_that_raises_or_returns_out_of_range_fails_that_sample_only(support):
    path, _, _ = support

    def picky(prediction, example):
        if example["message"].endswith("0"):
            raise KeyError("score")
        return 1.5 if example["message"].endswith("1") else (0.5, "half of it")

    with sbp.load(path) as pipeline:
        evaluation = pipeline.evaluate("rows.jsonl", metric=picky)
    by_id = {r.sample.where.rsplit(":", 1)[-1]: r for r in evaluation.results}
    assert by_id["1"].metric_error == "metric failed: the metric 'picky' raised KeyError: 'score'"
    assert by_id["2"].metric_error == (
        "metric failed: the metric 'picky' returned 1.5; a metric returns a bool or a number from 0 to 1, "
        "or (score, reason)"
    )
    assert evaluation.scored == len(ROWS) - 2 and evaluation.accuracy == 0.5
    assert {r.reason for r in evaluation.results if not r.lost} == {"half of it"}


def test_a_python_metric_that_exits_hangs_or_returns_an_unprintable_value_leaves_that_sample_unscored(
    support, monkeypatch
):
    from sembp_dsl.runtime import evaluate

    path, _, _ = support
    monkeypatch.setattr(evaluate, "METRIC_TIMEOUT", 0.3)

    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    def unruly(prediction, example):
        last = example["message"][-1]
        if last == "0":
            sys.exit(3)
        if last == "1":
            time.sleep(5)
        return Unprintable() if last == "2" else True

    started = time.monotonic()
    with sbp.load(path) as pipeline:
        evaluation = pipeline.evaluate("rows.jsonl", metric=unruly)
    assert time.monotonic() - started < 4  # not behind the sleeping metric
    by_id = {r.sample.where.rsplit(":", 1)[-1]: r for r in evaluation.results}
    assert by_id["1"].metric_error == "metric failed: the metric 'unruly' raised SystemExit: 3"
    assert by_id["2"].metric_error == "metric failed: the metric 'unruly' took longer than its timeout of 0.3s"
    assert by_id["3"].metric_error.startswith("metric failed: the metric 'unruly' returned an Unprintable")
    assert evaluation.scored == len(ROWS) - 3 and evaluation.accuracy == 1.0


# --- scores between 0 and 1 at the gate ----------------------------------------------------------------------


def test_the_gate_counts_wins_and_losses_by_score_and_ties_are_not_counted():
    ids = [f"s{i}" for i in range(6)]
    before = {"s0": 0.5, "s1": 0.5, "s2": 0.25, "s3": 0.5}  # s4 right, s5 wrong
    gate = Gate(ids, {"s4"}, 1.0, random.Random(0), least=6, partial=before)
    assert gate.possible == (5, 5)  # s0-s3 can go either way, s4 can only lose, s5 only win
    after = {"s0": 0.75, "s1": 0.5, "s2": 0.0, "s3": 1.0, "s4": 1.0, "s5": 0.0}

    def play(batch: list[str]) -> None:
        gate.add(batch, {i for i in batch if after[i] == 1.0}, set(), {i: after[i] for i in batch if after[i] < 1})

    play(gate.next_round().proposal)  # the whole split in one round: every outcome counted
    assert sorted(gate.wins) == ["s0", "s3"] and gate.losses == ["s2"]  # s1, s4, s5 tie
    assert gate.decision is True and gate.to_json()["partial"] == {"s0": 0.75, "s1": 0.5}  # the next baseline


# --- a Python function the file names ------------------------------------------------------------------------

METRICS_PY = """\
from pathlib import Path

Path(__file__).with_name("imported.marker").write_text("imported")


def overlap(prediction, example):
    want = set(example["answer"].lower().split())
    got = set((prediction.text or "").lower().split())
    share = len(want & got) / len(want)
    return share, f"uses {share:.0%} of the reference's words"


def loud(prediction, example):
    raise RuntimeError("boom")


def lenient(prediction, example):
    return 2
"""
FUNCTIONS = """\
metric overlap = "metrics:overlap"
metric loud = "metrics:loud"
metric lenient = "metrics:lenient"
metric gone = "nowhere:overlap"
"""


@pytest.fixture
def functions(support):
    path, server, script = support
    (path.parent / "metrics.py").write_text(METRICS_PY)
    path.write_text(path.read_text() + FUNCTIONS)
    rows = [{"message": f"m{i}", "answer": "Whatever. Fix it."} for i in range(4)]  # the reply has 1 of 3 words
    (path.parent / "partial.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, path.parent / "imported.marker"


def test_check_and_load_never_import_a_function_metric(functions):
    path, marker = functions
    code, out, err = run("check", str(path))
    assert code == 0 and not marker.exists(), err
    with sbp.load(path) as pipeline:
        assert pipeline.graph.metrics["overlap"].function == "metrics:overlap"
    assert not marker.exists()  # loading scores nothing: nothing is imported


def test_a_function_metric_named_in_the_file_scores_partial_credit_with_its_reason(functions):
    path, marker = functions
    code, out, err = run("eval", str(path), "--data", "partial.jsonl", "--metric", "overlap", "--json")
    report = json.loads(out)
    assert code == 0 and report["accuracy"] == pytest.approx(1 / 3) and report["correct"] == 0, err
    assert marker.exists()  # imported once a run scored with it
    with sbp.load(path) as pipeline:
        found = pipeline.optimize(
            "partial.jsonl", metric="overlap", iterations=1, train_size=2, val_size=2, test_size=0, gate="none"
        )
    [gradients] = found.outcome.iterations[0].gradients[:1]
    assert "The output scored 0.33 out of 1. uses 33% of the reference's words" in gradients.nodes["reply"]


def test_a_function_metric_that_raises_or_returns_out_of_range_fails_each_sample_not_the_run(functions):
    path, _ = functions
    for name, why in (("loud", "raised RuntimeError: boom"), ("lenient", "returned 2")):
        code, out, err = run("eval", str(path), "--data", "partial.jsonl", "--metric", name, "--errors", "1")
        assert code == 1 and "metric failed x4" in out and f"the metric '{name}' {why}" in out, out + err
        assert "Traceback" not in err


def test_an_async_function_metric_is_refused_by_check_saying_why(functions):
    """It ended eval in "this is a bug in sbpc", whose own message said what was wrong."""
    path, marker = functions
    with sbp.load(path) as pipeline:  # one handed over in Python: refused before any call, saying why

        async def waiting(prediction, example):
            return 1.0

        with pytest.raises(sbp.SbpcError, match="the metric 'waiting' is async; a metric is a plain function"):
            pipeline.evaluate("partial.jsonl", metric=waiting)
    with open(path.parent / "metrics.py", "a") as file:
        file.write("\n\nasync def waiting(prediction, example):\n    return 1.0\n")
    path.write_text(path.read_text() + 'metric waiting = "metrics:waiting"\n')
    code, out, err = run("check", str(path))
    assert code == 1 and not marker.exists(), out + err
    assert "error[E150]: metric 'waiting' is an async function" in out + err, out + err
    code, out, err = run("eval", str(path), "--data", "partial.jsonl", "--metric", "waiting")
    assert code == 1 and "E150" in err and "bug in sbpc" not in out + err and "Traceback" not in err, out + err


def test_a_function_metric_from_a_module_not_beside_the_pipeline_is_refused(functions):
    path, _ = functions
    code, out, err = run("eval", str(path), "--data", "partial.jsonl", "--metric", "gone")
    assert code == 1 and "module 'nowhere' is not beside the pipeline" in err and "--allow-module" in err, err
    assert "Traceback" not in err
