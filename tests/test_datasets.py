"""Tests for sembp_dsl.runtime.datasets against the real data sets and small user files."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sembp_dsl.runtime.datasets import (
    DATA_DIR_ENV,
    DataError,
    Dataset,
    Sample,
    anchor_data_dir,
    data_dirs,
    eval_splits,
    from_records,
    load,
    loading,
    make_splits,
    reading,
)

LIAR_COLUMNS = (
    "id",
    "label",
    "statement",
    "subject",
    "speaker",
    "job_title",
    "state",
    "party",
    "c1",
    "c2",
    "c3",
    "c4",
    "c5",
    "context",
)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data folder: $SBPC_DATA_DIR, else ../shared/datasets next to the repo."""
    default = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    path = Path(os.environ.get(DATA_DIR_ENV) or default)
    if not (path / "liar").is_dir():
        pytest.fail(f"data sets not found at {path}; set {DATA_DIR_ENV}")
    return path


@pytest.fixture(scope="session")
def liar(data_dir: Path) -> Dataset:
    return load("liar", str(data_dir))


@pytest.fixture(scope="session")
def gsm8k(data_dir: Path) -> Dataset:
    return load("gsm8k", str(data_dir))


def _raw_liar(path: Path) -> list[dict[str, str]]:
    """Direct reading, independent of csv: one record per line, split on tabs."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = line.split("\t")
        assert len(cells) == len(LIAR_COLUMNS), line
        rows.append(dict(zip(LIAR_COLUMNS, cells)))
    return rows


def _kept(row: dict[str, str]) -> bool:
    required = ("statement", "job_title", "state", "party", "context")
    return row["label"] in ("true", "false") and all(row[c].strip().lower() not in ("", "none") for c in required)


# --- LIAR ---------------------------------------------------------------------------


def test_liar_matches_direct_reading_of_the_tsv(data_dir: Path, liar: Dataset) -> None:
    for pool, files in (("train", ("train", "valid")), ("test", ("test",))):
        expected = {
            f"liar/{name}/{row['id']}": row
            for name in files
            for row in _raw_liar(data_dir / "liar" / f"{name}.tsv")
            if _kept(row)
        }
        samples = liar.pools[pool]
        assert {s.id for s in samples} == set(expected)
        assert len(samples) == len(expected)
        for sample in samples:
            row = expected[sample.id]
            assert sample.answer == {"false": "Yes", "true": "No"}[row["label"]]
            for name in ("statement", "subject", "speaker", "job_title", "state", "party", "context"):
                assert sample.fields[name] == row[name].strip()
            assert sample.fields["source"] == sample.fields["context"]
    assert set(liar.pools) == {"train", "test"}
    assert liar.metric == "exact"


def test_liar_filter_drops_other_labels_and_missing_fields(liar: Dataset) -> None:
    samples = liar.pools["train"] + liar.pools["test"]
    assert {s.answer for s in samples} == {"Yes", "No"}
    for sample in samples:
        for name in ("statement", "job_title", "state", "party", "context"):
            assert sample.fields[name].lower() not in ("", "none")


def test_liar_known_row(liar: Dataset) -> None:
    by_id = {s.id: s for s in liar.pools["train"]}
    sample = by_id["liar/train/2635.json"]  # first line of train.tsv, labelled false
    assert sample.answer == "Yes"
    assert sample.fields["speaker"] == "dwayne-bohac"
    assert sample.fields["statement"].startswith("Says the Annies List political group")


def test_liar_keeps_unbalanced_double_quotes(data_dir: Path, liar: Dataset) -> None:
    raw = {row["id"]: row for row in _raw_liar(data_dir / "liar" / "train.tsv") if _kept(row)}
    odd = [i for i, row in raw.items() if row["statement"].count('"') % 2 == 1]
    assert odd, "expected statements with an unbalanced quote in the data"
    by_id = {s.id: s for s in liar.pools["train"]}
    for row_id in odd:
        assert by_id[f"liar/train/{row_id}"].fields["statement"] == raw[row_id]["statement"].strip()


def test_liar_bad_column_count_reports_line(tmp_path: Path) -> None:
    folder = tmp_path / "liar"
    folder.mkdir()
    good = "\t".join(["1.json", "true", "s", "x", "y", "job", "Texas", "rep", "0", "0", "0", "0", "0", "ctx"])
    (folder / "train.tsv").write_text(f"{good}\n{good}\nonly\tthree\tcells\n", encoding="utf-8")
    (folder / "valid.tsv").write_text(good + "\n", encoding="utf-8")
    (folder / "test.tsv").write_text(good + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.tsv:3: expected 14"):
        load("liar", str(tmp_path))


def test_liar_loads_fast(data_dir: Path) -> None:
    import time

    start = time.perf_counter()
    load("liar", str(data_dir))
    assert time.perf_counter() - start < 1.0


# --- GSM8K and BBH --------------------------------------------------------------------


def test_gsm8k_answers_follow_hashes_without_commas(data_dir: Path, gsm8k: Dataset) -> None:
    assert gsm8k.metric == "numeric"
    for split in ("train", "test"):
        lines = (data_dir / "gsm8k" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        samples = gsm8k.pools[split]
        assert len(samples) == len(records)
        for index, (sample, record) in enumerate(zip(samples, records)):
            assert sample.id == f"gsm8k/{split}/{index}"
            assert sample.fields == {"question": record["question"]}
            final = record["answer"].split("#### ")[-1].strip()
            assert sample.answer == final.replace(",", "")
            assert "," not in sample.answer
    with_commas = [r for r in records if "," in r["answer"].split("#### ")[-1]]
    assert with_commas, "test split is expected to contain answers like 1,000"
    assert gsm8k.pools["test"][0].answer == "18"  # Janet's ducks


def test_bbh_load(data_dir: Path) -> None:
    raw = json.loads((data_dir / "bbh" / "date_understanding.json").read_text(encoding="utf-8"))
    dataset = load("bbh:date_understanding", str(data_dir))
    assert dataset.name == "bbh:date_understanding"
    assert dataset.metric == "exact"
    assert list(dataset.pools) == ["all"]
    samples = dataset.pools["all"]
    assert len(samples) == len(raw["examples"])
    assert [s.fields["question"] for s in samples] == [e["input"] for e in raw["examples"]]
    assert [s.answer for s in samples] == [e["target"] for e in raw["examples"]]
    assert samples[3].id == "bbh/date_understanding/3"


@pytest.mark.parametrize("spec", ["bbh:no_such_task", "bbh", "bbh:../liar/train"])
def test_bbh_unknown_task_lists_available(data_dir: Path, spec: str) -> None:
    with pytest.raises(DataError) as err:
        load(spec, str(data_dir))
    message = str(err.value)
    assert "navigate" in message and "web_of_lies" in message


# --- where data is looked for ------------------------------------------------------------


def test_data_dirs_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data_dirs(str(tmp_path / "flag")) == [
        tmp_path / "flag",
        tmp_path / "env",
        tmp_path / "cache" / "sbpc" / "datasets",
    ]
    monkeypatch.delenv(DATA_DIR_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert data_dirs() == [Path.home() / ".cache" / "sbpc" / "datasets"]


def test_env_var_is_used(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    assert len(load("bbh:navigate").pools["all"]) > 0
    # the flag wins over the environment
    (tmp_path / "bbh").mkdir()
    (tmp_path / "bbh" / "navigate.json").write_text(
        json.dumps({"examples": [{"input": "q", "target": "Yes"}]}), encoding="utf-8"
    )
    assert len(load("bbh:navigate", str(tmp_path)).pools["all"]) == 1


@pytest.mark.parametrize("spec", ["liar", "gsm8k", "bbh:navigate"])
def test_missing_data_lists_every_dir(spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataError) as err:
        load(spec, str(tmp_path / "flag"))
    message = str(err.value)
    for folder in ("flag", "env", "cache"):
        assert str(tmp_path / folder) in message
    assert DATA_DIR_ENV in message and "pass data_dir= to a folder" in message and "--" not in message
    assert "pass --data-dir to a folder" in err.value.cli  # as the command line spells it
    assert "github.com/openai/grade-school-math" in message


def test_unknown_spec() -> None:
    with pytest.raises(DataError, match="unknown data set"):
        load("mnist")


# --- user files ----------------------------------------------------------------------------


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_user_jsonl(tmp_path: Path) -> None:
    rows = [{"q": "2+2", "n": 4, "label": "four"}, {"q": "1+1", "n": 2, "label": "two"}]
    spec = _write(tmp_path / "math.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    dataset = load(spec)
    assert dataset.name == "math.jsonl" and dataset.metric == "exact"
    assert dataset.pools["all"] == (
        Sample("math.jsonl:1", {"q": "2+2", "n": "4"}, "four"),  # named by line, as data errors are
        Sample("math.jsonl:2", {"q": "1+1", "n": "2"}, "two"),
    )


def test_user_answer_column_preference(tmp_path: Path) -> None:
    spec = _write(tmp_path / "d.jsonl", json.dumps({"target": "t", "label": "l", "answer": "a"}))
    sample = load(spec).pools["all"][0]
    assert sample.answer == "a" and sample.fields == {"target": "t", "label": "l"}
    spec = _write(tmp_path / "e.jsonl", json.dumps({"target": "t", "x": "1"}))
    assert load(spec).pools["all"][0].answer == "t"


def test_a_file_and_the_same_records_in_memory_give_the_same_samples(tmp_path: Path) -> None:
    rows = [{"q": "2+2", "n": 4, "Label": " four "}, {"q": "1+1", "n": [2], "Label": "two"}]
    spec = _write(tmp_path / "math.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    from_file, in_memory = load(spec).pools["all"], from_records(rows, "math.jsonl")
    assert [(s.fields, s.answer) for s in from_file] == [(s.fields, s.answer) for s in in_memory]
    assert from_file[0].fields == {"q": "2+2", "n": "4"} and from_file[0].answer == "four"
    assert [s.id for s in from_file] == [s.id for s in in_memory] == ["math.jsonl:1", "math.jsonl:2"]
    assert from_file[1].where == f"{spec}:2" and in_memory[1].where == "math.jsonl:2" and in_memory[1].given is rows[1]


def test_user_csv_with_quoted_commas(tmp_path: Path) -> None:
    spec = _write(tmp_path / "d.csv", 'text,answer\n"a, b and ""c""",Yes\nplain,No\n')
    samples = load(spec).pools["all"]
    assert [s.fields["text"] for s in samples] == ['a, b and "c"', "plain"]
    assert [s.answer for s in samples] == ["Yes", "No"]
    assert [s.id for s in samples] == ["d.csv:2", "d.csv:3"]  # the lines they are on, under the header


def test_user_tsv_keeps_quote_characters(tmp_path: Path) -> None:
    # a quote opening a field would start a multi-line quoted field under csv's default quoting
    spec = _write(tmp_path / "d.tsv", 'text\tlabel\n"Quoted" he said "hi\tYes\n"open\tNo\nlast\tYes\n')
    samples = load(spec).pools["all"]
    assert [s.fields["text"] for s in samples] == ['"Quoted" he said "hi', '"open', "last"]
    assert [s.answer for s in samples] == ["Yes", "No", "Yes"]


def test_user_file_without_answer_column_keeps_every_column_for_the_pipeline_to_name(tmp_path: Path) -> None:
    spec = _write(tmp_path / "d.csv", "question,output\nq,o\n")
    [sample] = load(spec).pools["all"]  # `output answer from "output"` names the answer; a run without it is refused
    assert sample.fields == {"question": "q", "output": "o"} and sample.answer == ""


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("bad.jsonl", '{"answer": "a"}\n{"answer": "b"}\n{"answer": oops}\n', "bad.jsonl:3:"),
        ("list.jsonl", '{"answer": "a"}\n\n[1, 2]\n', "list.jsonl:3:"),
        ("short.csv", "a,answer\n1,x\n2,y\n3\n", "short.csv:4:"),
        ("long.tsv", "a\tanswer\n1\tx\t9\n", "long.tsv:2:"),
        ("missing.jsonl", '{"answer": "a"}\n{"label": "b"}\n', "missing.jsonl:2:"),
    ],
)
def test_bad_lines_report_path_and_line(tmp_path: Path, name: str, text: str, where: str) -> None:
    spec = _write(tmp_path / name, text)
    with pytest.raises(DataError) as err:
        load(spec)
    assert where in str(err.value)


def test_unreadable_files_give_data_errors(tmp_path: Path) -> None:
    cases = {
        "missing": str(tmp_path / "nope.jsonl"),
        "directory": str(tmp_path / "dir.csv"),
        "invalid UTF-8": str(tmp_path / "latin1.csv"),
        "empty": str(tmp_path / "empty.tsv"),
        "no rows": str(tmp_path / "header.csv"),
    }
    (tmp_path / "dir.csv").mkdir()
    (tmp_path / "latin1.csv").write_bytes("text,answer\ncaf\xe9,Yes\n".encode("latin-1"))
    (tmp_path / "empty.tsv").write_text("  \n", encoding="utf-8")
    (tmp_path / "header.csv").write_text("text,answer\n", encoding="utf-8")
    for what, spec in cases.items():
        with pytest.raises(DataError) as err:
            load(spec)
        assert Path(spec).name in str(err.value), what
    with pytest.raises(DataError, match=r"latin1\.csv:2: not valid UTF-8"):
        load(cases["invalid UTF-8"])


# --- splits ---------------------------------------------------------------------------------


def _ids(samples: tuple[Sample, ...]) -> list[str]:
    return [s.id for s in samples]


def test_splits_reproducible_and_seed_dependent(liar: Dataset) -> None:
    first = make_splits(liar, 50, 20, 30, seed=7)
    again = make_splits(liar, 50, 20, 30, seed=7)
    other = make_splits(liar, 50, 20, 30, seed=8)
    assert first == again
    assert _ids(first.train) != _ids(other.train)
    assert _ids(first.test) != _ids(other.test)
    assert (len(first.train), len(first.val), len(first.test)) == (50, 20, 30)


def test_splits_use_official_test_pool(liar: Dataset) -> None:
    train_ids = {s.id for s in liar.pools["train"]}
    test_ids = {s.id for s in liar.pools["test"]}
    splits = make_splits(liar, 100, 100, len(test_ids), seed=1)
    assert {s.id for s in splits.test} == test_ids
    assert {s.id for s in splits.train + splits.val} <= train_ids
    assert not {s.id for s in splits.train} & {s.id for s in splits.val}


def test_splits_single_pool_never_overlap(data_dir: Path) -> None:
    dataset = load("bbh:navigate", str(data_dir))
    total = len(dataset.pools["all"])
    splits = make_splits(dataset, total - 30, 20, 10, seed=3)
    ids = _ids(splits.train) + _ids(splits.val) + _ids(splits.test)
    assert len(ids) == len(set(ids)) == total
    empty = make_splits(dataset, 0, 0, 0, seed=3)
    assert empty == make_splits(dataset, 0, 0, 0, seed=4) and empty.train == ()


def test_splits_too_large_say_how_many_are_available(liar: Dataset, data_dir: Path) -> None:
    available = len(liar.pools["train"])
    with pytest.raises(DataError, match=str(available)):
        make_splits(liar, available, 1, 0, seed=0)
    with pytest.raises(DataError, match=str(len(liar.pools["test"]))):
        make_splits(liar, 0, 0, len(liar.pools["test"]) + 1, seed=0)
    bbh = load("bbh:navigate", str(data_dir))
    with pytest.raises(DataError, match=str(len(bbh.pools["all"]))):
        make_splits(bbh, len(bbh.pools["all"]), 0, 1, seed=0)
    with pytest.raises(DataError):
        make_splits(bbh, -1, 0, 0, seed=0)


# --- your data in one flag ----------------------------------------------------------------------


def test_json_values_that_are_not_strings_arrive_as_json_text(tmp_path: Path) -> None:
    row = {
        "obj": {"sentiment": "négatif"},
        "items": [1, "a"],
        "n": 2.5,
        "yes": True,
        "none": None,
        "answer": {"label": "x"},
    }
    sample = load(_write(tmp_path / "d.jsonl", json.dumps(row))).pools["all"][0]
    assert sample.fields == {
        "obj": '{"sentiment": "négatif"}',
        "items": '[1, "a"]',
        "n": "2.5",
        "yes": "true",
        "none": "null",
    }
    assert sample.answer == '{"label": "x"}'  # so `metric json` can match an object answer


def test_eval_scores_a_small_user_file_whole_unless_sizes_are_given(tmp_path: Path) -> None:
    spec = _write(tmp_path / "ten.jsonl", "".join(json.dumps({"q": str(i), "answer": "a"}) + "\n" for i in range(10)))
    dataset = load(spec)
    whole = eval_splits(dataset, None, None, None, seed=0, defaults=(20, 20, 100))
    assert [s.id for s in whole.test] == [f"ten.jsonl:{i}" for i in range(1, 11)] and whole.train == whole.val == ()
    assert len(eval_splits(dataset, None, None, 3, seed=0, defaults=(2, 2, 100)).test) == 3
    asked_for_train = eval_splits(dataset, None, None, None, seed=0, defaults=(4, 2, 100), split="train")
    assert asked_for_train.train == make_splits(dataset, 4, 2, 3, seed=0).train  # as optimize carves it, never empty
    with pytest.raises(DataError) as err:
        eval_splits(dataset, 20, None, None, seed=0, defaults=(20, 20, 100))
    message = str(err.value)
    assert "asked for 140" in message and "has only 10" in message
    assert "for example train_size=1, val_size=1, test_size=7" in message and "no size scores the whole file" in message
    assert "for example --train-size 1 --val-size 1 --test-size 7" in err.value.cli
    assert message.endswith("; evaluate() with no size scores the whole file")
    assert err.value.cli.endswith("; `eval` with no size scores the whole file")


def test_too_large_for_optimize_does_not_send_the_user_to_eval(tmp_path: Path, capsys) -> None:
    from sembp_dsl import cli

    spec = _write(tmp_path / "ten.jsonl", "".join(json.dumps({"q": str(i), "answer": "a"}) + "\n" for i in range(10)))
    with pytest.raises(DataError, match="has only 10; pass sizes") as err:
        make_splits(load(spec), 20, 20, 100, seed=0)  # what optimize and compare carve
    assert "eval" not in str(err.value) + err.value.cli and "whole file" not in str(err.value)
    pipeline = _write(
        tmp_path / "p.sbp",
        'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n',
    )
    assert cli.main(["optimize", pipeline, "--data", spec, "--train-size", "20", "--model", "openai/fake"]) == 1
    err = capsys.readouterr().err
    assert "has only 10; pass sizes that add up to at most 10, for example --train-size" in err
    assert "eval" not in err and "Traceback" not in err


def _rows(n: int, prefix: str = "q") -> str:
    return "".join(json.dumps({"q": f"{prefix}{i}", "answer": "a"}) + "\n" for i in range(n))


def test_eval_draws_only_the_rows_that_place_the_scored_split(tmp_path: Path, liar: Dataset) -> None:
    ten = load(_write(tmp_path / "ten.jsonl", _rows(10)))
    train = eval_splits(ten, None, None, None, seed=0, defaults=(4, 20, 100), split="train")  # cut first: no val rows
    assert train.train == make_splits(ten, 4, 3, 3, seed=0).train and train.val == train.test == ()
    val = eval_splits(ten, None, None, None, seed=0, defaults=(4, 3, 100), split="val")  # behind train, not test
    assert val.val == make_splits(ten, 4, 3, 3, seed=0).val and val.test == ()
    # with a test file (or pool) the test split does not move with train and val: no rows are drawn for them
    small = load(_write(tmp_path / "train.jsonl", _rows(3)), test_data=_write(tmp_path / "test.jsonl", _rows(8, "t")))
    test = eval_splits(small, None, None, 5, seed=0, defaults=(20, 20, 100))
    assert (
        test.test == make_splits(small, 2, 1, 5, seed=0).test and len(test.test) == 5 and test.train == test.val == ()
    )
    official = eval_splits(liar, None, None, 5, seed=3, defaults=(20, 20, 100))
    assert official.test == make_splits(liar, 20, 20, 5, seed=3).test and official.train == ()
    with pytest.raises(ValueError, match="did you mean 'test'"):
        eval_splits(liar, None, None, 5, seed=3, defaults=(20, 20, 100), split="tset")


def test_eval_test_split_stays_behind_the_rows_optimize_trains_and_gates_on(tmp_path: Path) -> None:
    pool = load(_write(tmp_path / "d.jsonl", _rows(45)))
    optimized = make_splits(pool, 20, 20, 5, seed=2)  # what optimize draws with the block's sizes
    scored = eval_splits(pool, None, None, 5, seed=2, defaults=(20, 20, 100)).test
    assert scored == optimized.test and not set(scored) & set(optimized.train + optimized.val)
    with pytest.raises(DataError) as err:  # a smaller file cannot hold them: say why, and the ways out
        eval_splits(load(_write(tmp_path / "ten.jsonl", _rows(10))), None, None, 5, seed=2, defaults=(20, 20, 100))
    message = str(err.value)
    assert "asked for 45 samples (train + val + test) but the 'all' pool has only 10" in message
    assert (
        "the test split comes after the 20 train and 20 val samples `optimize` draws by default, so it never "
        "overlaps them: pass the sizes you optimize with, or train_size=0, val_size=0 if you do not optimize "
        "on this data; evaluate() with no size scores the whole file"
    ) in message
    assert "or --train-size 0 --val-size 0 if" in err.value.cli and "_size" not in err.value.cli


def test_eval_of_a_small_file_on_the_command_line(tmp_path: Path, fake_llm, capsys) -> None:
    from conftest import with_fake_model

    from sembp_dsl import cli

    pipeline = _write(
        tmp_path / "p.sbp",
        with_fake_model(
            'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n',
            fake_llm.url,
        ),
    )
    ten = _write(tmp_path / "ten.jsonl", _rows(10))
    assert cli.main(["eval", pipeline, "--data", ten, "--test-size", "5"]) == 1
    err = capsys.readouterr().err
    assert (
        "--train-size 0 --val-size 0 if you do not optimize on this data; `eval` with no size scores the whole file"
        in err
        and "Traceback" not in err
        and fake_llm.requests == 0
    )
    few = _write(tmp_path / "few.jsonl", _rows(3))
    runs = str(tmp_path / "runs")  # not the working directory's .sbpc/runs
    assert (
        cli.main(
            ["eval", pipeline, "--data", few, "--test-data", ten, "--test-size", "5", "--json", "--runs-dir", runs]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["scored"] == 5


@pytest.mark.parametrize("sizes", [(20, 20, 5), (20, 0, 100), (1, 1, 1000), (0, 0, 7), (3, 3, 3)])
def test_the_sizes_suggested_always_fit_and_keep_every_split_asked_for(sizes: tuple[int, int, int]) -> None:
    for available in range(sum(sizes)):
        pool = Dataset("d", {"all": tuple(Sample(str(i), {}, "a") for i in range(available))}, "exact")
        with pytest.raises(DataError) as err:
            make_splits(pool, *sizes, seed=0)
        message = str(err.value)
        example = re.search(r"for example train_size=(\d+), val_size=(\d+), test_size=(\d+)$", message)
        if not available:
            assert message.endswith("but the 'all' pool is empty")
        elif sum(map(bool, sizes)) > available:  # not one sample for each split asked for
            assert message.endswith(f"pass sizes that add up to at most {available}")
        else:
            fitting = tuple(int(size) for size in example.groups())
            assert all(bool(f) == bool(s) for f, s in zip(fitting, sizes)), (available, fitting)
            make_splits(pool, *fitting, seed=0)  # the example is usable as given


def test_built_in_data_is_not_scored_whole(data_dir: Path) -> None:
    bbh = load("bbh:navigate", str(data_dir))
    assert len(eval_splits(bbh, None, None, None, seed=0, defaults=(0, 0, 100)).test) == 100


def test_separate_test_file(tmp_path: Path) -> None:
    train = _write(
        tmp_path / "train.jsonl", "".join(json.dumps({"q": f"t{i}", "answer": "a"}) + "\n" for i in range(6))
    )
    test = _write(tmp_path / "test.csv", "q,answer\nx1,b\nx2,b\nx3,b\n")
    dataset = load(train, test_data=test)
    assert dataset.name == "train.jsonl+test.csv"
    splits = make_splits(dataset, 3, 3, 3, seed=1)
    assert {s.fields["q"] for s in splits.train + splits.val} == {f"t{i}" for i in range(6)}
    assert {s.fields["q"] for s in splits.test} == {"x1", "x2", "x3"}
    whole = eval_splits(dataset, None, None, None, seed=0, defaults=(1, 1, 100))
    assert [s.fields["q"] for s in whole.test] == ["x1", "x2", "x3"]
    with pytest.raises(DataError, match="for example test_size=3$|for example test_size=3;") as err:
        make_splits(dataset, 0, 0, 4, seed=0)
    assert "for example --test-size 3" in err.value.cli


def test_bbh_task_names_get_a_did_you_mean(data_dir: Path) -> None:
    with pytest.raises(DataError, match="did you mean 'navigate'"):
        load("bbh:navigat", str(data_dir))


def test_a_fifo_as_data_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        load(str(fifo))


def test_a_data_dir_that_is_a_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DataError, match="^data_dir='file' is a file") as err:
        monkeypatch.chdir(tmp_path)
        load("liar", "file")
    assert err.value.cli.startswith("--data-dir 'file' is a file")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "file"))
    with pytest.raises(DataError, match=f"\\${DATA_DIR_ENV} .* is a file"):
        data_dirs()


def test_a_relative_data_dir_variable_is_anchored_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DATA_DIR_ENV, "data")
    anchor_data_dir()
    monkeypatch.chdir("/")
    assert os.environ[DATA_DIR_ENV] == str(tmp_path / "data") and data_dirs()[0] == tmp_path / "data"


def test_evaluate_in_python_takes_a_test_file_of_its_own(tmp_path: Path, fake_llm) -> None:
    """`Data(test_data=)` as `sbpc eval --test-data`: a 3-row training file and its 10-row test file."""
    from conftest import with_fake_model

    import sembp_dsl as sbp

    pipeline = _write(
        tmp_path / "p.sbp",
        with_fake_model(
            'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n',
            fake_llm.url,
        ),
    )
    few, ten = _write(tmp_path / "few.jsonl", _rows(3)), _write(tmp_path / "ten.jsonl", _rows(10, "t"))
    with sbp.load(pipeline, cache=False) as p:
        report = p.evaluate(sbp.Data(few, test_data=ten), test_size=5)
    assert report.scored == 5 and fake_llm.requests == 5
    assert all(result.sample.fields["q"].startswith("t") for result in report.results)  # rows of the test file


# --- reading once, and reading fast ---------------------------------------------------


def test_a_data_set_is_read_once_while_its_files_stay_as_they_were(tmp_path: Path, monkeypatch, data_dir) -> None:
    monkeypatch.setattr(loading, "_SETTLED", -1.0)  # every file counts as settled, however new
    assert load("liar", str(data_dir)) is load("liar", str(data_dir))  # eval asks twice: to show, then to run
    spec = _write(tmp_path / "d.jsonl", json.dumps({"q": "a", "answer": "x"}))
    first = load(spec)
    assert load(spec) is first
    _write(tmp_path / "d.jsonl", json.dumps({"q": "a longer question", "answer": "y"}))
    assert load(spec).pools["all"][0].answer == "y"


def test_a_file_changed_a_moment_ago_is_read_again_even_with_its_old_size_and_times(tmp_path: Path) -> None:
    """The kernel stamps files with a coarse clock: a file rewritten at once can show the size and times it had."""
    path = tmp_path / "d.jsonl"
    spec = _write(path, json.dumps({"q": "a", "answer": "x"}))
    stamp = path.stat()
    assert load(spec).pools["all"][0].answer == "x"
    _write(path, json.dumps({"q": "a", "answer": "y"}))  # as many bytes
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert load(spec).pools["all"][0].answer == "y"


@settings(max_examples=400, deadline=None)
@given(
    st.text(
        st.sampled_from(
            ["a", " ", "\t", "\n", "\r", '"', "'", ",", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\\", "\0"]
        ),
        max_size=40,
    )
)
def test_a_tsv_is_split_as_the_csv_module_reads_it(text: str) -> None:
    """LIAR's files and a user's .tsv are unquoted: where csv would read a line as a record, str.split reads it
    (three times as fast); where it might not (a CR, a NUL), csv reads it."""
    path = Path("d.tsv")
    assert list(reading.csv_rows(path, text, "\t", csv.QUOTE_NONE)) == list(
        reading._csv_read(path, text, "\t", csv.QUOTE_NONE)
    )
