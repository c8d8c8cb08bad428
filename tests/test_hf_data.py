"""Hugging Face data as people have it on disk: a folder `datasets.save_to_disk` wrote (Arrow stream files,
state.json, dataset_info.json, dataset_dict.json) and a hub snapshot (data/<split>-00000-of-00001.parquet, or
.jsonl/.csv per split), read by `init`, `--data` and the data block, their splits kept."""

from __future__ import annotations

import builtins
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import with_fake_model

from sembp_dsl import cli
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.runtime import datasets
from sembp_dsl.runtime.datasets import DataError

LABELS = ["negative", "positive"]
FEATURES = {"text": {"dtype": "string", "_type": "Value"}, "label": {"names": LABELS, "_type": "ClassLabel"}}


def table(rows: int, start: int = 0) -> pa.Table:
    """Rows as `datasets` stores them: the label a class number, the features in the schema's metadata."""
    data = {"text": [f"review {start + i}" for i in range(rows)], "label": [i % 2 for i in range(rows)]}
    metadata = {b"huggingface": json.dumps({"info": {"features": FEATURES}}).encode()}
    return pa.table(data).replace_schema_metadata(metadata)


def saved_to_disk(folder: Path, splits: dict[str, int]) -> Path:
    """The layout of DatasetDict.save_to_disk: a folder per split holding Arrow stream files and their state."""
    for split, rows in splits.items():
        (folder / split).mkdir(parents=True)
        data = table(rows, start=100 * len(split))
        with pa.OSFile(str(folder / split / "data-00000-of-00001.arrow"), "wb") as sink:
            with pa.ipc.new_stream(sink, data.schema) as writer:
                writer.write_table(data)
        state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": split, "_fingerprint": "x"}
        (folder / split / "state.json").write_text(json.dumps(state))
        (folder / split / "dataset_info.json").write_text(json.dumps({"features": FEATURES}))
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": list(splits)}))
    return folder


def snapshot(folder: Path, splits: dict[str, int]) -> Path:
    """A hub snapshot: data/<split>-00000-of-00001.parquet, beside a README the reader must leave alone."""
    (folder / "data").mkdir(parents=True)
    (folder / "README.md").write_text("---\nlicense: mit\n---\n")
    for split, rows in splits.items():
        pq.write_table(table(rows, start=100 * len(split)), folder / "data" / f"{split}-00000-of-00001.parquet")
    return folder


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(builtins, "input", lambda prompt="": pytest.fail("init asked a question off a terminal"))
    return tmp_path


def test_save_to_disk_keeps_its_splits_and_class_names(folder):
    data = datasets.load(str(saved_to_disk(folder / "imdb", {"train": 6, "test": 4})))
    assert {name: len(pool) for name, pool in data.pools.items()} == {"train": 6, "test": 4}
    first = data.pools["test"][0]
    assert first.fields == {"text": "review 400"} and first.answer == "negative"  # the class's name, not 0
    assert first.id == "test/data-00000-of-00001.arrow:1"  # one name per row across splits
    assert first.where == f"{folder}/imdb/test/data-00000-of-00001.arrow:1"
    assert {s.answer for s in data.pools["train"]} == set(LABELS)


def test_a_snapshots_splits_come_from_its_file_names_and_validation_is_drawn_from_its_own(folder):
    data = datasets.load(str(snapshot(folder / "snap", {"train": 8, "validation": 4, "test": 3})))
    assert {name: len(pool) for name, pool in data.pools.items()} == {"train": 8, "validation": 4, "test": 3}
    cut = datasets.make_splits(data, 5, 3, 2, seed=0)
    assert {s.id.split("-")[0] for s in cut.train} == {"data/train"}
    assert {s.id.split("-")[0] for s in cut.val} == {"data/validation"}
    assert {s.id.split("-")[0] for s in cut.test} == {"data/test"}
    with pytest.raises(DataError, match="'validation' pool has only 4"):
        datasets.make_splits(data, 5, 5, 2, seed=0)


@pytest.mark.parametrize(
    ("files", "pools"),
    [
        (("train.jsonl", "dev.jsonl"), {"train": 3, "validation": 3}),
        (("data/train/0000.jsonl", "data/test/0000.jsonl"), {"train": 3, "test": 3}),
        (("all.jsonl",), {"train": 3}),
    ],
)
def test_a_split_is_told_by_the_word_nearest_the_file(folder, files, pools):
    for name in files:
        (folder / "hf" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "hf" / name).write_text("".join(json.dumps({"q": f"q{i}", "answer": "a"}) + "\n" for i in range(3)))
    assert {name: len(pool) for name, pool in datasets.load("hf").pools.items()} == pools


def test_a_file_no_split_names_among_named_ones_is_said(folder):
    snapshot(folder / "snap", {"train": 2})
    pq.write_table(table(2), folder / "snap" / "data" / "extra.parquet")
    with pytest.raises(DataError, match=r"no split in the name of data/extra.parquet"):
        datasets.load("snap")


def test_a_hostile_listing_cannot_send_the_reader_out_of_the_folder(folder):
    saved_to_disk(folder / "saved", {"train": 2})
    (folder / "saved" / "dataset_dict.json").write_text(json.dumps({"splits": ["../../etc"]}))
    with pytest.raises(DataError, match="each the name of a folder beside it"):
        datasets.load("saved")
    (folder / "saved" / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    (folder / "saved" / "train" / "state.json").write_text(json.dumps({"_data_files": [{"filename": "/etc/passwd"}]}))
    with pytest.raises(DataError, match="_data_files"):
        datasets.load("saved")


def test_a_broken_table_file_is_named(folder):
    (folder / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"bad.parquet: cannot read it as Parquet"):
        datasets.load("bad.parquet")


def test_without_pyarrow_the_error_names_the_extra(folder, monkeypatch):
    snapshot(folder / "snap", {"train": 2})
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed: `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataError, match=r"needs pyarrow: pip install 'sbpc\[hf\]'"):
        datasets.load("snap")
    assert "needs pyarrow" in str(datasets.fields_of("snap"))  # what `check` says of a data block naming it


def test_a_folders_fingerprint_changes_with_any_of_its_files(folder):
    snapshot(folder / "snap", {"train": 3, "test": 2})
    before = datasets.fingerprint("snap")
    assert before == datasets.fingerprint(str(folder / "snap")) and before is not None
    pq.write_table(table(2, start=7), folder / "snap" / "data" / "test-00000-of-00001.parquet")
    assert datasets.fingerprint("snap") != before


def test_init_from_a_saved_data_set_writes_the_class_names_and_runs_eval_on_its_test_split(
    folder, capsys, fake_llm, script
):
    saved_to_disk(folder / "reviews", {"train": 6, "validation": 4, "test": 4})
    code = cli.main(["init", "--data", "reviews", "Give the VERDICT on a review", "--json"])
    said = json.loads(capsys.readouterr().out)
    assert code == 0 and said["ok"] and said["data"] == "reviews" and said["answer"]["field"] == "label"
    graph = compile_file("reviews.sbp")
    assert graph.nodes["answer"].type.choices == tuple(LABELS)
    from sembp_dsl.runtime import splits

    cut = splits.for_run(graph, None, [], [], graph.optimize, {}).cut.method  # sbpc's defaults, cut to fit
    assert not graph.sizes_given and (cut.train_size, cut.val_size) == (6, 4)  # the validation split's own size

    script.verdict = lambda prompt: "positive"
    Path("reviews.sbp").write_text(with_fake_model(Path("reviews.sbp").read_text(), fake_llm.url))
    assert cli.main(["eval", "reviews.sbp", "--json", "--runs-dir", "runs"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scored"] == 4 and report["correct"] == 2  # the test split, whole: two of its four are positive


def test_the_data_flag_reads_a_snapshot_and_check_reads_a_data_block_naming_one(folder, capsys, fake_llm, script):
    snapshot(folder / "snap", {"train": 6, "test": 2})
    source = (
        'pipeline reviews "Sort reviews"\ninput text: text\nparam ask = "Is it positive? Answer Yes or No"\n'
        "node answer: choice(negative, positive) { prompt = ask }\ntext -> answer\noutput answer\n"
        'data { file = "snap" }\n'
    )
    Path("r.sbp").write_text(with_fake_model(source, fake_llm.url))
    assert cli.main(["check", "r.sbp"]) == 0 and capsys.readouterr().out == "r.sbp: ok\n"
    script.verdict = lambda prompt: "negative"
    assert cli.main(["eval", "r.sbp", "--data", str(folder / "snap"), "--json", "--runs-dir", "runs"]) == 0
    assert json.loads(capsys.readouterr().out)["scored"] == 2
    Path("r.sbp").write_text(with_fake_model(source.replace("input text", "input txt"), fake_llm.url))
    assert cli.main(["check", "r.sbp"]) == 1
    assert "input 'txt' reads the field 'txt', which snap does not have" in capsys.readouterr().err
