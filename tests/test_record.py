"""The run record has a schema (sembp_dsl/records/run.schema.json) and one module that writes and reads it:
a version, typed fields for every reader, old records still read, and a bad one one line, not a traceback."""

from __future__ import annotations

import json

import jsonschema
import pytest
from test_optimize import TOY, data, write
from test_runs import GOOD_ITERATION, record

from sembp_dsl import cli
from sembp_dsl.records import report
from sembp_dsl.records.record import SCHEMA, VERSION, GateDecision, Record, check
from sembp_dsl.records.runs import gate_settled, render_show, resolve

VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def sbpc(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def optimize(tmp_path, fake_llm, *flags) -> tuple:
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    flags = ["--data", data(tmp_path, n=12), "--train-size", "3", "--val-size", "5", "--test-size", "4", *flags]
    code = cli.main(["optimize", str(path), *flags, "--runs-dir", str(tmp_path / "runs")])
    [record_file] = (tmp_path / "runs").glob("*/run.json")
    return code, path, flags, record_file


def test_the_schema_is_a_json_schema_and_a_written_record_follows_it(tmp_path, fake_llm, script):
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    code, _, _, record_file = optimize(tmp_path, fake_llm, "--iters", "2")
    assert code == 0
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    written = json.loads(record_file.read_text())
    assert written["version"] == VERSION == 5 and written["settings"]["gate"] == "val"
    assert not list(VALIDATOR.iter_errors(written)) and check(written) is None
    assert Record.read(written).to_json() == written  # read and written by one module, losslessly


def test_a_version_1_record_is_read_and_resumed_as_version_5(tmp_path, fake_llm, script, capsys):
    """A record from before `version` (gate 'validation', no gate_alpha) lists, shows and resumes."""
    code, path, flags, record_file = optimize(tmp_path, fake_llm, "--iters", "2", "--max-calls", "30")
    capsys.readouterr()
    assert code == 0
    old = json.loads(record_file.read_text())
    assert not old["finished"] and len(old["iterations"]) < 2  # stopped by its budget: there is more to do
    del old["version"], old["settings"]["gate_alpha"], old["settings"]["test_data"]
    old["settings"]["gate"] = "validation"
    record_file.write_text(json.dumps(old))
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", tmp_path / "runs", "--json")
    [line] = json.loads(out)
    assert code == 0 and "gate" not in line["settings"]  # validation is the val gate, sbpc's default
    assert resolve("1", tmp_path / "runs").settings.method.gate_alpha == 0.1
    asked = flags[: flags.index("--max-calls")]  # the same run, without the budget that stopped it
    code, out, err = sbpc(capsys, "optimize", path, *asked, "--resume", "--runs-dir", tmp_path / "runs")
    assert code == 0, err
    resumed = json.loads(record_file.read_text())
    assert resumed["version"] == 5 and resumed["settings"]["gate"] == "val" and resumed["finished"]
    done = len(old["iterations"])
    assert len(resumed["iterations"]) == 2 and resumed["iterations"][:done] == old["iterations"]


@pytest.mark.parametrize(
    "bad, where",
    [
        (record(version=6), "version is 6, not one of 1, 2, 3, 4, 5"),
        (record(finished="yes"), "finished is text, not true/false"),
        (record(initial_score="high"), "initial_score is text, not a number or null"),
        (record(initial_right=[1]), "initial_right[0] is a number, not text"),
        (record(test={"initial": "x", "final": 1}), "test.initial is text, not a number or null"),
        (record(iterations=[{**GOOD_ITERATION, "accepted": 1}]), "iterations[0].accepted is a number, not true/false"),
        (record(iterations=[{**GOOD_ITERATION, "index": 1.5}]), "iterations[0].index is a number, not a whole number"),
        (
            record(iterations=[{**GOOD_ITERATION, "gate": {**GOOD_ITERATION["gate"], "p": "low"}}]),
            "iterations[0].gate.p is text, not a number",
        ),
        (
            record(iterations=[{**GOOD_ITERATION, "gradients": [{"sample": "s", "expected": "Yes", "nodes": []}]}]),
            "iterations[0].gradients[0].nodes is a list, not an object",
        ),
        (record(settings={"file": "toy.sbp", "gradient": 3}), "settings.gradient is a number, not text"),
        (
            record(settings={"file": "toy.sbp", "iterations": 5000}),
            "settings: iterations=5000 is out of range: from 0 to 1000",
        ),
        (record(settings={"file": "toy.sbp", "gate": "sometimes"}), "settings: gate='sometimes' is not one of"),
    ],
)
def test_a_wrongly_typed_record_is_one_line_for_every_reader(tmp_path, capsys, bad, where):
    folder = tmp_path / "runs" / "20260101-000000-bad"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(bad))
    code, out, err = sbpc(capsys, "runs", "--runs-dir", tmp_path / "runs")
    assert code == 0 and "no runs" in out and f"run.json: not a run record ({where}" in out
    for argv in (
        ["show", "1"],
        ["show", "2026"],
        ["report", "2026", "--out", tmp_path / "r.html"],
        ["apply", "2026", "--iteration", "0", tmp_path / "toy.sbp"],
    ):
        code, out, err = sbpc(capsys, *argv, "--runs-dir", tmp_path / "runs")
        assert code == 1 and "Traceback" not in err and (where in err or "no run" in err), (argv, err)
    if not where.startswith("settings:"):  # the schema says as much; the method's ranges are the Method's to say
        assert list(VALIDATOR.iter_errors(bad))


WHOLE = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)(SCHEMA)  # the schema as the record's check reads it: 2.0 is no whole number


def _mutations(value, rng, path=()):
    """Every place in a record, each with one edit that may break the schema there."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key), rng.choice(["drop", "retype", "add"])
            yield from _mutations(item, rng, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*path, index), rng.choice(["retype", "add"])
            yield from _mutations(item, rng, (*path, index))


def _edited(record, path, edit, rng):
    edited = json.loads(json.dumps(record))
    *parents, last = path
    holder = edited
    for step in parents:
        holder = holder[step]
    if edit == "drop" and isinstance(holder, dict):
        del holder[last]
    elif edit == "retype":
        holder[last] = rng.choice([None, True, 2, 2.0, 2.5, "text", [], {}, ["x"], {"x": 1}])
    elif isinstance(holder[last], dict):
        holder[last]["unheard_of"] = 1
    elif isinstance(holder[last], list):
        holder[last].append(rng.choice([1, "x", {}, None]))
    return edited


def test_the_record_check_gives_jsonschemas_verdict_and_first_place_on_every_edit(tmp_path, fake_llm, script):
    """records/schema.py checks run.schema.json itself (jsonschema takes seconds on a large record): on every
    place of a real record, edited to break or keep the schema, it holds where jsonschema holds, and where it
    does not, it names a place jsonschema names."""
    import random

    from sembp_dsl.records.record import _checks, _place

    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    code, _, _, record_file = optimize(tmp_path, fake_llm, "--iters", "2")
    written = json.loads(record_file.read_text())
    rng = random.Random(0)
    edits = list(_mutations(written, rng))
    assert code == 0 and len(edits) > 200
    broken = 0
    for path, edit in edits:
        edited = _edited(written, path, edit, rng)
        errors = list(WHOLE.iter_errors(edited))
        problem = _checks()(edited, ())
        assert (problem is None) == (not errors), (path, edit, problem, errors[:1])
        if problem is not None:
            broken += 1
            assert any(list(error.absolute_path) == list(problem.path) for error in errors), (path, edit, problem)
            assert check(edited).startswith(_place(problem.path) or "the record")
    assert broken > 50 and len(edits) - broken > 50  # edits that broke it and edits it holds after, many of each


def test_the_record_check_refuses_a_schema_keyword_it_does_not_check():
    """A rule added to run.schema.json that records/schema.py does not know would go unchecked: building fails."""
    from sembp_dsl.records.schema import compile_schema

    with pytest.raises(ValueError, match="minLength"):
        compile_schema({**SCHEMA, "$defs": {**SCHEMA["$defs"], "id": {"type": "string", "minLength": 1}}})
    with pytest.raises(ValueError, match="#/\\$defs/nowhere"):
        compile_schema({"$ref": "#/$defs/nowhere"})
    assert compile_schema({"properties": {"minLength": {"type": "string"}}})({"minLength": 1}, ()).path == (
        "minLength",
    )  # a field named like a keyword is a field


def test_a_whole_number_is_one_as_json_writes_it():
    """JSON Schema takes 2.0 for an integer; the readers would get a float where they count, so the record's
    check does not."""
    assert check(record(iterations=[{**GOOD_ITERATION, "index": 2.0}])) == (
        "iterations[0].index is a number, not a whole number"
    )
    assert check(record(iterations=[{**GOOD_ITERATION, "index": 2}])) is None


def test_a_kept_step_knows_its_prompts_scores_only_where_its_gate_evaluated_them():
    """What --resume gates against: an accepted gate's outcomes, unknown (not wrong) elsewhere; the initial gate
    score and a version 3 record's gate cover the whole split."""
    gate = {"wins": ["b"], "losses": [], "p": 0.5, "alpha": 1, "right": ["b"], "partial": {"c": 0.5}}
    step = {
        **GOOD_ITERATION,
        "index": 1,
        "accepted": True,
        "gate": {**gate, "evaluated": ["b", "c", "e", "f"], "lost": ["f"], "current": 1},
    }
    assert Record.read(record(initial_score=0.5, initial_right=["a"], iterations=[step])).scores_kept() == (
        {"b"},
        {"c": 0.5},
        {"b", "c", "e", "f"},
        {"f"},
    )
    older = {**step, "gate": gate}
    assert Record.read(record(initial_score=0.5, initial_right=["a"], iterations=[older])).scores_kept()[2] is None
    assert Record.read(record(initial_score=0.5, initial_right=["a"])).scores_kept() == ({"a"}, {}, None, set())
    lost = record(initial_score=0.5, initial_right=["a"], initial_lost=["z"])
    assert Record.read(lost).scores_kept() == ({"a"}, {}, None, {"z"})  # lost: unknown, not wrong


def test_a_training_score_over_part_of_the_split_says_so_and_is_no_point_of_the_plot(tmp_path):
    """An error draw that stopped at its errors scored 6 of the 20 training samples: `show` says of how many, and
    the plot's training line, whose points cover the whole split, leaves it out; a version 3 record's is whole."""
    settings = {"file": "toy.sbp", "data": "d", "iterations": 2, "train_size": 20}
    its = [
        {**GOOD_ITERATION, "index": 1, "train_score": 0.5, "train_samples": 6},
        {**GOOD_ITERATION, "index": 2, "train_score": 0.4},
    ]
    folder = tmp_path / "runs" / "20260101-000000-x"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(record(settings=settings, iterations=its)))
    shown = resolve("1", tmp_path / "runs")
    assert report.score_series(shown)["train"] == [(1, 0.4)]
    lines = render_show(shown)
    assert "iteration 1: train 0.500 on 6 of 20, rejected" in lines and "iteration 2: train 0.400, rejected" in lines


def test_a_gate_says_how_many_current_prompt_evaluations_its_decision_needed():
    gate = GateDecision(
        ["a"], [], 0.5, 1.0, samples=4, decided_after=4, of=10, evaluated=["a", "b", "c", "d"], current=2
    )
    assert gate_settled(gate) == " (settled after 4 of 10 samples, and 2 of the current prompts where unknown)"
    assert gate_settled(GateDecision(["a"], [], 0.5, 1.0, samples=4, decided_after=4, of=10)) == (
        " (settled after 4 of 10 samples)"
    )


def test_the_gate_score_a_run_keeps_is_one_rule_for_every_reader(tmp_path):
    """Kept: the last accepted step's score; a rejected step's score is not, however high."""
    steps = [(True, 0.6, ["a", "b"]), (False, 0.9, ["a", "b", "c"]), (True, 0.7, ["a", "b", "d"]), (False, 0.8, [])]
    iterations = [
        {
            **GOOD_ITERATION,
            "index": i,
            "accepted": accepted,
            "gate_after": score,
            "gate": {"wins": [], "losses": [], "p": 0.5, "alpha": 1, "right": right},
        }
        for i, (accepted, score, right) in enumerate(steps, 1)
    ]
    raw = record(initial_score=0.5, initial_right=["a"], iterations=iterations)
    run = Record.read(raw)
    assert run.gate_scores() == [(0, 0.5), (1, 0.6), (2, 0.6), (3, 0.7), (4, 0.7)]
    assert run.best_score == 0.7 and run.right_kept() == {"a", "b", "d"}  # what --resume gates against
    folder = tmp_path / "runs" / "20260101-000000-x"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(raw))
    shown = resolve("1", tmp_path / "runs")
    assert shown.summary()["best_score"] == 0.7 and report.score_series(shown)["gate"] == run.gate_scores()
    assert Record.read(record(initial_score=None)).best_score is None  # no gate: no score to keep


def test_the_prompt_tokens_a_providers_cache_served_are_shown_and_an_older_record_reads_without_them():
    ledger = {"calls": 3, "tokens": 3000, "cost": 0.01}
    cached = Record.read(record(ledger={**ledger, "cached_tokens": 1024}))
    assert cached.spent_words() == "3 calls, 3000 tokens (1024 prompt tokens from the provider's cache), $0.0100"
    assert check(record(ledger={**ledger, "cached_tokens": 1024})) is None
    assert Record.read(record(ledger=ledger)).spent_words() == "3 calls, 3000 tokens, $0.0100"
