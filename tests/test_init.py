"""`sbpc init` as a newcomer meets it: a starter pipeline from data that checks and runs, a template without data,
and never a file overwritten."""

from __future__ import annotations

import builtins
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from sembp_dsl import cli
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.runtime import datasets


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


TICKETS = [
    {"message": f"ticket {i}", "my subject": f"s{i}", "label": "urgent" if i % 2 else "normal"} for i in range(10)
]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(builtins, "input", lambda prompt="": pytest.fail("init asked a question off a terminal"))
    return tmp_path


def init(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main(["init", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_labels_make_a_choice_scored_exact_from_the_data_named_in_the_file(folder, capsys):
    jsonl(folder / "tickets.jsonl", TICKETS)
    code, said = init(capsys, "--data", "tickets.jsonl", "Decide whether a ticket is urgent", "--model", "openai/x")
    assert code == 0 and said["ok"] and said["file"] == "tickets.sbp"
    assert said["answer"]["field"] == "label" and said["answer"]["kind"] == "labels" and said["metric"] == "exact"
    assert said["inputs"] == ["message", "my subject"]
    assert said["next"] == ["sbpc check tickets.sbp", "sbpc eval tickets.sbp", "sbpc optimize tickets.sbp --plan"]
    graph = compile_file("tickets.sbp")
    assert graph.nodes["answer"].type.choices == ("normal", "urgent") and graph.metric == "exact"
    assert [(i.name, i.field) for i in graph.inputs] == [("message", None), ("my_subject", "my subject")]
    assert graph.data is not None and graph.data.file == "tickets.jsonl" and graph.models["forward"].name == "openai/x"
    assert graph.task == "Decide whether a ticket is urgent"
    assert cli.main(["fmt", "--check", "tickets.sbp"]) == 0  # laid out as sbpc fmt would


def test_numbers_are_scored_numeric_and_free_text_by_a_judge(folder, capsys):
    jsonl(folder / "sums.jsonl", [{"question": f"{i}+1", "answer": i + 1} for i in range(6)])
    code, said = init(capsys, "--data", "sums.jsonl", "Add")
    assert code == 0 and said["metric"] == "numeric" and compile_file("sums.sbp").nodes["answer"].type.kind == "number"
    (folder / "replies.csv").write_text(
        "ticket,answer\n" + "".join(f"t{i},Reply number {i} in words\n" for i in range(5))
    )
    code, said = init(capsys, "--data", "replies.csv", "Reply to the ticket")
    graph = compile_file("replies.sbp")
    assert code == 0 and said["metric"] == "judge" and graph.metrics["quality"].kind == "judge"


def test_a_folder_is_named_whole_relative_to_the_pipeline_and_its_splits_kept(folder, capsys):
    jsonl(folder / "hf/data/train.jsonl", TICKETS)
    jsonl(folder / "hf/data/test.jsonl", TICKETS[:2])
    (folder / "sub").mkdir()
    code, said = init(capsys, "--data", "hf", "Triage", "--out", "sub/triage.sbp")
    assert code == 0 and said["ok"] and said["data"] == "../hf"
    graph = compile_file("sub/triage.sbp")
    assert graph.data.path == "hf" and not graph.sizes_given  # a run cuts sbpc's defaults to fit the 10 rows
    assert list(datasets.load("hf").pools) == ["test", "train"]  # eval scores the test split, optimize cuts train


def test_init_never_overwrites_a_file(folder, capsys):
    jsonl(folder / "tickets.jsonl", TICKETS)
    (folder / "tickets.sbp").write_text("mine")
    with pytest.raises(SystemExit) as exited:
        cli.main(["init", "--data", "tickets.jsonl", "Triage"])
    assert exited.value.code == 2 and "never overwrites" in capsys.readouterr().err
    assert (folder / "tickets.sbp").read_text() == "mine"


def test_without_data_it_asks_nothing_and_writes_a_template_that_checks(folder, capsys):
    code = cli.main(["init"])
    out = capsys.readouterr().out
    assert code == 0 and "a template" in out and "sbpc eval pipeline.sbp" in out
    text = (folder / "pipeline.sbp").read_text()
    assert text.startswith("# ") and "# data {" in text
    assert cli.main(["check", "pipeline.sbp"]) == 0 and cli.main(["fmt", "--check", "pipeline.sbp"]) == 0


def test_without_a_task_off_a_terminal_it_writes_one_to_edit(folder, capsys):
    jsonl(folder / "tickets.jsonl", TICKETS)
    code, said = init(capsys, "--data", "tickets.jsonl")
    assert code == 0 and "tickets.jsonl" in compile_file("tickets.sbp").task


def test_data_without_an_answer_column_is_said_with_its_fields(folder, capsys):
    jsonl(folder / "rows.jsonl", [{"text": "a", "note": "b"}, {"text": "c", "note": "d"}])
    with pytest.raises(SystemExit):
        cli.main(["init", "--data", "rows.jsonl", "Sort"])
    err = capsys.readouterr().err
    assert "no answer column" in err and "--answer COLUMN" in err and "text, note" in err
    assert not (folder / "rows.sbp").exists()
    with pytest.raises(SystemExit):
        cli.main(["init", "--data", "rows.jsonl", "Sort", "--answer", "nots"])
    assert "--answer nots: no such column; did you mean 'note'?" in capsys.readouterr().err
    code, said = init(capsys, "--data", "rows.jsonl", "Sort", "--answer", "note")
    assert code == 0 and said["answer"] == {"field": "note", "why": "as --answer said", "kind": "text"}


@pytest.mark.parametrize(
    ("columns", "answer", "why"),
    [
        (("question", "Gold Label"), "Gold Label", "guessed from its name"),
        (("text", "verdict", "source"), "verdict", "guessed from its name"),
        (("instruction", "input", "output"), "output", "guessed from its name"),
        (("text", "y"), "y", "guessed from its name"),
        (("text", "topic", "notes"), "topic", "guessed: the last column with few distinct values (2)"),
    ],
)
def test_the_answer_column_is_guessed_by_name_else_by_its_few_values_and_said(folder, capsys, columns, answer, why):
    rows = [{c: (["spam", "ham"][i % 2] if c == answer else f"{c} {i}") for c in columns} for i in range(6)]
    jsonl(folder / "rows.jsonl", rows)
    code, said = init(capsys, "--data", "rows.jsonl", "Sort")
    assert code == 0 and said["ok"] and said["answer"]["field"] == answer and said["answer"]["why"] == why
    graph = compile_file("rows.sbp")
    assert graph.answer_field == answer and graph.metric == "exact" and answer not in said["inputs"]
    assert f'output answer from "{answer}"' in (folder / "rows.sbp").read_text()  # how to change it, in the file
    (folder / "rows.sbp").unlink()
    assert cli.main(["init", "--data", "rows.jsonl", "Sort"]) == 0
    assert (
        f'another answer column? change `from "{answer}"` in rows.sbp, or give init --answer' in capsys.readouterr().out
    )


def test_the_written_pipeline_runs_eval_with_the_model_alone(folder, capsys, fake_llm, script):
    script.verdict = lambda prompt: "urgent"
    jsonl(folder / "tickets.jsonl", TICKETS)
    init(
        capsys, "--data", "tickets.jsonl", "Decide whether a ticket is urgent. Answer Yes or No", "--model", "openai/f"
    )
    code = cli.main(["eval", "tickets.sbp", "--api-base", fake_llm.url, "--json", "--runs-dir", "runs"])
    assert code == 0 and json.loads(capsys.readouterr().out)["scored"] == 10


def verdict(prompt: str) -> str:
    """Yes to every ticket, until the instruction is improved: then right (a ticket numbered by 3 is not urgent)."""
    number = int(re.findall(r"ticket (\d+)", prompt)[-1])
    return "No" if "Improved" in prompt and number % 3 == 0 else "Yes"


@pytest.mark.slow  # six processes, each importing the model layer: about 13 s
def test_done_when_from_outside_init_check_eval_and_optimize_with_the_model_alone(tmp_path, fake_llm, script):
    """The issue's test as a user runs it, in an empty folder, one process a command: init names the model, an
    OpenAI-compatible server is where the environment says, and no command after init takes a flag."""
    script.verdict = verdict
    script.improve = lambda param, prompt: "Improved: tickets numbered by 3 are not urgent. Answer Yes or No"
    rows = [{"ticket": f"ticket {i}", "verdict": "Yes" if i % 3 else "No"} for i in range(40)]
    jsonl(tmp_path / "rows.jsonl", rows)
    env = {**os.environ, "OPENAI_BASE_URL": fake_llm.url, "PYTHONPATH": str(ROOT)}

    def sbpc(*argv: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "sembp_dsl.cli", *argv], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    made = sbpc(
        "init", "--data", "rows.jsonl", "Decide whether a ticket is urgent. Answer Yes or No", "--model", "openai/x"
    )
    assert made.returncode == 0, made.stderr
    assert "answer: 'verdict', guessed from its name; labels, so metric exact" in made.stdout
    assert "checked: ok" in made.stdout and sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl", "rows.sbp"]
    assert sbpc("check", "rows.sbp").returncode == 0
    evaluated = sbpc("eval", "rows.sbp", "--json")
    report = json.loads(evaluated.stdout)
    assert evaluated.returncode == 0 and report["scored"] == 40 and report["correct"] == 26, evaluated.stderr
    before = (tmp_path / "rows.sbp").read_text()
    optimized = sbpc("optimize", "rows.sbp")
    assert optimized.returncode == 0, optimized.stderr
    assert fake_llm.requests > 40 and script.of_kind("optimizer")  # it learned: forward, backward, optimizer calls
    assert (tmp_path / "rows.sbp").read_text() != before, (
        optimized.stdout + optimized.stderr
    )  # an accepted step written back
    runs = sbpc("runs")
    assert runs.returncode == 0 and "rows.jsonl" in runs.stdout and "changed since" not in runs.stdout
