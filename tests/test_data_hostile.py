"""A hostile user's data: split files that are links (to nothing, in a loop, to a virtual file), devices, files too
large to hold, JSON that is no text, answers that are null, a file named for two splits through a link, a --test-data
with a name no data file has, a folder named like a file, a folder with a whole disk under it, and init writing where
it cannot. Each is said where it is, as an error a user can act on: never a traceback, never a silent result."""

from __future__ import annotations

import json
import os
import resource
import textwrap
from pathlib import Path

import pytest

from sembp_dsl import cli
from sembp_dsl.runtime import datasets
from sembp_dsl.runtime.datasets import DataError, load

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
