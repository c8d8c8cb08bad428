"""A hostile user's data: split files that are links (to nothing, in a loop, to a virtual file), devices, files too
large to hold, JSON that is no text, answers that are null, a file named for two splits through a link, a --test-data
with a name no data file has, a folder named like a file, a folder with a whole disk under it, and init writing where
it cannot. Each is said where it is, as an error a user can act on: never a traceback, never a silent result."""

from __future__ import annotations

import json
import os
import resource
import textwrap
import threading
from pathlib import Path

import pytest

from sembp_dsl import cli
from sembp_dsl.runtime import datasets
from sembp_dsl.runtime.datasets import DataError, folders, load, tables

SOURCE = textwrap.dedent("""\
    pipeline echo "Answer a question"
    input q: text
    param ask = "Answer Yes or No."
    node answer: choice(Yes, No) { prompt = ask }
    q -> answer
    output answer
    data { train = "data/train.jsonl"  test = "data/test.jsonl" }
    """)


def rows(name: str, count: int = 4) -> str:
    return "".join(json.dumps({"q": f"{name}-{i}", "answer": "No"}) + "\n" for i in range(count))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A pipeline whose data block names data/train.jsonl and data/test.jsonl, both there."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text(rows("train"))
    (tmp_path / "data" / "test.jsonl").write_text(rows("test"))
    (tmp_path / "echo.sbp").write_text(SOURCE)
    return tmp_path


def check(folder: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    code = cli.main(["check", str(folder / "echo.sbp")])
    return code, capsys.readouterr().err


def test_a_split_file_linking_to_nothing_says_so_and_suggests_no_name(folder, capsys):
    (folder / "data" / "test.jsonl").unlink()
    (folder / "data" / "test.jsonl").symlink_to("gone.jsonl")
    code, err = check(folder, capsys)
    assert code == 1 and "test.jsonl: a symbolic link to gone.jsonl, which does not exist" in err
    assert "did you mean" not in err  # before, it suggested the very name written


def test_a_loop_of_links_is_said_as_one(folder, capsys):
    for a, b in (("a", "b"), ("b", "a")):
        (folder / "data" / f"{a}.jsonl").symlink_to(f"{b}.jsonl")
    (folder / "echo.sbp").write_text(SOURCE.replace("data/test.jsonl", "data/a.jsonl"))
    code, err = check(folder, capsys)
    assert code == 1 and "a.jsonl: a symbolic link that leads back to itself" in err and "not found" not in err


def test_a_link_to_a_virtual_file_reads_what_its_size_says_not_the_process_environment(folder, capsys, monkeypatch):
    monkeypatch.setenv("SBPC_AUDIT_SECRET", "hunter2")
    (folder / "data" / "env.csv").symlink_to("/proc/self/environ")
    (folder / "echo.sbp").write_text(SOURCE.replace("data/test.jsonl", "data/env.csv"))
    code, err = check(folder, capsys)
    assert code == 1 and "env.csv: file is empty" in err and "hunter2" not in err


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet", ".arrow"])
def test_a_device_or_pipe_is_refused_by_name_whatever_its_suffix(tmp_path, suffix):
    pytest.importorskip("pyarrow")
    device = tmp_path / f"zero{suffix}"
    device.symlink_to("/dev/zero")
    fifo = tmp_path / f"fifo{suffix}"
    os.mkfifo(fifo)
    for path in (device, fifo):
        with pytest.raises(DataError, match="not a regular file"):  # the Parquet one said 'file not found'
            load(str(path))


def test_a_file_too_large_to_hold_is_a_data_error_not_a_crash(tmp_path):
    big = tmp_path / "big.jsonl"
    with big.open("wb") as file:
        file.truncate(3 << 30)  # sparse: no disk, but 3 GB to read
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, hard))
    try:
        with pytest.raises(DataError, match=r"too large to read into memory \(3,221,225,472 bytes\)"):
            load(str(big))
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_a_lone_surrogate_in_json_is_a_bad_row_named_by_check_not_a_sample_lost_in_the_run(folder, capsys):
    (folder / "data" / "test.jsonl").write_text(
        '{"q": "fine", "answer": "No"}\n{"q": "half \\ud800", "answer": "No"}\n'
    )
    code, err = check(folder, capsys)
    assert code == 1 and "test.jsonl:2: a \\ud800-\\udfff escape that pairs with none" in err
    paired = folder / "paired.jsonl"  # a whole pair is one character, and fine
    paired.write_text('{"q": "\\ud83d\\ude00", "answer": "No"}\n')
    assert [s.fields["q"] for s in load(str(paired)).pools["all"]] == ["\U0001f600"]


def test_a_null_answer_is_no_answer_not_the_word_null(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"q": "a", "answer": null}\n{"q": "b", "answer": "No"}\n')
    assert [s.answer for s in load(str(data)).pools["all"]] == ["", "No"]  # was "null", scored against as a label


def test_eval_says_a_row_with_a_null_answer_has_none(folder, capsys):
    (folder / "data" / "test.jsonl").write_text('{"q": "a", "answer": "No"}\n{"q": "b", "answer": null}\n')
    code = cli.main(["eval", str(folder / "echo.sbp"), "--model", "openai/x", "--api-base", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 1 and "test.jsonl:2: no expected answer (its value is blank or null)" in err


@pytest.mark.parametrize("name", ["test.txt", "test.JSON", "test"])
def test_test_data_with_a_name_no_data_file_has_is_refused_as_check_refuses_it_in_the_block(folder, capsys, name):
    (folder / "data" / name).write_text(rows("test"))  # was read as CSV, its JSON lines as one column
    code = cli.main(["eval", str(folder / "echo.sbp"), "--test-data", str(folder / "data" / name)])
    err = capsys.readouterr().err
    assert code == 1 and f"{name}: the test split's own file is named .jsonl, .csv, .tsv, .parquet or .arrow" in err
    (folder / "echo.sbp").write_text(SOURCE.replace("data/test.jsonl", f"data/{name}"))
    code, err = check(folder, capsys)
    assert code == 1 and "error[E134]" in err


def test_a_folder_as_test_data_is_refused_as_in_the_block(folder, capsys):
    with pytest.raises(DataError, match="a split's own data is one file"):
        load(str(folder / "data" / "train.jsonl"), test_data=str(folder / "data"))


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_one_file_for_two_splits_through_a_link_is_e140(folder, capsys, link):
    link(folder / "data" / "train.jsonl", folder / "data" / "again.jsonl")
    (folder / "echo.sbp").write_text(SOURCE.replace("data/test.jsonl", "data/again.jsonl"))
    code, err = check(folder, capsys)
    assert code == 1 and "error[E140]: 'test' names the file 'train' names" in err
    (folder / "echo.sbp").write_text(SOURCE.replace("data/test.jsonl", "data/../data/./train.jsonl"))
    assert "error[E140]" in check(folder, capsys)[1]


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_the_same_file_as_data_and_test_data_is_refused_before_any_call(folder, capsys, link):
    train = folder / "data" / "train.jsonl"
    link(train, folder / "data" / "again.jsonl")
    for test in (train, folder / "data" / "again.jsonl", folder / "data" / ".." / "data" / "train.jsonl"):
        code = cli.main(
            ["optimize", str(folder / "echo.sbp"), "--plan", "--data", str(train), "--test-data", str(test)]
        )
        err = capsys.readouterr().err
        assert code == 1 and "is the file the train split reads" in err and "alike" in err
    with pytest.raises(DataError, match="the validation split alike"):
        load(str(train), validation_data=str(folder / "data" / "again.jsonl"))
    with pytest.raises(DataError, match="the validation and the test split alike"):
        load(
            str(train),
            test_data=str(folder / "data" / "test.jsonl"),
            validation_data=str(folder / "data" / "test.jsonl"),
        )


def test_a_folder_split_a_test_file_replaces_is_no_overlap_but_its_train_split_is(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "train.jsonl").write_text(rows("train"))
    (tmp_path / "hf" / "test.jsonl").write_text(rows("test"))
    assert len(load(str(tmp_path / "hf"), test_data=str(tmp_path / "hf" / "test.jsonl")).pools["test"]) == 4
    with pytest.raises(DataError, match="the train split reads"):
        load(str(tmp_path / "hf"), test_data=str(tmp_path / "hf" / "train.jsonl"))


def test_a_folder_named_like_a_file_is_read_as_the_folder_check_reads(folder, capsys):
    named = folder / "data" / "all.jsonl"
    named.mkdir()
    (named / "train.jsonl").write_text(rows("train"))
    (named / "test.jsonl").write_text(rows("test", 3))
    (folder / "echo.sbp").write_text(
        SOURCE.replace('train = "data/train.jsonl"  test = "data/test.jsonl"', 'file = "data/all.jsonl"')
    )
    assert check(folder, capsys)[0] == 0
    assert {pool: len(s) for pool, s in load(str(named)).pools.items()} == {
        "train": 4,
        "test": 3,
    }  # was: is a directory


def test_a_folder_with_a_disk_under_it_is_refused_in_a_moment_not_walked(tmp_path, monkeypatch):
    monkeypatch.setattr(folders, "FOLDER_ENTRIES", 50)  # "/" took 12 s here, and named every file it found
    for i in range(60):
        (tmp_path / f"notes-{i}.txt").write_text("")
    with pytest.raises(DataError, match="more than 50 files and folders under it, so not a data set's folder"):
        load(str(tmp_path))


def test_files_without_a_split_word_are_named_ten_at_most(tmp_path):
    (tmp_path / "train.jsonl").write_text(rows("train"))
    for i in range(25):
        (tmp_path / f"part{i:02}.jsonl").write_text(rows("part"))
    with pytest.raises(DataError, match=r"part09.jsonl and 15 more: name each file") as err:
        load(str(tmp_path))
    assert "part10" not in str(err.value)


def test_one_split_in_two_formats_is_refused_not_read_twice(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text(rows("train"))
    pq.write_table(pa.table({"q": [f"train-{i}" for i in range(4)], "answer": ["No"] * 4}), tmp_path / "train.parquet")
    with pytest.raises(DataError, match=r"the train split's files are .jsonl and .parquet files alike"):
        load(str(tmp_path))  # was: 8 train rows, each twice


def test_init_into_a_folder_that_is_not_there_is_an_error_not_a_crash(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text(rows("t"))
    assert cli.main(["init", "--data", "t.jsonl", "Triage", "--out", "nowhere/p.sbp"]) == 1  # was exit 70
    assert "nowhere/p.sbp: cannot write it: No such file or directory" in capsys.readouterr().err


def test_init_that_cannot_finish_its_file_leaves_none_behind(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text(rows("t"))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, hard))  # as a full disk: Python ignores SIGXFSZ, writes fail
    try:
        code = cli.main(["init", "--data", "t.jsonl", "Triage", "--out", "p.sbp"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code == 1 and "p.sbp: cannot write it: File too large" in capsys.readouterr().err
    assert not (tmp_path / "p.sbp").exists()  # so the next try is not told it exists
    assert cli.main(["init", "--data", "t.jsonl", "Triage", "--out", "p.sbp"]) == 0


@pytest.mark.parametrize(
    ("value", "said"),
    [("1" + "0" * 5000, "a number with too many digits"), ("[" * 100_000 + "]" * 100_000, "nested too deeply")],
)
def test_json_python_cannot_hold_is_a_bad_row_not_a_crash(folder, capsys, value, said):
    (folder / "data" / "test.jsonl").write_text(f'{{"q": "a", "answer": "No"}}\n{{"q": {value}, "answer": "No"}}\n')
    code, err = check(folder, capsys)  # was exit 70: a ValueError, a RecursionError
    assert code == 1 and f"test.jsonl:2: invalid JSON: {said}" in err and "Traceback" not in err
    listing = folder / "hf"
    listing.mkdir()
    (listing / "dataset_dict.json").write_text(f'{{"splits": {value}}}')
    with pytest.raises(DataError, match=f"dataset_dict.json:1: invalid JSON: {said}"):
        load(str(listing))


def test_a_hub_test_splits_hidden_label_minus_one_is_no_answer_not_the_label_minus_one(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    features = {"label": {"names": ["negative", "positive"], "_type": "ClassLabel"}}
    data = pa.table({"text": ["a", "b", "c"], "label": [1, -1, 0]})
    pq.write_table(
        data.replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": features}})}),
        tmp_path / "t.parquet",
    )
    assert [s.answer for s in load(str(tmp_path / "t.parquet")).pools["all"]] == ["positive", "", "negative"]
    pq.write_table(data, tmp_path / "plain.parquet")  # no class names: -1 is a number like any other
    assert [s.answer for s in load(str(tmp_path / "plain.parquet")).pools["all"]] == ["1", "-1", "0"]


def test_an_arrow_file_with_two_columns_of_one_name_is_refused_not_one_of_them_lost(tmp_path):
    pa = pytest.importorskip("pyarrow")
    table = pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"]), pa.array(["No"])], names=["q", "q", "answer"])
    with pa.OSFile(str(tmp_path / "d.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(DataError, match="d.arrow: duplicate column names: q"):  # was: {'q': 'b'}, 'a' gone
        load(str(tmp_path / "d.arrow"))


def test_init_gives_columns_that_make_one_name_names_of_their_own(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    row = {"a b": "x", "a_b": "y", "a-b": "z", "input": "w", "answer": "No"}
    (tmp_path / "r.jsonl").write_text("".join(json.dumps({**row, "answer": a}) + "\n" for a in ("No", "Yes", "No")))
    assert cli.main(["init", "--data", "r.jsonl", "Triage"]) == 0  # was E020: duplicate node or input 'a_b'
    text = (tmp_path / "r.sbp").read_text()
    assert 'input a_b: text from "a b"' in text and 'input a_b_2: text from "a_b"' in text
    assert 'input a_b_3: text from "a-b"' in text and 'input input_: text from "input"' in text
    assert "checked: ok" in capsys.readouterr().out


def test_init_with_no_column_left_to_read_names_every_column_it_took(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text(rows("t"))
    with pytest.raises(SystemExit):
        cli.main(["init", "--data", "t.jsonl", "Triage", "--answer", "q"])
    err = capsys.readouterr().err
    assert "no column for the pipeline to read besides the answer, 'q', and 'answer', which a run reads as" in err


def test_a_runs_data_file_now_a_pipe_or_an_endless_device_is_changed_not_waited_on(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text(rows("train"))
    recorded = datasets.fingerprint(str(train))
    train.unlink()
    train.symlink_to("/dev/zero")  # `sbpc runs` read it to its end: memory, then exit 70
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, hard))
    try:
        assert datasets.fingerprint(str(train)) is None != recorded
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    train.unlink()
    os.mkfifo(train)  # `sbpc runs` waited on it for a writer, forever
    found: list = []
    reader = threading.Thread(target=lambda: found.append(datasets.fingerprint(str(train))), daemon=True)
    reader.start()
    reader.join(timeout=30)  # a bound on a failure, not a wait: a fixed reader returns at once
    if reader.is_alive():
        with open(train, "wb"):  # the writer it waited for, so the thread ends
            pass
        pytest.fail("fingerprint waited on a FIFO")
    assert found == [None]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({1, 2}, "example:2: a value cannot be sent as text or JSON: Object of type set"),
        (b"\xff", "example:2: a value cannot be sent as text or JSON: Object of type bytes"),
        ("half \ud800", "example:2: holds a lone surrogate ('\\ud800'), which no model request can carry"),
    ],
)
def test_examples_given_in_python_that_no_request_can_carry_are_named_as_inputs_are(folder, value, said):
    import sembp_dsl as sbp

    pipeline = sbp.load(str(folder / "echo.sbp"), model="openai/x", api_base="http://127.0.0.1:9")
    examples = [{"q": "fine", "answer": "No"}, {"q": value, "answer": "No"}]
    with pytest.raises(DataError) as err:  # was a TypeError, or (the surrogate) a sample lost with nothing scored
        pipeline.evaluate(examples)
    assert str(err.value) == said or str(err.value).startswith(said)


def test_two_saved_splits_of_one_meaning_are_read_together_not_one_of_them_lost(tmp_path):
    pa = pytest.importorskip("pyarrow")
    for split, count in (("validation", 2), ("dev", 3), ("train", 4)):
        (tmp_path / split).mkdir()
        data = pa.table({"q": [f"{split}-{i}" for i in range(count)], "answer": ["No"] * count})
        with pa.OSFile(str(tmp_path / split / "data.arrow"), "wb") as sink, pa.ipc.new_stream(sink, data.schema) as w:
            w.write_table(data)
    (tmp_path / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation", "dev"]}))
    pools = load(str(tmp_path)).pools
    assert {pool: len(samples) for pool, samples in pools.items()} == {"train": 4, "validation": 5}  # was 3: dev's


def test_a_table_file_saying_more_rows_than_a_run_could_use_is_refused_before_it_is_unpacked(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.setattr(tables, "MAX_TABLE_ROWS", 10)  # a file of 16 KB said 3,000,000 rows, read at ~7 s a million
    data = pa.table({"q": [f"r{i}" for i in range(11)], "answer": ["No"] * 11})
    pq.write_table(data, tmp_path / "big.parquet")
    with pa.OSFile(str(tmp_path / "big.arrow"), "wb") as sink, pa.ipc.new_stream(sink, data.schema) as writer:
        for batch in data.to_batches(max_chunksize=4):
            writer.write_batch(batch)
    with pa.OSFile(str(tmp_path / "file.arrow"), "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)
    for name, said in (("big.parquet", "11 rows"), ("big.arrow", "11 rows"), ("file.arrow", "11 rows")):
        with pytest.raises(DataError, match=f"{name}: {said} or more, past the 10 sbpc reads from one file"):
            load(str(tmp_path / name))
    pq.write_table(data.slice(0, 10), tmp_path / "fits.parquet")
    assert len(load(str(tmp_path / "fits.parquet")).pools["all"]) == 10


def test_init_from_a_file_whose_name_breaks_a_line_writes_a_pipeline_that_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = 'a\ninput stray: text\n"b.jsonl'  # the comment naming the data ended at the break, the rest read as code
    (tmp_path / name).write_text(rows("t"))
    assert cli.main(["init", "--data", name, "Triage", "--out", "p.sbp"]) == 0
    assert "checked: ok" in capsys.readouterr().out
    text = (tmp_path / "p.sbp").read_text()
    assert "\ninput stray" not in text and '# Written by `sbpc init` from "a\\ninput stray: text\\n\\"b.jsonl".' in text
    assert cli.main(["check", "p.sbp"]) == 0


def test_a_data_file_outside_the_pipelines_folder_has_its_fields_named_in_no_message(tmp_path, capsys):
    """A stranger's pipeline links its data to a file of secrets: check must not print that file's first line (its
    "fields") into a CI log; a file in the pipeline's folder still has its fields listed, to help."""
    repo, home = tmp_path / "repo", tmp_path / "home"
    (repo / "data").mkdir(parents=True)
    home.mkdir()
    (home / "netrc").write_text("machine x login y password hunter2\nmachine z login w password swordfish\n")
    (repo / "data" / "train.csv").symlink_to(home / "netrc")
    (repo / "data" / "test.jsonl").write_text(json.dumps({"question": "x", "answer": "No"}) + "\n")
    (repo / "echo.sbp").write_text(SOURCE.replace("data/train.jsonl", "data/train.csv"))
    code, err = check(repo, capsys)
    assert code == 1 and "E135" in err and "not shown: the file is outside the pipeline's folder" in err
    assert "hunter2" not in err and "password" not in err
    (repo / "data" / "train.csv").unlink()
    (repo / "data" / "train.csv").write_text("question,answer\nx,No\n")
    code, err = check(repo, capsys)
    assert code == 1 and "its fields: question, answer" in err
