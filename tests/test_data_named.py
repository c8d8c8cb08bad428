"""Data named in the pipeline file: the data block, what `check` finds in its file, runs without --data, and the
record telling when the data changed since a run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import with_fake_model

from sembp_dsl import cli
from sembp_dsl.language.blocks.data import check_data_fields
from sembp_dsl.language.graph.compile import compile_file, diagnose
from sembp_dsl.language.syntax.source import load
from sembp_dsl.runtime import datasets
from sembp_dsl.runtime.datasets import DataError

NAMED = textwrap.dedent("""\
    pipeline echo "Answer a question"
    input q: text
    param ask = "Answer."
    node answer: text { prompt = ask }
    q -> answer
    output answer
    data { file = "rows.jsonl"  train = 3  validation = 2  seed = 7 }
    """)


def folder_with(tmp_path: Path, source: str = NAMED, rows: int = 8) -> Path:
    """A pipeline in a folder of its own, beside its data."""
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"q": f"q{i}", "answer": "ok"}) + "\n" for i in range(rows))
    )
    path = tmp_path / "echo.sbp"
    path.write_text(source)
    return path


def codes(source: str, fields=None) -> list[str]:
    return [d.code for d in diagnose(source, "/nowhere/p.sbp", fields_of=fields).diagnostics if d.severity == "error"]


def test_the_data_block_is_read_relative_to_the_pipeline_and_its_sizes_are_the_method(tmp_path, monkeypatch):
    path = folder_with(tmp_path)
    monkeypatch.chdir("/")
    graph = compile_file(str(path))
    assert graph.data is not None and graph.data.path == str(tmp_path / "rows.jsonl")
    assert (graph.optimize.train_size, graph.optimize.val_size, graph.optimize.seed) == (3, 2, 7)


@pytest.mark.parametrize(
    ("block", "code"),
    [
        ('data mine { file = "a.jsonl" }', "E130"),
        ("data { train = 3 }", "E131"),
        ('data { file = "a.jsonl"  train = 3 }\noptimize { train_size = 4 }', "E132"),
        ('data { file = "a.jsonl" }\ndata { file = "b.jsonl" }', "E133"),
        ('data { file = "a.jsonl"  trian = 3 }', "E030"),
        ('data { file = "a.jsonl"  train = 1.5 }', "E033"),
    ],
)
def test_a_data_block_that_says_too_little_or_too_much_is_an_error(block, code):
    assert code in codes(NAMED.replace(NAMED.splitlines()[-1], block))


def test_the_yaml_form_names_its_data_the_same_way():
    yaml_text = textwrap.dedent("""\
        pipeline: echo
        description: Answer a question
        inputs: {q: text}
        params: {ask: Answer.}
        nodes:
          answer: {type: text, prompt: ask}
        edges: [q -> answer]
        output: answer
        data: {file: rows.jsonl, train: 3, validation: 2, seed: 7}
        """)
    from sembp_dsl.language.syntax.yaml_form import parse_yaml

    assert parse_yaml(yaml_text, "/x/p.yaml") == load_text(NAMED)


def load_text(source: str):
    from sembp_dsl.language.syntax.parser import parse

    return parse(source, "/x/p.sbp")


def test_check_reads_the_file_and_says_which_field_an_input_lacks(tmp_path):
    path = folder_with(tmp_path, NAMED.replace("input q: text", "input question: text").replace("q ->", "question ->"))
    [found] = check_data_fields(load(str(path)), datasets.fields_of)
    assert found.code == "E135" and "'question'" in found.message and found.span.line == 2
    assert codes(NAMED.replace("rows.jsonl", "gone.jsonl"), datasets.fields_of) == ["E134"]


def test_check_on_the_command_line_names_every_bad_row_of_the_data(tmp_path, capsys):
    path = folder_with(tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"q": "a", "answer": "ok"}\nnot json\n{"q": "b", "answer": "ok"}\n[1]\n')
    assert cli.main(["check", str(path)]) == 1
    out = capsys.readouterr().err
    assert "E134" in out and "rows.jsonl:2: invalid JSON" in out and "rows.jsonl:4: expected a JSON object" in out


@pytest.mark.parametrize(
    ("name", "text", "lines"),
    [
        ("bad.jsonl", '{"q": 1, "answer": 1}\n{"q": \n{"q": 2, "answer": 2}\n{"q": \n', (2, 4)),
        ("bad.csv", "q,answer\na,1\nb\nc,3\nd,4,5\n", (3, 5)),
        ("bad.jsonl", '{"q": 1, "answer": 1}\n{"q": 2}\n{"q": 3}\n', (2, 3)),
    ],
)
def test_a_data_error_names_the_file_and_line_of_every_bad_row(tmp_path, name, text, lines):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError) as caught:
        datasets.load(str(path))
    assert all(f"{path}:{line}:" in str(caught.value) for line in lines), str(caught.value)


def test_eval_and_optimize_run_on_the_named_data_and_runs_tells_when_it_changed(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "ok"
    path = folder_with(tmp_path, with_fake_model(NAMED, fake_llm.url))
    runs = str(tmp_path / "runs")
    assert cli.main(["eval", str(path), "--json", "--runs-dir", runs]) == 0
    report = json.loads(capsys.readouterr().out)  # the test split: the 3 rows the block's 3 train and 2 val leave
    assert report["scored"] == 3 and report["data"] == str(tmp_path / "rows.jsonl")
    settings = json.loads((Path(report["run"]) / "run.json").read_text())["settings"]
    assert settings["data_sha256"] == datasets.fingerprint(str(tmp_path / "rows.jsonl"))

    assert cli.main(["optimize", str(path), "--plan", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)  # cut by the block's sizes, with no --data

    assert cli.main(["runs", "--runs-dir", runs]) == 0
    assert "changed since" not in capsys.readouterr().out
    (tmp_path / "rows.jsonl").write_text('{"q": "new", "answer": "ok"}\n')
    assert cli.main(["runs", "--runs-dir", runs]) == 0
    assert "rows.jsonl (changed since)" in capsys.readouterr().out


def test_without_data_named_or_given_a_run_is_a_usage_error(tmp_path, capsys):
    path = folder_with(tmp_path, NAMED.replace(NAMED.splitlines()[-1], ""))
    with pytest.raises(SystemExit) as exited:
        cli.main(["eval", str(path)])
    assert exited.value.code == 2 and "required: --data (or name it in the file" in capsys.readouterr().err


def test_every_row_lacking_a_field_is_named_by_its_line_with_the_field_it_may_mean(tmp_path, fake_llm, capsys):
    path = folder_with(tmp_path, with_fake_model(NAMED, fake_llm.url))
    rows = [
        {"q": "a", "answer": "ok"},
        {"qq": "b", "answer": "ok"},
        {"q": "c", "answer": "ok"},
        {"x": "d", "answer": "ok"},
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    every_row = ["--train-size", "0", "--val-size", "0"]  # the block's sizes would leave no test row
    assert cli.main(["eval", str(path), "--runs-dir", str(tmp_path / "runs"), *every_row]) == 1
    err = capsys.readouterr().err
    assert "2 bad rows:" in err and fake_llm.requests == 0
    assert f"{tmp_path / 'rows.jsonl'}:2: no field 'q' for input 'q'; did you mean 'qq'?" in err
    assert f"{tmp_path / 'rows.jsonl'}:4: no field 'q' for input 'q' (fields: x)" in err
    assert "map it with --map q=FIELD" in err and "Traceback" not in err


def test_a_field_no_row_has_is_one_cause_said_once_by_eval_and_by_the_plan(tmp_path, fake_llm, capsys):
    """Data that lack a field altogether are one mistake (the wrong data, or a field to map), not one per row."""
    path = folder_with(tmp_path, with_fake_model(NAMED, fake_llm.url))
    rows = [{"qustion": f"q{i}", "answer": "ok"} for i in range(30)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    said = "input 'q' reads field 'q', which no row has (fields: qustion); map it with --map q=FIELD"
    assert cli.main(["eval", str(path), "--runs-dir", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert said in err and "bad rows" not in err and "rows.jsonl:" not in err and fake_llm.requests == 0
    assert cli.main(["optimize", str(path), "--plan"]) == 1
    assert said in capsys.readouterr().err and fake_llm.requests == 0
    three = NAMED.replace("input q: text", "input q, qustion, qestion: text")
    path.write_text(with_fake_model(three.replace("q -> answer", "q, qustion, qestion -> answer"), fake_llm.url))
    assert cli.main(["eval", str(path), "--runs-dir", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "input 'q' reads field 'q', which no row has\n" in err
    assert "input 'qestion' reads field 'qestion', which no row has; did you mean 'qustion'? (fields: qustion)" in err


def test_data_with_no_answer_column_name_it_in_the_output(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "ok"
    path = folder_with(tmp_path, with_fake_model(NAMED, fake_llm.url))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"q": f"q{i}", "gold": "ok"}) + "\n" for i in range(5)))
    assert cli.main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "E135" in err and "no column named answer, label or target" not in err
    assert "output 'answer' is scored against the column named answer, label or target" in err
    assert 'output answer from "gold"' in err
    every_row = ["--train-size", "0", "--val-size", "0"]  # the block's sizes would leave no test row
    assert cli.main(["eval", str(path), "--runs-dir", str(tmp_path / "runs"), *every_row]) == 1
    assert "no example has an expected output" in capsys.readouterr().err and fake_llm.requests == 0
    path.write_text(
        path.read_text().replace("output answer", 'output answer from "gold"').replace("Answer.", "VERDICT")
    )
    assert cli.main(["check", str(path)]) == 0
    assert cli.main(["eval", str(path), "--json", "--runs-dir", str(tmp_path / "runs"), *every_row]) == 0
    out = capsys.readouterr().out
    assert json.loads(out.split("\n", 1)[1])["correct"] == 5, out
