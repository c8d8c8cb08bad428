"""The Python API (issue 9): every line of the README's example against the fake model, and `sbpc serve`
with real HTTP clients."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import pytest
from conftest import TRIAGE as TRIAGE_TEXT
from conftest import wait_until

import sembp_dsl as sbp

TRIAGE = TRIAGE_TEXT + "optimize { errors_per_gradient = 2 }\n"


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
    assert set(sbp.__all__) == {
        "BadReply",
        "BadScalar",
        "Batch",
        "BatchFailed",
        "BlockStringError",
        "BudgetExceeded",
        "CacheError",
        "CallError",
        "CallFailed",
        "CodeError",
        "CompareError",
        "Data",
        "DataError",
        "DemosError",
        "Evaluation",
        "FormatError",
        "InputError",
        "LLMError",
        "Method",
        "MetricFailed",
        "NoConnection",
        "Optimized",
        "OptionError",
        "Overran",
        "Pipeline",
        "PipelineClosed",
        "PipelineError",
        "PlainHttp",
        "Prediction",
        "RecordError",
        "RenameError",
        "RenderError",
        "ResumeError",
        "RouterConfigError",
        "RunsError",
        "SbpcError",
        "ServeError",
        "ServerStopped",
        "SettingError",
        "SettingTypeError",
        "TelemetryError",
        "TemplateProblem",
        "ToolFailed",
        "Usage",
        "UsageError",
        "WriteBackError",
        "load",
    }
    assert all(getattr(sbp, name) is not None for name in sbp.__all__)
    assert (Path(sbp.__file__).parent / "py.typed").exists()
    with pytest.raises(AttributeError):
        sbp.compile_file  # noqa: B018 (internals stay internal)


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


def test_aevaluate_takes_what_evaluate_takes(triage, tmp_path):
    """Rows as dicts or a data set, the same arguments: not the internal samples it used to want."""
    rows = [{"ticket": "the app crashes", "answer": "Yes"}, {"ticket": "a typo", "answer": "No"}]
    assert asyncio.run(triage.aevaluate(rows, "exact")).accuracy == triage.evaluate(rows, "exact").accuracy == 1.0
    data = tmp_path / "tickets.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    seen = []
    evaluation = asyncio.run(triage.aevaluate(sbp.Data(str(data)), limit=1, on_done=seen.append))
    assert len(evaluation.results) == 1 and seen == list(evaluation.results)
    with pytest.raises(TypeError, match="test_size cuts a data set"):
        asyncio.run(triage.aevaluate(rows, test_size=1))
    with pytest.raises(TypeError, match="unknown split setting 'iterations'"):
        triage.evaluate(str(data), iterations=3)


def test_sync_and_async_pairs_take_the_same_arguments():
    import inspect

    pairs = [("__call__", "acall"), ("batch", "abatch"), ("evaluate", "aevaluate"), ("optimize", "aoptimize")]
    for sync, asynchronous in pairs:
        one, other = (inspect.signature(getattr(sbp.Pipeline, name)) for name in (sync, asynchronous))
        assert one == other, (sync, asynchronous)
        assert inspect.iscoroutinefunction(getattr(sbp.Pipeline, asynchronous))


def test_aoptimize_runs_on_the_callers_loop_and_write_takes_a_path(triage, script, tmp_path):
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else urgent_when_crash(prompt)
    script.improve = lambda param, prompt: f"Improved {param}: Answer Yes or No."
    examples = [{**row, "answer": "Yes"} for row in tickets(6)]
    before = Path(triage.path).read_text()

    async def main():
        found = await triage.aoptimize(
            examples, examples, iterations=1, gate_alpha=1, runs_dir=tmp_path / "runs", write=tmp_path / "out.sbp"
        )
        await triage.aclose()
        return found

    found = asyncio.run(main())
    assert found.outcome.iterations[0].accepted and found.written == tmp_path / "out.sbp"
    assert "Improved" in (tmp_path / "out.sbp").read_text() and Path(triage.path).read_text() == before


def test_every_public_name_is_documented():
    """A Pipeline's public methods and attributes, and the package's names, are on docs/python.md."""
    import re

    docs = (Path(__file__).resolve().parents[1] / "docs" / "python.md").read_text()
    named = set(re.findall(r"`(?:[\w.]*\.)?(\w+)[(`]", docs))
    public = {name for name in dir(sbp.Pipeline) if not name.startswith("_")}
    assert public - named == set(), public - named
    assert set(sbp.__all__) - named == set()
    assert "graph" in named  # the one public attribute an instance sets


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

    [result] = triage.evaluate([{"ticket": "crash", "answer": "Yes"}], metric=shout).results
    assert result.lost and result.metric_error == (
        "metric failed: the metric 'shout' returned 'yes'; a metric returns a bool or a number from 0 to 1, "
        "or (score, reason)"
    )


def test_examples_without_an_answer_are_refused_before_any_call(triage, fake_llm):
    with pytest.raises(sbp.DataError, match="example:2 has no expected output"):
        triage.evaluate([{"ticket": "a", "label": "Yes"}, {"ticket": "b"}])
    assert fake_llm.requests == 0


def test_evaluate_a_data_file_by_path(triage, tmp_path):
    data = tmp_path / "tickets.jsonl"
    data.write_text("".join(json.dumps({**row, "label": "Yes"}) + "\n" for row in tickets(6)))
    report = triage.evaluate(str(data), train_size=0, val_size=0, test_size=6)
    assert len(report.results) == 6 and report.accuracy == pytest.approx(2 / 6)


def test_evaluate_a_file_draws_only_the_rows_it_scores_or_must_skip(triage, tmp_path):
    data = tmp_path / "tickets.jsonl"
    data.write_text("".join(json.dumps({**row, "label": "Yes"}) + "\n" for row in tickets(5)))
    train = triage.evaluate(str(data), split="train", train_size=3)  # no val or test rows are needed for it
    assert [r.sample.id for r in train.results] == [
        s.id for s in sbp.runtime.datasets.make_splits(sbp.runtime.datasets.load(str(data)), 3, 0, 0, seed=0).train
    ]
    with pytest.raises(
        sbp.DataError,
        match="the test split comes after the 20 train and 20 val samples `optimize` "
        "draws by default.*or train_size=0, val_size=0 if you do not optimize",
    ):
        triage.evaluate(str(data), test_size=2)  # 45 rows: test sits behind the rows optimize would use
    assert len(triage.evaluate(str(data), train_size=0, val_size=0, test_size=2).results) == 2
    with pytest.raises(ValueError, match="split must be train, val or test, got 'tset'; did you mean 'test'"):
        triage.evaluate(str(data), split="tset")


def test_optimize_then_save_writes_back_like_the_cli(triage, script, tmp_path):
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else urgent_when_crash(prompt)
    script.improve = lambda param, prompt: f"Improved {param}: Answer Yes or No."
    examples = [{**row, "answer": "Yes"} for row in tickets(12)]
    path = Path(triage.path)
    before = path.read_text()
    outcome = triage.optimize(
        examples[:6], examples[6:], iterations=1, gate_alpha=1, only=["decide"], runs_dir=tmp_path / "runs"
    )
    assert outcome.outcome.iterations[0].accepted
    assert (
        outcome.pipeline.prompts["decide"].startswith("Improved")
        and triage.prompts["decide"] == "Is the ticket urgent? Answer Yes or No."
    )
    assert path.read_text() == before  # nothing is written until save()
    assert "+param decide" in outcome.diff
    assert outcome.pipeline.save() == path
    assert 'param decide = "Improved decide: Answer Yes or No."' in path.read_text()
    record = json.loads((outcome.record / "run.json").read_text())
    assert record["settings"]["data"] == "examples" and record["iterations"][0]["accepted"]
    # the result objects read as what they say, not as a page of nested dataclasses
    iteration = outcome.outcome.iterations[0]
    assert repr(outcome) == f"<Optimized triage: 1 prompt(s) changed (decide); run record {outcome.record}>"
    assert repr(iteration).startswith("<Iteration 1: accepted, 1 candidate, gate <GateDecision: ")
    assert re.fullmatch(r"<GateDecision: \d+ wins?, 0 losses, p = [\d.]+ \(gate_alpha 1\)[^<>]*>", repr(iteration.gate))
    evaluation = triage.evaluate(examples[:2])
    assert re.fullmatch(r"<Evaluation: accuracy [\d.]+ \(\d/2\) of 2 samples>", repr(evaluation))
    assert repr(evaluation.results[0]).startswith(f"<Result {evaluation.results[0].sample.id}: score ")
    assert re.fullmatch(r"<Prediction output '(Yes|No)'; \d calls, \$[\d.]+>", repr(triage(**tickets(1)[0])))


def test_optimize_rejects_what_cannot_run(triage):
    examples = [{**row, "answer": "Yes"} for row in tickets(4)]
    with pytest.raises(ValueError, match="gate split"):
        triage.optimize(examples)
    with pytest.raises(ValueError, match="did you mean 'decide'"):
        triage.optimize(examples, examples, only=["decid"])
    with pytest.raises(TypeError, match="did you mean 'iterations'"):
        triage.optimize(examples, examples, iters=2)


def test_method_settings_are_checked_like_the_optimize_block(triage, fake_llm, tmp_path):
    examples = [{**row, "answer": "Yes"} for row in tickets(4)]
    refused = [
        (dict(gradient="sideways"), ValueError, "gradient='sideways' is not one of sibling, no_sibling, none"),
        (dict(update="zz"), ValueError, "update='zz' is not one of full, sample"),
        (dict(gate="vali"), ValueError, "gate='vali' is not one of"),
        (dict(gate_alpha=5), ValueError, "gate_alpha=5 is out of range"),
        (dict(gate_alpha=0), ValueError, "gate_alpha=0 is out of range"),
        (dict(errors_per_gradient=0), ValueError, "errors_per_gradient=0 is out of range"),
        (dict(iterations=-1), ValueError, "iterations=-1 is out of range"),
        (dict(iterations=1.5), TypeError, "iterations must be a whole number, got 1.5"),
        (dict(seed="a"), TypeError, "seed must be a whole number"),
    ]
    for method, error, message in refused:
        with pytest.raises(error, match=re.escape(message)):
            triage.optimize(examples, examples, runs_dir=tmp_path / "runs", **method)
    with pytest.raises(ValueError, match="train is empty"):
        triage.optimize([], examples, iterations=1, runs_dir=tmp_path / "runs")
    assert fake_llm.requests == 0 and not (tmp_path / "runs").exists()
    assert triage.method(only="decide", gradient="no-sibling").only == ("decide",)  # one name, not its letters


def test_examples_may_mix_samples_and_dicts(triage):
    from sembp_dsl.runtime.datasets import Sample

    train = [Sample("mine/0", {"ticket": "it crashes"}, "Yes"), {"ticket": "looks odd", "answer": "No"}]
    assert triage.plan(train, train, iterations=1).render().startswith("plan: at most")


def test_batch_concurrency_must_be_a_positive_count(triage, fake_llm):
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="concurrency must be a whole number of at least 1"):
            triage.batch(tickets(2), concurrency=bad)
    assert fake_llm.requests == 0


def test_an_input_json_cannot_hold_is_named_before_any_call(triage, fake_llm):
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    for bad, reason in (
        (b"\xff", "bytes is not JSON serializable"),
        ({1, 2}, "set is not JSON serializable"),
        ({(1, 2): "x"}, "keys must be"),
        (deep, "it nests too deeply"),
    ):
        with pytest.raises(ValueError, match=f"input 'ticket' cannot be sent as text or JSON: .*{reason}"):
            triage(ticket=bad)
    with pytest.raises(ValueError, match=r"input 'ticket' holds a lone surrogate \('\\ud800'\)"):
        triage(ticket={"text": "\ud800"})
    assert fake_llm.requests == 0


def test_a_metric_that_raises_or_is_async_is_named(triage):
    examples = [{"ticket": "crash", "answer": "Yes"}, {"ticket": "fine", "answer": "No"}]

    def picky(prediction, example):
        return example["score"]

    report = triage.evaluate(examples, metric=picky)  # each example unscored, with why; the evaluation goes on
    assert report.scored == 0 and report.lost_causes() == {"metric failed": 2}
    assert report.results[0].metric_error == "metric failed: the metric 'picky' raised KeyError: 'score'"

    async def later(prediction, example):
        return True

    with pytest.raises(TypeError, match="the metric 'later' is async"):
        triage.evaluate(examples, metric=later)
    with pytest.raises(ValueError, match="limit must be 0 or more"):
        triage.evaluate(examples, limit=-1)


def test_with_prompts_refuses_unknown_params_and_non_text(triage):
    with pytest.raises(ValueError, match="no param 'decid'; did you mean 'decide'"):
        triage.with_prompts({"decid": "x"})
    with pytest.raises(TypeError, match="param 'decide' must be text, got NoneType"):
        triage.with_prompts({"decide": None})


def test_sync_calls_from_several_threads_each_run_on_their_own_loop(triage):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: triage(ticket=f"#{i} it crashes").output, range(8)))
    assert answers == ["Yes"] * 8


def test_a_loop_that_ended_leaves_no_llm_layer_behind(triage):
    for i in range(5):
        assert asyncio.run(triage.acall(ticket=f"#{i} it crashes")).output == "Yes"
    assert len(triage._session.llms) <= 1  # the last loop's, not one per asyncio.run


def test_after_ctrl_c_in_batch_the_rows_left_make_no_call(triage, fake_llm):
    fake_llm.configure(delay=0.05)

    def stop(prediction):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        triage.batch(tickets(20), concurrency=2, on_done=stop)
    wait_until(lambda: fake_llm.in_flight == 0, within=5)  # the calls cut short have left the server
    made = fake_llm.requests
    # the rows left behind could only run on this thread's loop, during the next call: none is waiting there
    loop = triage._session.loops[threading.get_ident()]
    assert not [task for task in asyncio.all_tasks(loop) if not task.done()]
    assert triage(ticket="it crashes").output == "Yes"
    assert fake_llm.requests == made + 2  # this call's two, not the 18 rows left behind


def test_a_closed_pipeline_refuses_every_call_and_opens_nothing(tmp_path, fake_llm, script):
    script.verdict = urgent_when_crash
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url) as triage:
        assert triage(ticket="it crashes").output == "Yes"
    twin = triage.with_prompts({"decide": "Urgent? Yes or No."})
    triage.close()  # a second close is fine
    made, examples = fake_llm.requests, [{"ticket": "it crashes", "answer": "Yes"}] * 2
    calls = {
        "call": lambda: triage(ticket="x"),
        "twin": lambda: twin(ticket="x"),
        "acall": lambda: asyncio.run(triage.acall(ticket="x")),
        "batch": lambda: triage.batch([{"ticket": "x"}]),
        "abatch": lambda: asyncio.run(triage.abatch([{"ticket": "x"}])),
        "evaluate": lambda: triage.evaluate(examples),
        "aevaluate": lambda: asyncio.run(triage.aevaluate(examples, "exact")),
        "aoptimize": lambda: asyncio.run(triage.aoptimize(examples, examples, runs_dir=tmp_path / "runs")),
        "optimize": lambda: triage.optimize(examples, examples, runs_dir=tmp_path / "runs"),
    }
    for call in calls.values():
        with pytest.raises(RuntimeError, match=r"this pipeline is closed \(close\(\) was called"):
            call()
    assert fake_llm.requests == made and not (tmp_path / "runs").exists()
    assert triage.ledger.calls == made and triage.prompts["decide"]  # what it is and what it spent stay readable


def test_errors_name_the_apis_parameters_and_keep_the_flags_for_the_cli(triage, tmp_path, fake_llm):
    from sembp_dsl.records.record import RunRecord, RunSettings

    examples = [{"ticket": "it crashes", "answer": "Yes"}] * 2
    (tmp_path / "runs").write_text("")
    errors = []
    with pytest.raises(ValueError, match="^runs_dir='.*runs' is a file, not a folder") as err:
        triage.optimize(examples, examples, runs_dir=tmp_path / "runs")
    assert err.value.cli.startswith(f"--runs-dir {tmp_path / 'runs'} is a file, not a folder")
    errors.append(err.value)
    with pytest.raises(ValueError, match=f"^'{re.escape(str(tmp_path))}' is a folder; give the name of a file") as err:
        triage.optimize(examples, examples, runs_dir=tmp_path / "records", write=tmp_path)
    assert err.value.cli.startswith(f"--out {tmp_path} is a folder")
    errors.append(err.value)
    with pytest.raises(sbp.DataError, match=r"map it with mapping=\{'ticket': 'FIELD'\}$") as err:
        triage.evaluate([{"text": "it crashes", "answer": "Yes"}])
    assert err.value.cli.endswith("map it with --map ticket=FIELD")
    errors.append(err.value)
    method = triage.method(train_size=2, val_size=2)
    RunRecord.create(
        tmp_path / "records",
        RunSettings(triage.path, "examples", method, triage.models),
        triage.prompts,
        "an older text",
    )
    with pytest.raises(ValueError, match=r"start a new run \(without resume=True\)") as err:
        triage.optimize(examples, examples, runs_dir=tmp_path / "records", resume=True)
    assert "start a new run (without --resume)" in err.value.cli
    errors.append(err.value)
    assert not any("--" in str(error) for error in errors) and fake_llm.requests == 0


def test_save_where_it_cannot_write_is_a_value_error(triage, tmp_path):
    for target, said in ((tmp_path / "missing" / "x.sbp", "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(ValueError, match=said):
            triage.save(target)


def test_an_answer_the_output_can_never_match_is_refused_before_any_call(triage, fake_llm):
    for answer in ("Maybe", 1, None, {"x": 1}):
        said = (
            r"example:2 has no expected output"  # None is no answer, not the word null
            if answer is None
            else r"example:2: the expected answer .* is not among the labels of urgent: choice\(Yes, No\), so it "
            r"would always score 0"
        )
        with pytest.raises(sbp.DataError, match=said):
            triage.evaluate([{"ticket": "crash", "answer": "yes."}, {"ticket": "fine", "answer": answer}])
    assert fake_llm.requests == 0
    assert triage.evaluate([{"ticket": "fine", "answer": "Maybe"}], metric=lambda p, e: 1.0).accuracy == 1.0


def test_an_impossible_answer_in_a_data_file_is_refused_at_its_line(triage, fake_llm, tmp_path, capsys):
    from sembp_dsl import cli

    rows = [("it crashes", "Yes"), ("looks odd", "No"), ("slow", "Yess"), ("fine", "Maybe")]
    jsonl = tmp_path / "tickets.jsonl"
    jsonl.write_text("\n".join(json.dumps({"ticket": t, "label": a}) for t, a in rows) + "\n")
    csv = tmp_path / "tickets.csv"
    csv.write_text("ticket,label\n" + "".join(f"{t},{a}\n" for t, a in rows))
    said = (
        r":{line}: the expected answer 'Yess' is not among the labels of urgent: choice\(Yes, No\), so it would "
        r"always score 0; did you mean 'Yes'\?\n"  # and every other row to fix, each by its line
    )
    for data, line in ((jsonl, 3), (csv, 4)):
        with pytest.raises(sbp.DataError, match=re.escape(str(data)) + said.format(line=line)) as caught:
            triage.evaluate(str(data))
        assert f"{data}:{line + 1}: the expected answer 'Maybe'" in str(caught.value)
        with pytest.raises(sbp.DataError, match=said.format(line=line)):
            triage.optimize(sbp.runtime.datasets.load(str(data)).pools["all"], runs_dir=tmp_path / "runs", gate="none")
        code = cli.main(
            ["eval", triage.path, "--data", str(data), "--model", "openai/fake", "--api-base", fake_llm.url]
        )
        err = capsys.readouterr().err
        assert code == 1 and re.search(
            r"sbpc: error: 2 bad rows:\n" + re.escape(f"{data}") + said.format(line=line), err
        )
        assert "Traceback" not in err
    assert fake_llm.requests == 0 and not (tmp_path / "runs").exists()


def test_an_impossible_answer_read_from_the_outputs_own_field_is_refused_too(tmp_path, fake_llm):
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE.replace("output urgent", 'output urgent from "verdict"'))
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url) as triage:
        with pytest.raises(sbp.DataError, match="example:2: the expected answer 'Nope' is not among the labels"):
            triage.evaluate([{"ticket": "x", "verdict": "No"}, {"ticket": "y", "verdict": "Nope"}])
    assert fake_llm.requests == 0


def test_an_answer_with_no_number_for_a_number_output_is_refused(tmp_path, fake_llm):
    path = tmp_path / "count.sbp"
    path.write_text(
        'pipeline count "Count"\ninput q: text\nparam p = "Count the words."\n'
        "node n: number { prompt = p }\nq -> n\noutput n\nmetric numeric\n"
    )
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url) as count:
        with pytest.raises(sbp.DataError, match="example:1: the expected answer 'many' holds no number"):
            count.evaluate([{"q": "a b", "answer": "many"}])
    assert fake_llm.requests == 0


def test_a_reply_holding_a_lone_surrogate_does_not_break_the_next_call(tmp_path):
    from fake_server import FakeServer

    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    with (
        FakeServer(
            reply=lambda messages: "Yes" if "Answer Yes or No" in messages[-1]["content"] else "notes \udfff"
        ) as server,
        sbp.load(path, model="openai/fake", api_base=server.url) as pipeline,
    ):
        prediction = pipeline(ticket="x")  # the server sends "\\udfff" in JSON; the next prompt must still encode
    assert prediction.output == "Yes" and prediction.trace.nodes["notes"].reply == "notes \ufffd"


def test_models_are_overridden_per_role(tmp_path, fake_llm):
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    pipeline = sbp.load(
        path,
        model="openai/fake",
        api_base=fake_llm.url,
        roles={"backward": "openai/other", "optimizer": {"name": "openai/third", "temperature": 0.9}},
    )
    assert pipeline.models == {"forward": "openai/fake", "backward": "openai/other", "optimizer": "openai/third"}
    with pytest.raises(ValueError, match="unknown model role"):
        sbp.load(path, roles={"backwards": "x"})
    with pytest.raises(TypeError, match=r"roles\['forward'\] must be a model name or a mapping of settings, got 3"):
        sbp.load(path, roles={"forward": 3})
    with pytest.raises(TypeError, match="roles must map a role"):
        sbp.load(path, roles=["forward"])
    with pytest.raises(ValueError, match="concurrency must be a whole number of at least 1, got '4'"):
        sbp.load(path, concurrency="4")


def test_a_bad_file_raises_pipeline_error_with_located_diagnostics(tmp_path):
    path = tmp_path / "bad.sbp"
    path.write_text(TRIAGE.replace("ticket -> notes", "tickt -> notes"))
    with pytest.raises(sbp.PipelineError) as caught:
        sbp.load(path)
    assert re.search(r"bad\.sbp:\d+:\d+: error\[E024\]: .*tickt", caught.value.render())
    assert re.fullmatch(
        r".*bad\.sbp:\d+:\d+: error\[E024\]: .*tickt.*", str(caught.value)
    )  # a log line says where, too
    with pytest.raises(sbp.PipelineError, match=r"missing\.sbp: error\[E010\]: no such file"):
        sbp.load(tmp_path / "missing.sbp")


def test_a_call_the_provider_refuses_raises_with_its_message(triage, fake_llm):
    fake_llm.configure(failures=[401])
    with pytest.raises(sbp.LLMError, match="401|[Aa]uthenticat"):
        triage(ticket="x")


def test_a_call_that_fails_for_good_raises_call_failed_with_its_cause(triage, fake_llm):
    fake_llm.configure(failures=[400])  # a request the provider refuses: not retried, that sample is lost
    with pytest.raises(sbp.CallFailed, match="notes: call failed: 400") as caught:
        triage(ticket="x")
    assert caught.value.failure.status == 400 and caught.value.prediction.failed


# --- sbpc serve -----------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path, fake_llm, script):
    """`sbpc serve` in a process of its own: (url, process)."""
    script.verdict = urgent_when_crash
    fake_llm.configure(delay=0.05)
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "serve",
            str(path),
            "--port",
            "0",
            "--model",
            "openai/fake",
            "--concurrency",
            "32",
            "--allow-trace",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "OPENAI_API_BASE": fake_llm.url},
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://\S+", line)
        assert url, line + proc.stderr.read()
        yield url.group(0), proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def server(served):
    return served[0]


def test_serve_answers_64_concurrent_clients_without_an_error(server, fake_llm):
    async def main():
        async with aiohttp.ClientSession() as session:

            async def one(i):
                async with session.post(
                    server + "/", json={"ticket": f"#{i} the app {'crashes' if i % 2 else 'is fine'}"}
                ) as r:
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
    for payload, reason in (
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"tickt": 1}', "did you mean 'ticket'"),
        (b"{}", "missing input"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000, "nests too deeply"),
    ):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(server + "/", data=payload, method="POST"))
        assert caught.value.code == 400
        assert reason in json.load(caught.value)["error"]
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(
            urllib.request.Request(server + "/", data=b'{"ticket": "' + b"x" * (2 << 20) + b'"}', method="POST")
        )
    assert caught.value.code == 413


def raw_http(url: str, request: bytes, timeout: float = 10) -> bytes:
    """What the server answers to these bytes, read until it closes the connection."""
    import socket

    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def test_serve_answers_in_json_whatever_the_client_sent(server):
    body = b'{"ticket": "crash"}'
    reply = raw_http(
        server,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset=klingon\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body),
    )
    assert reply.startswith(b"HTTP/1.1 200") and b'"output": "Yes"' in reply  # JSON is UTF-8, whatever the header says
    reply = raw_http(server, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 405") and b"Allow: POST" in reply
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"].endswith(
        "POST / takes a JSON object of inputs (ticket); GET /health says what is served"
    )


def test_serve_stops_on_sigterm_after_the_requests_in_flight(served, fake_llm):
    import signal
    import socket
    import threading

    url, proc = served
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as gone:  # a client that leaves halfway through
        gone.sendall(b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"tic')
        gone.shutdown(socket.SHUT_WR)  # its body ends early
        while gone.recv(65536):  # until the server has seen it go and closed the connection: no clock
            pass
    fake_llm.configure(delay=0.5)
    answers = []
    body = b'{"ticket": "crash"}'
    client = threading.Thread(
        target=lambda: answers.append(
            raw_http(
                url,
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body),
                30,
            )
        )
    )
    client.start()
    wait_until(lambda: fake_llm.in_flight == 1, within=30)  # the request is in flight: its model call was made
    proc.send_signal(signal.SIGTERM)
    client.join(30)
    assert answers and answers[0].startswith(b"HTTP/1.1 200")  # the request in flight was answered
    assert proc.wait(timeout=30) == 0
    assert "Traceback" not in proc.stderr.read()


def test_serve_answers_408_to_a_body_that_trickles_in(triage, monkeypatch):
    from aiohttp import web

    from sembp_dsl import serve

    monkeypatch.setattr(serve, "BODY_TIMEOUT", 0.3)

    async def main():
        # aiohttp lingers up to 10 s for the rest of a body it never read; the test need not wait for that
        runner = web.AppRunner(serve.app(triage), shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1])
        writer.write(b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"tic')
        reply = await asyncio.wait_for(reader.read(4096), 5)
        writer.close()
        await runner.cleanup()
        return reply

    reply = asyncio.run(main())
    assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.3 seconds" in reply


def test_serve_on_a_port_in_use_is_one_line_not_a_traceback(served, tmp_path):
    url, _ = served
    port = url.rsplit(":", 1)[1]
    path = tmp_path / "triage.sbp"
    done = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "serve", str(path), "--port", port, "--model", "openai/fake"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"sbpc: error: cannot listen on 127.0.0.1:{port}: address already in use"
    done = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "serve", str(path), "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "expected a port from 0 to 65535" in done.stderr


def test_serve_answers_502_with_the_cause_when_a_call_fails_for_good(server, fake_llm):
    import urllib.error
    import urllib.request

    fake_llm.configure(failures=[400])
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(server + "/", data=b'{"ticket": "x"}', method="POST"), timeout=30)
    assert caught.value.code == 502 and "notes: call failed: 400" in json.load(caught.value)["error"]
    health = json.load(urllib.request.urlopen(server + "/health"))  # and the server is still up
    assert health["status"] == "ok"


def test_serve_bounds_half_sent_headers_and_open_connections(triage, monkeypatch):
    """Clients that open connections and never finish their headers: past MAX_CONNECTIONS a new one takes the
    place of the oldest (closed at once, unanswered), the rest are closed after HEADER_TIMEOUT, and a real client
    is served all along."""
    from sembp_dsl import serve

    monkeypatch.setattr(serve, "HEADER_TIMEOUT", 0.5)
    monkeypatch.setattr(serve, "MAX_CONNECTIONS", 8)

    async def main():
        runner = await serve.start(triage, "127.0.0.1", 0)
        port = runner.addresses[0][1]
        stuck = []
        for _ in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Le")  # headers that never end
            await writer.drain()
            await asyncio.sleep(0.01)  # accepted in order
            stuck.append((reader, writer))
        gave_way = [await asyncio.wait_for(reader.read(), 2) for reader, _ in stuck[:12]]  # closed at once
        start = asyncio.get_running_loop().time()
        for reader, _ in stuck[12:]:
            await asyncio.wait_for(reader.read(), 5)  # closed by the server at the header timeout: the read ends
        waited = asyncio.get_running_loop().time() - start
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/health") as r:
                health = await r.json()
        for _, writer in stuck:
            writer.close()
        await runner.cleanup()
        return gave_way, waited, health

    gave_way, waited, health = asyncio.run(main())
    assert gave_way == [b""] * 12 and waited < 3 and health["status"] == "ok"


def test_serve_gives_traces_only_when_the_operator_allows_them_and_logs_each_request(triage, capsys):
    from sembp_dsl import serve

    async def main(allow):
        runner = await serve.start(triage, "127.0.0.1", 0, allow_trace=allow)
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/?trace=1"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json={"ticket": "crash"}) as r:
                answer = r.status, await r.json()
        await runner.cleanup()
        return answer

    status, body = asyncio.run(main(False))
    assert status == 403 and "--allow-trace" in body["error"] and "trace" not in body
    assert re.search(r'127\.0\.0\.1 "POST /\?trace=1 HTTP/1\.1" 403 \d+ [\d.]+s', capsys.readouterr().err)
    status, body = asyncio.run(main(True))
    assert status == 200 and set(body["trace"]["nodes"]) == {"notes", "urgent"}


def test_serve_logs_malformed_http_in_one_line_without_a_traceback(triage, capsys):
    from sembp_dsl import serve

    async def main():
        runner = await serve.start(triage, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1])
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
        reply = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await runner.cleanup()
        return reply

    assert asyncio.run(main()).startswith(b"HTTP/1.0 400")
    err = capsys.readouterr().err
    assert "Error handling request from 127.0.0.1: 400, message: Invalid header token" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "model, kept",
    [("ollama/llama3", False), ("anthropic/claude-3-haiku", False), ("openai/other", True)],
)
def test_a_model_of_another_provider_does_not_inherit_the_files_server(tmp_path, model, kept):
    """`--model ollama/llama3` kept the file's OpenAI-compatible api_base (and key variable): its requests
    went to the wrong server and scored 0 on empty replies."""
    from fake_server import FakeServer

    with FakeServer(reply="Yes") as server:
        path = tmp_path / "toy.sbp"
        path.write_text(
            TRIAGE_TEXT
            + f'\nmodel {{ name = "openai/fake"  api_base = "{server.url}"  api_key_env = "OPENAI_API_KEY" }}\n'
        )
        for pipeline in (sbp.load(path, model=model, cache=False), sbp.load(path, roles={"forward": model})):
            settings = pipeline._session.models["forward"].settings
            assert ("api_base" in settings, "api_key_env" in settings) == (kept, kept)
            assert pipeline._session.models["backward"].settings.get("api_base") == (
                server.url if kept or pipeline.models["backward"] == "openai/fake" else None
            )
        given = sbp.load(path, model=model, api_base=server.url, cache=False)
        assert given._session.models["forward"].settings["api_base"] == server.url  # a flag always applies
        if kept:  # the same provider still goes to the file's server
            with sbp.load(path, model=model, cache=False) as pipeline:
                assert pipeline(ticket="it crashed").output == "Yes" and server.requests == 2  # a call per node


def test_a_row_of_data_is_posted_as_it_is_everywhere(tmp_path, capsys):
    """`evaluate(rows)` read an input from its data field (`from "customer_plan"`), but a direct call,
    `batch(rows)` and `sbpc run --input` rejected that field's name: a row had to be renamed by hand."""
    from fake_server import FakeServer

    from sembp_dsl import cli

    source = TRIAGE_TEXT.replace("input ticket: text", 'input ticket: text from "body"')
    with FakeServer(reply="Yes") as server:
        path = tmp_path / "triage.sbp"
        path.write_text(source + f'\nmodel {{ name = "openai/fake"  api_base = "{server.url}" }}\n')
        row = {"body": "The app crashes on login", "answer": "Yes"}  # as the data file holds it
        with sbp.load(path, cache=False) as triage:
            assert triage.evaluate([row]).accuracy == 1.0
            assert triage(body=row["body"]).output == "Yes" and triage(ticket=row["body"]).output == "Yes"
            assert [p.output for p in triage.batch([row, {"ticket": "x"}])] == ["Yes", "Yes"]
            with pytest.raises(ValueError, match="input 'ticket' is given twice"):
                triage(ticket="a", body="b")
            with pytest.raises(
                ValueError, match=r"no input 'bdy'; did you mean 'body'.*ticket \(or its data field 'body'\)"
            ):
                triage(bdy="a")
        assert cli.main(["run", str(path), "--input", "body=It crashed", "--no-cache"]) == 0
        assert capsys.readouterr().out.startswith("Yes")


def test_lost_samples_are_counted_by_what_failed(tmp_path, fake_llm, script):
    script.verdict = urgent_when_crash
    path = tmp_path / "triage.sbp"
    short = TRIAGE_TEXT.replace("{ prompt = look }", "{ prompt = look  template = tenth }")
    path.write_text(short + 'template tenth = "{{ prompt }} {{ ticket[9] }}"\n')  # fails on tickets under 10 characters
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url) as pipeline:
        report = pipeline.evaluate([{"ticket": "crash", "answer": "Yes"}, {"ticket": "a long crash", "answer": "Yes"}])
    assert report.lost_causes() == {"not run": 1}  # the short ticket: notes did not render, so urgent never ran
    assert report.scored == 1
