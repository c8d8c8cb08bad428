"""`sbpc runs`, `show` and `apply` on real run records (fake LLM), finished, rejected and interrupted."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from test_optimize import TOY, data, write

from sembp_dsl import cli
from sembp_dsl.records.runs import RunsError, plain_word_diff, resolve, word_diff


def optimize(tmp_path, fake_llm, script, *flags):
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    original = path.read_text()
    code = cli.main(
        [
            "optimize",
            str(path),
            "--data",
            data(tmp_path, n=12),
            "--train-size",
            "3",
            "--val-size",
            "5",
            "--test-size",
            "4",
            "--runs-dir",
            str(tmp_path / "runs"),
            *flags,
        ]
    )
    assert code == 0
    return path, original


def sbpc(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def accepted(tmp_path, fake_llm, script, capsys):
    """A finished run whose first iteration was accepted and written back; gate_alpha 0.1 spent over 2 iterations
    tests the first step at 0.05, which takes 5 wins of 5, so the gate settles on its last sample and knows the
    step's score."""
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    path, original = optimize(tmp_path, fake_llm, script, "--iters", "2", "--gate-alpha", "0.1")
    capsys.readouterr()
    return path, original, tmp_path / "runs"


def test_runs_lists_every_run_with_its_scores(accepted, capsys):
    path, _, runs = accepted
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(runs), "--json")
    assert code == 0
    [line] = json.loads(out)
    assert line["file"] == str(path) and line["finished"] and line["status"] == "finished"
    assert (line["initial_score"], line["best_score"]) == (0.0, 1.0)
    assert line["test"] == {"initial": 0.0, "final": 1.0, "samples": 4}
    assert line["settings"] == {"iterations": 2, "model": "openai/fake"}  # what is not default
    assert line["calls"] > 0
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(runs))
    assert "gate 0.000 -> 1.000" in out and "test 0.000 -> 1.000" in out and out.rstrip().endswith("finished")


def test_show_gives_scores_fates_word_diffs_and_gradients(accepted, capsys):
    _, _, runs = accepted
    code, out, _ = sbpc(capsys, "show", "-1", "--runs-dir", str(runs))
    assert code == 0
    assert "iteration 1: train 0.000, accepted" in out
    assert "gate 0.000 -> 1.000: 5 wins, 0 losses, p = 0.031" in out
    assert "candidate for verdict_task: taken" in out
    assert "[-Say Yes or No.-]{+Improved instruction for verdict_task.+}" in out
    assert "a: a should say more." in out and "verdict: The answer should be Yes." in out
    assert "iteration 2: train 1.000, kept old (no training errors to learn from)" in out


def test_show_gives_the_gates_reason_for_a_rejected_candidate(tmp_path, fake_llm, script, capsys):
    optimize(tmp_path, fake_llm, script, "--iters", "1")  # the verdict never changes: the gate rejects
    capsys.readouterr()
    code, out, _ = sbpc(capsys, "show", "1", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0
    # two ties of 5 leave 3 possible wins, fewer than the 4 it takes: settled there
    assert "candidate for verdict_task: rejected by the gate: 0 wins, 0 losses so far, p = 1.000" in out
    assert "iteration 1: train 0.000, rejected" in out


def test_apply_writes_exactly_what_optimize_wrote(accepted, capsys):
    path, original, runs = accepted
    optimized = path.read_text()
    assert optimized != original
    code, out, _ = sbpc(capsys, "apply", "-1", "--iteration", "0", str(path), "--runs-dir", str(runs))
    assert code == 0 and path.read_text() == original  # iteration 0: the initial prompts, byte for byte
    assert '-param verdict_task = "Improved instruction for verdict_task."' in out
    code, out, _ = sbpc(capsys, "apply", "-1", "--iteration", "1", str(path), "--runs-dir", str(runs))
    assert code == 0 and path.read_text() == optimized
    code, out, _ = sbpc(capsys, "apply", "-1", "--iteration", "1", str(path), "--runs-dir", str(runs))
    assert code == 0 and "nothing written" in out


def test_apply_defaults_to_the_runs_last_iteration_and_its_own_file(accepted, capsys):
    """The record holds both: `sbpc apply RUN` puts back what the run ended with, into the file it optimized."""
    path, original, runs = accepted
    optimized = path.read_text()
    path.write_text(original)
    code, out, _ = sbpc(capsys, "apply", "-1", "--runs-dir", str(runs))
    assert code == 0 and path.read_text() == optimized and f"written to {path}" in out


def test_settings_are_listed_as_the_command_line_writes_them(tmp_path, fake_llm, script, capsys):
    optimize(tmp_path, fake_llm, script, "--iters", "1", "--only", "look,verdict_task")
    capsys.readouterr()
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and "only=look,verdict_task" in out and "[" not in out.split("only=")[1].split()[0]


def test_no_runs_says_where_it_looked(tmp_path, capsys):
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(tmp_path / "elsewhere"))
    assert code == 0 and f"no runs in {tmp_path / 'elsewhere'} (runs are kept where sbpc optimize ran" in out


def test_apply_refuses_a_file_without_the_runs_params(accepted, tmp_path, capsys):
    _, _, runs = accepted
    other = tmp_path / "other.sbp"
    other.write_text(
        'pipeline other "x"\ninput q: text\nparam p = "Do it."\nnode a: text { prompt = p }\nq -> a\noutput a\n'
    )
    before = other.read_text()
    code, _, err = sbpc(capsys, "apply", "-1", "--iteration", "1", str(other), "--runs-dir", str(runs))
    assert code == 1 and "has no param" in err and "check" in err and "Traceback" not in err
    assert other.read_text() == before


def test_an_interrupted_run_is_shown_as_such_and_can_be_applied(accepted, tmp_path, capsys):
    path, original, runs = accepted
    [folder] = runs.iterdir()
    record = json.loads((folder / "run.json").read_text())
    # what a run killed during its second of three iterations leaves: one iteration, no end, no test, no ledger
    record["settings"]["iterations"] = 3
    record["iterations"] = record["iterations"][:1]
    for key in ("stopped", "test", "ledger"):
        record.pop(key, None)
    record["finished"] = False
    killed = runs / "20990101-000000-toy"
    killed.mkdir()
    (killed / "run.json").write_text(json.dumps(record))
    (runs / "not-a-run").mkdir()  # a folder without a record is named, not an error
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(runs))
    assert code == 0 and out.count("finished") == 1 and "interrupted after 1 of 3 iterations" in out
    assert "unreadable " in out and "not-a-run" in out
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(runs), "--json")
    first, last = json.loads(out)
    assert last["run"] == "20990101-000000-toy" and not last["finished"]
    assert last["status"] == "interrupted after 1 of 3 iterations" and last["test"] is None
    assert last["calls"] == record["iterations"][0]["calls"]  # summed from the iterations when the ledger is missing
    code, out, _ = sbpc(capsys, "show", "2099", "--runs-dir", str(runs))
    assert code == 0 and "interrupted after 1 of 3 iterations" in out and "(2 iteration(s) not run)" in out
    assert "candidate for look: taken" in out
    path.write_text(original)
    code, _, _ = sbpc(capsys, "apply", "2099", "--iteration", "1", str(path), "--runs-dir", str(runs))
    assert code == 0 and "Improved instruction for look." in path.read_text()
    code, _, err = sbpc(capsys, "apply", "2099", "--iteration", "2", str(path), "--runs-dir", str(runs))
    assert code == 1 and "has iterations 0 to 1" in err


def test_a_run_killed_before_its_first_iteration(tmp_path, capsys):
    folder = tmp_path / "runs" / "20990101-000000-toy"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(
        json.dumps(
            {
                "settings": {"file": "toy.sbp", "data": "d", "iterations": 3},
                "initial_prompts": {"p": "x"},
                "initial_score": None,
                "iterations": [],
                "finished": False,
            }
        )
    )
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and "gate - -> -" in out and "interrupted after 0 of 3 iterations" in out
    code, out, _ = sbpc(capsys, "show", str(folder), "--runs-dir", str(tmp_path / "nowhere"))
    assert code == 0 and "(3 iteration(s) not run)" in out


def test_run_names_resolve_by_number_prefix_and_folder(tmp_path, capsys):
    runs = tmp_path / "runs"
    for name in ("20260101-100000-a", "20260101-110000-b", "20260202-100000-c"):
        (runs / name).mkdir(parents=True)
        (runs / name / "run.json").write_text(
            json.dumps({"settings": {"file": "x.sbp"}, "initial_prompts": {}, "iterations": [], "finished": True})
        )
    assert resolve("1", runs).name == "20260101-100000-a" and resolve("-1", runs).name == "20260202-100000-c"
    assert resolve("20260202", runs).name == "20260202-100000-c"
    assert resolve(str(runs / "20260101-110000-b" / "run.json"), runs).name == "20260101-110000-b"
    with pytest.raises(RunsError, match="names 2 runs"):
        resolve("20260101", runs)
    with pytest.raises(RunsError, match="did you mean '20260202-100000-c'"):
        resolve("20260202-100000-d", runs)
    code, _, err = sbpc(capsys, "show", "7", "--runs-dir", str(runs))
    assert code == 1 and "no run number 7" in err and "Traceback" not in err


def test_word_diff_of_long_hostile_texts_takes_bounded_time():
    """60,000 words that share almost nothing, and a long text with one change in the middle: both in well
    under a second (the word-by-word matcher took minutes), and the diff still reads back to both texts."""
    import random
    import time

    rng = random.Random(0)
    old = " ".join(f"w{rng.randrange(5000)}" for _ in range(60_000))
    new = " ".join(f"w{rng.randrange(5000)}" for _ in range(60_000))
    start = time.perf_counter()
    ops = word_diff(old, new)
    assert time.perf_counter() - start < 2
    assert "".join(t for op, t in ops if op != "+") == old and "".join(t for op, t in ops if op != "-") == new
    long = " ".join(f"word{i}" for i in range(60_000))
    edited = long.replace("word30000 ", "changed ")
    start = time.perf_counter()
    assert plain_word_diff(long, edited).count("[-word30000 -]{+changed +}") == 1
    assert time.perf_counter() - start < 2


def test_word_diff_marks_only_the_changed_words():
    assert plain_word_diff("Say Yes or No.", "Say Yes or No, briefly.") == "Say Yes or [-No.-]{+No, briefly.+}"
    assert plain_word_diff("a b", "a b") == "a b"


def test_a_run_stopped_by_its_budget_says_why(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    cli.main(
        [
            "optimize",
            str(path),
            "--data",
            data(tmp_path, n=12),
            "--train-size",
            "3",
            "--val-size",
            "5",
            "--iters",
            "3",
            "--max-calls",
            "50",
            "--runs-dir",
            str(tmp_path / "runs"),
        ]
    )
    capsys.readouterr()
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(tmp_path / "runs"), "--json")
    [run] = json.loads(out)
    assert code == 0 and not run["finished"] and run["status"].startswith("stopped: ") and "50" in run["status"]
    assert run["iterations"] >= 1
    code, out, _ = sbpc(capsys, "show", "1", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and "stopped: " in out and "iteration 1: train 0.000, accepted" in out


def test_a_run_killed_mid_way_for_real(tmp_path, fake_llm, script, capsys):
    """SIGKILL after the first of three iterations: the record has what was done, and nothing more."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    script.improve = lambda param, prompt: f"Improved {param} {prompt.count('Improved')}"  # every step proposes anew
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    original = path.read_text()
    fake_llm.configure(delay=0.05)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "optimize",
            str(path),
            "--data",
            data(tmp_path, n=12),
            "--train-size",
            "3",
            "--val-size",
            "5",
            "--iters",
            "3",
            "--gate-alpha",
            "1",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        env={**os.environ},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        records = list((tmp_path / "runs").glob("*/run.json"))
        if records and len(json.loads(records[0].read_text())["iterations"]) >= 1:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    fake_llm.configure(delay=0.0)
    done = len(json.loads(records[0].read_text())["iterations"])
    assert 1 <= done < 3
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and f"interrupted after {done} of 3 iterations" in out
    code, out, _ = sbpc(capsys, "show", "-1", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and f"({3 - done} iteration(s) not run)" in out and "candidate for look: taken" in out
    code, _, _ = sbpc(capsys, "apply", "-1", "--iteration", "0", str(path), "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and path.read_text() == original


def test_show_never_sends_a_replys_control_characters_to_the_terminal(accepted, capsys):
    _, _, runs = accepted
    [folder] = runs.iterdir()
    record = json.loads((folder / "run.json").read_text())
    record["iterations"][0]["gradients"][0]["nodes"]["a"] = "clear the screen \x1b[2J and ring \x07"
    record["iterations"][0]["candidates"][0]["new"] = "Look \x1b]0;pwned\x07 here."
    (folder / "run.json").write_text(json.dumps(record))
    code, out, _ = sbpc(capsys, "show", "1", "--runs-dir", str(runs))
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "clear the screen \\x1b[2J and ring \\x07" in out and "\\x1b]0;pwned\\x07" in out


GOOD_ITERATION = {
    "index": 1,
    "accepted": False,
    "prompts": {"p": "x"},
    "calls": 2,
    "tokens": 9,
    "cost": 0.0,
    "candidates": [{"param": "p", "fate": "rejected", "new": "y", "reply": "<prompt>y</prompt>"}],
    "gradients": [{"sample": "s/0", "expected": "Yes", "output": "No", "nodes": {"n": "say more"}}],
    "gate": {"wins": [], "losses": [], "p": 1.0, "alpha": 0.1},
}


def record(**parts) -> dict:
    return {
        "settings": {"file": "toy.sbp", "data": "d", "iterations": 1},
        "initial_prompts": {"p": "x"},
        "iterations": [GOOD_ITERATION],
        "finished": True,
        **parts,
    }


@pytest.mark.parametrize(
    "data, where",
    [
        ({}, "the record has no 'settings'"),  # valid JSON, an object, and still no run: never a phantom run line
        ({"finished": True}, "the record has no 'settings'"),
        (record(settings={}), "settings has no 'file'"),
        (None, "the record is null, not an object"),
        (
            record(iterations=[{k: v for k, v in GOOD_ITERATION.items() if k != "index"}]),
            "iterations[0] has no 'index'",
        ),
        (record(iterations=[{**GOOD_ITERATION, "prompts": {"p": 3}}]), "iterations[0].prompts.p is a number, not text"),
        (
            record(iterations=[{**GOOD_ITERATION, "candidates": [{"param": "p"}]}]),
            "iterations[0].candidates[0] has no 'fate'",
        ),
        (
            record(iterations=[{**GOOD_ITERATION, "gradients": [{"sample": "s"}]}]),
            "iterations[0].gradients[0] has no 'expected'",
        ),
        (record(iterations=[{**GOOD_ITERATION, "gate": {"wins": []}}]), "iterations[0].gate has no 'losses'"),
        (record(iterations=[{**GOOD_ITERATION, "cost": "lots"}]), "iterations[0].cost is text, not a number"),
        (
            record(settings={"file": "toy.sbp", "iterations": "three"}),
            "settings.iterations is text, not a whole number",
        ),
        (record(settings={"file": "toy.sbp", "models": ["m"]}), "settings.models is a list, not an object"),
        (record(ledger="lots"), "ledger is text, not an object or null"),
        (record(ledger={"calls": 1}), "ledger has no 'tokens'"),
        (record(test={"initial": 0.5}), "test has no 'final'"),
    ],
)
def test_a_record_missing_what_readers_need_is_named_where(tmp_path, capsys, data, where):
    runs = tmp_path / "runs"
    (runs / "20260101-000000-bad").mkdir(parents=True)
    (runs / "20260101-000000-bad" / "run.json").write_text(json.dumps(data))
    code, out, err = sbpc(capsys, "runs", "--runs-dir", str(runs))
    assert code == 0 and f"unreadable {runs}/20260101-000000-bad/run.json: not a run record ({where})" in out
    assert "no runs" in out  # and not counted as one
    code, out, err = sbpc(capsys, "runs", "--runs-dir", str(runs), "--json")
    assert code == 0 and json.loads(out) == [] and f"unreadable {runs}/20260101-000000-bad/run.json" in err
    assert f"not a run record ({where})" in err
    for argv in (
        ["show", "20260101"],
        ["show", "20260101", "--json"],
        ["report", "20260101", "--out", str(tmp_path / "r.html")],
        ["apply", "20260101", "--iteration", "0", str(tmp_path / "toy.sbp")],
    ):
        code, out, err = sbpc(capsys, *argv, "--runs-dir", str(runs))
        assert code == 1 and out == "" and f"not a run record ({where})" in err and "Traceback" not in err


def test_a_good_record_passes_the_check(tmp_path, capsys):
    (tmp_path / "runs" / "20260101-000000-ok").mkdir(parents=True)
    (tmp_path / "runs" / "20260101-000000-ok" / "run.json").write_text(json.dumps(record()))
    code, out, _ = sbpc(capsys, "show", "1", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and "candidate for p: rejected" in out and "n: say more" in out


def test_a_fifo_in_place_of_run_json_is_refused_not_waited_on(tmp_path, capsys):
    import os

    folder = tmp_path / "runs" / "20260101-000000-fifo"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "run.json")
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and "run.json: not a run record (not a regular file)" in out
    code, _, err = sbpc(capsys, "show", str(folder))
    assert code == 1 and "not a regular file" in err


def test_report_and_compare_say_at_once_where_a_page_cannot_go(tmp_path, capsys):
    (tmp_path / "runs" / "20260101-000000-ok").mkdir(parents=True)
    (tmp_path / "runs" / "20260101-000000-ok" / "run.json").write_text(json.dumps(record()))
    for out, said in (
        (tmp_path / "missing" / "r.html", "--out: no folder"),
        (tmp_path, "is a folder; give a file name"),
    ):
        with pytest.raises(SystemExit) as stop:
            cli.main(["report", "1", "--out", str(out), "--runs-dir", str(tmp_path / "runs")])
        assert stop.value.code == 2 and said in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # before the pipeline is even read, let alone a model called
        cli.main(
            [
                "compare",
                str(tmp_path / "none.sbp"),
                "--data",
                "x.jsonl",
                "--vary",
                "gate=train,none",
                "--report",
                str(tmp_path),
            ]
        )
    assert stop.value.code == 2 and "--report" in capsys.readouterr().err
    code, _, err = sbpc(capsys, "runs", "--runs-dir", str(tmp_path / "runs" / "20260101-000000-ok" / "run.json"))
    assert code == 1 and "is a file, not a folder of run records" in err


def test_a_report_of_a_run_with_no_scores_warns_of_nothing(tmp_path, capsys):
    import warnings

    pytest.importorskip("matplotlib")
    (tmp_path / "runs" / "20260101-000000-ok").mkdir(parents=True)
    (tmp_path / "runs" / "20260101-000000-ok" / "run.json").write_text(json.dumps(record()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found to put in legend"
        code, _, err = sbpc(
            capsys, "report", "1", "--out", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path / "runs")
        )
    assert code == 0 and err == ""


STEERING = "\x9b2J \x1b[31m \x7f \x85 \u202e \ud800"  # C1 CSI, C0 escape, DEL, NEL, a bidi override, half a pair


def test_json_and_text_outputs_escape_what_would_steer_the_terminal(tmp_path, capsys):
    import re

    raw = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e\ud800]")  # anything but newline, written as it is
    hostile = record(
        settings={"file": "toy.sbp", "data": "d", "iterations": 1, "models": {"forward": "m" + STEERING}},
        stopped="budget " + STEERING,
        finished=False,
        iterations=[
            {
                **GOOD_ITERATION,
                "candidates": [{"param": "p", "fate": "rejected", "new": None, "reply": "reply " + STEERING}],
            }
        ],
    )
    folder = tmp_path / "runs" / "20260101-000000-x"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(hostile))  # ASCII: \u escapes on disk, the characters once read
    runs = ["--runs-dir", str(tmp_path / "runs")]
    code, out, err = sbpc(capsys, "show", "1", "--json", *runs)
    assert code == 0 and not raw.search(out) and json.loads(out) == hostile  # valid, and the same strings
    assert "\\u009b2J" in out and "\\u202e" in out
    code, out, err = sbpc(capsys, "runs", "--json", *runs)
    assert code == 0 and not raw.search(out) and json.loads(out)[0]["status"] == "stopped: budget " + STEERING
    for argv in (["show", "1"], ["runs"]):
        code, out, err = sbpc(capsys, *argv, *runs)
        assert code == 0 and not raw.search(out) and "\\x9b2J \\x1b[31m \\x7f \\x85 \\u202e \\ud800" in out


def test_an_error_quoting_a_hostile_record_escapes_it(tmp_path, capsys):
    folder = tmp_path / "runs" / "20260101-000000-x"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(record(initial_prompts={"\x9b2J": 3})))
    code, out, err = sbpc(capsys, "show", "2026", "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and "initial_prompts.\\x9b2J is a number, not text" in err and "\x9b" not in err
    code, out, err = sbpc(capsys, "runs", "--json", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and "initial_prompts.\\x9b2J is a number" in err and "\x9b" not in err


@pytest.mark.parametrize("spec", ["/etc/passwd", "/etc", "a" * 300, "../../etc", "", "20261399", "-99", "x/../../y"])
def test_a_hostile_run_id_is_one_error_line(tmp_path, spec, capsys):
    """In process (a traceback would fail the test itself): 32 processes cost the suite 20 s."""
    runs = tmp_path / "runs"
    (runs / "20261399-999999-x").mkdir(parents=True)  # a folder named with an impossible date, no record
    (runs / "ok").mkdir()
    (runs / "ok" / "run.json").write_text("{}")
    for command in (["show", spec], ["apply", spec, "nope.sbp"], ["report", spec, "--out", str(tmp_path / "r.html")]):
        code, _, err = sbpc(capsys, *command, "--runs-dir", str(runs))
        assert code == 1 and "Traceback" not in err, err
        assert err.count("\n") == 1 and err.startswith("sbpc: error: ")
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(runs))
    assert code == 0 and out.count("unreadable") == 2


def test_a_run_folder_named_like_an_impossible_date_is_listed_and_shown(tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "20261399-256199-x").mkdir(parents=True)
    (runs / "20261399-256199-x" / "run.json").write_text(
        json.dumps({"settings": {"file": "x.sbp"}, "initial_prompts": {}, "iterations": [], "finished": True})
    )
    for argv in (["runs"], ["show", "-1"]):
        code, out, err = sbpc(capsys, *argv, "--runs-dir", str(runs))
        assert code == 0 and "Traceback" not in err, err
    code, out, _ = sbpc(capsys, "runs", "--runs-dir", str(runs), "--json")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", json.loads(out)[0]["started"])  # the record's time


def test_sbpcs_own_folder_tells_git_to_ignore_it(tmp_path):
    from sembp_dsl.records.record import new_folder

    new_folder(tmp_path / ".sbpc" / "runs", "x.sbp")
    assert (tmp_path / ".sbpc" / ".gitignore").read_text().endswith("\n*\n")
    new_folder(tmp_path / "elsewhere", "x.sbp")
    assert not (tmp_path / "elsewhere" / ".gitignore").exists()


def test_reading_run_records_never_imports_the_model_layer(tmp_path):
    """`runs`, `show` and `report` read files: the model layer (aiohttp, litellm) is not theirs to import."""
    runs = tmp_path / "runs"
    (runs / "20260101-000000-toy").mkdir(parents=True)
    (runs / "20260101-000000-toy" / "run.json").write_text(json.dumps(record()))
    probe = (
        "import sys; from sembp_dsl import cli; code = cli.main(sys.argv[1:]); "
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'litellm', 'openai') "
        "or m.startswith(('sembp_dsl.models', 'sembp_dsl.runtime.evaluate'))))"
    )
    for args in (["runs"], ["show", "1"], ["report", "1", "--out", str(tmp_path / "r.html")]):
        proc = subprocess.run(
            [sys.executable, "-c", probe, *args, "--runs-dir", str(runs)], capture_output=True, text=True, timeout=120
        )
        assert proc.stdout.split("\n")[-2] == "0 []", (args, proc.stdout[-2000:], proc.stderr[-2000:])


def test_a_record_nesting_mapped_items_without_end_is_unreadable_not_a_crash(tmp_path, capsys):
    """A node's `items` hold nodes (a mapped node's runs), so a hostile record can nest them until the check
    itself runs out of stack: it is one unreadable record, never a traceback."""
    node: dict = {"prompt": "p", "reply": "r"}
    deepest = node
    for _ in range(300):  # 600 deep in JSON, which json writes and reads; the check takes 5 frames a level
        deepest["items"] = [{"prompt": "p", "reply": "r"}]
        deepest = deepest["items"][0]
    evaluation = {"split": "test", "metric": "exact", "score": 1.0, "scored": 1, "requested": 1}
    evaluation |= {"prompts_sha256": "0" * 64, "samples": [{"id": "s", "score": 1.0, "nodes": {"n": node}}]}
    data = {"version": 4, "kind": "eval", "settings": {"file": "toy.sbp", "data": "d", "models": {}}}
    data |= {"evaluation": evaluation, "finished": True, "ledger": None}
    runs = tmp_path / "runs"
    (runs / "20260101-000000-deep").mkdir(parents=True)
    (runs / "20260101-000000-deep" / "run.json").write_text(json.dumps(data))
    code, out, err = sbpc(capsys, "runs", "--runs-dir", str(runs))
    assert code == 0 and "run.json: not a run record (it nests too deeply)" in out and "Traceback" not in err
    code, out, err = sbpc(capsys, "show", "20260101", "--runs-dir", str(runs))
    assert code == 1 and "it nests too deeply" in err and "Traceback" not in err
