"""A long evaluation in flat memory (issue 45): `sbpc eval` writes each sample to samples.jsonl beside run.json as
it finishes and keeps only running sums; a killed evaluation keeps its finished samples and `--resume` goes on from
them; a last line cut off mid-write is left out with a note; `runs`, `show`, `report` and the A/B page read records
of either format (samples in samples.jsonl, or inside run.json as before version 5), a bounded part of a long one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import wait_until, with_fake_model
from fake_server import FakeServer

from sembp_dsl import cli
from sembp_dsl.records.evaluation import Samples
from sembp_dsl.records.runs import SHOWN_SAMPLES

YES_NO = textwrap.dedent("""\
    pipeline p "Answer yes or no"
    input q: text
    param t = "VERDICT: answer yes or no."
    node n: choice(yes, no) { prompt = t }
    q -> n
    output n
    """)


def rows(count: int) -> str:
    return "".join(json.dumps({"q": f"question {i}", "answer": "yes" if i % 3 else "no"}) + "\n" for i in range(count))


def a_folder(tmp_path: Path, url: str, count: int) -> Path:
    (tmp_path / "p.sbp").write_text(with_fake_model(YES_NO, url))
    (tmp_path / "rows.jsonl").write_text(rows(count))
    return tmp_path


EVAL = ["eval", "p.sbp", "--data", "rows.jsonl", "--runs-dir", "runs", "--no-cache"]


def the_run(folder: Path) -> Path:
    [run] = (folder / "runs").iterdir()
    return run


def lines_of(run: Path) -> list[str]:
    return (run / "samples.jsonl").read_text().splitlines()


def test_a_killed_eval_keeps_its_finished_samples_and_resume_scores_only_the_rest(tmp_path, monkeypatch, capsys):
    """SIGKILL mid-run: every sample it finished is a whole line of samples.jsonl (a last one cut off is left out);
    `show` says it was interrupted after them; `--resume` calls the model for the others alone, and the record ends
    with every sample once and the score of all of them."""
    count = 300
    with FakeServer(delay=0.05, reply="yes") as server:
        folder = a_folder(tmp_path, server.url, count)
        env = {**os.environ, "OPENAI_API_KEY": "fake"}
        child = subprocess.Popen(
            [sys.executable, "-m", "sembp_dsl.cli", *EVAL, "--concurrency", "4"],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: (folder / "runs").is_dir() and len(list(folder.glob("runs/*/samples.jsonl"))) == 1, 60)
            run = the_run(folder)
            wait_until(lambda: len(lines_of(run)) >= 30, 60)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        finished = list(Samples(run / "samples.jsonl"))  # whole lines only: never an error
        assert 30 <= len(finished) < count and len({s["id"] for s in finished}) == len(finished)
        assert json.loads((run / "run.json").read_text())["finished"] is False

        monkeypatch.chdir(folder)
        monkeypatch.setenv("OPENAI_API_KEY", "fake")
        capsys.readouterr()
        assert cli.main(["show", str(run)]) == 0
        assert f"interrupted after {len(finished)} samples" in capsys.readouterr().out

        before = server.requests
        assert cli.main([*EVAL, "--resume", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert server.requests - before == count - len(finished)  # the finished samples are not asked again
    assert (
        (folder / report["run"]).resolve() == run.resolve()
        and report["scored"] == count
        and report["correct"] == 2 * count // 3
    )
    record = json.loads((run / "run.json").read_text())
    assert record["finished"] is True and record["evaluation"]["counts"] == {"samples": count, "right": 200, "lost": 0}
    ids = [json.loads(line)["id"] for line in lines_of(run)]
    assert len(ids) == len(set(ids)) == count


@pytest.fixture
def small_eval(tmp_path, fake_llm, script, monkeypatch):
    """Six rows scored once (the fake model says "yes": the rows whose answer is "no" are wrong)."""
    script.verdict = lambda prompt: "yes"
    folder = a_folder(tmp_path, fake_llm.url, 6)
    monkeypatch.chdir(folder)
    assert cli.main(EVAL) == 0
    return folder


def test_a_last_line_cut_off_mid_write_is_left_out_with_a_note(small_eval, capsys):
    run = the_run(small_eval)
    with open(run / "samples.jsonl", "a") as file:
        file.write('{"id": "rows.jsonl:99", "score": 1.0, "lo')  # killed while writing it
    capsys.readouterr()
    assert cli.main(["show", str(run)]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"note: .*samples\.jsonl:7: the last line is cut off", shown) and "rows.jsonl:99" not in shown
    assert cli.main(["runs", "--runs-dir", "runs"]) == 0 and "score 0.667 (4/6 right)" in capsys.readouterr().out
    assert cli.main(["report", str(run), "--out", "page.html"]) == 0
    page = (small_eval / "page.html").read_text()
    assert "the last line is cut off" in page and "rows.jsonl:99" not in page


def test_a_line_in_the_middle_that_is_no_sample_is_an_error_naming_it(small_eval, capsys):
    run = the_run(small_eval)
    lines = lines_of(run)
    lines[2] = '{"id": 7, "score": 1.0}'
    (run / "samples.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert cli.main(["show", str(run)]) == 1
    assert "samples.jsonl:3: not a sample (its id is not text)" in capsys.readouterr().err


def test_resume_cuts_a_torn_last_line_and_writes_on_from_the_whole_ones(small_eval, fake_llm, capsys):
    """A record killed after its samples but before its end: the torn line is cut away, said in a note, and no
    sample is asked again."""
    run = the_run(small_eval)
    record = json.loads((run / "run.json").read_text())
    record["finished"], record["ledger"] = False, None
    for key in ("score", "scored", "requested", "counts"):
        del record["evaluation"][key]
    (run / "run.json").write_text(json.dumps(record))
    lines = lines_of(run)
    (run / "samples.jsonl").write_text("\n".join(lines[:4]) + "\n" + lines[4][:20])
    before = fake_llm.requests
    capsys.readouterr()
    assert cli.main([*EVAL, "--resume"]) == 0
    out, err = capsys.readouterr()
    assert "note:" in err and "samples.jsonl:5: the last line is cut off" in err
    assert fake_llm.requests - before == 2 and "accuracy 0.667 (4/6)" in out
    assert len([json.loads(line) for line in lines_of(run)]) == 6  # every line whole


def test_resume_with_nothing_to_resume_is_a_usage_error(small_eval, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        cli.main([*EVAL, "--resume"])
    assert stopped.value.code == 2
    assert "--resume: no unfinished evaluation of p.sbp asked the same in runs" in capsys.readouterr().err


def as_version_4(run: Path) -> None:
    """The record as sbpc wrote it before version 5: its samples inside run.json."""
    record = json.loads((run / "run.json").read_text())
    record["version"] = 4
    record["evaluation"]["samples"] = [json.loads(line) for line in lines_of(run)]
    del record["evaluation"]["samples_file"], record["evaluation"]["counts"]
    (run / "run.json").write_text(json.dumps(record))
    (run / "samples.jsonl").unlink()


def test_runs_show_report_and_the_ab_page_read_both_formats_alike(small_eval, fake_llm, script, capsys):
    script.verdict = lambda prompt: "no"
    (small_eval / "p.sbp").write_text(with_fake_model(YES_NO.replace("answer yes", "say yes"), fake_llm.url))
    assert cli.main(EVAL) == 0
    first, second = sorted((small_eval / "runs").iterdir())

    def read_all() -> list[str]:
        capsys.readouterr()
        out = []
        for argv in (["runs", "--runs-dir", "runs"], ["show", str(first)], ["show", str(first), "--wrong"]):
            assert cli.main(argv) == 0
            out.append(capsys.readouterr().out.replace(str(first), "RUN"))
        for argv in ([str(first)], [str(first), str(second)], [str(second), str(first)]):
            assert cli.main(["report", *argv, "--out", "page.html"]) == 0
            out.append((small_eval / "page.html").read_text())
        return out

    now = read_all()
    as_version_4(first)
    assert read_all() == now
    assert "wrong -> right (2)" in now[4] and "right -> wrong (4)" in now[4]


@pytest.mark.slow
def test_memory_stays_flat_as_the_rows_grow_and_the_readers_stay_bounded(tmp_path):
    """`eval` of 20,000 rows takes not much more memory than of 2,000 (before: 3.3x, every trace held); `show`
    prints at most SHOWN_SAMPLES samples of it and the report page is no larger than the short run's."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import big_eval

    with FakeServer(delay=0.0, reply="yes") as server:
        short, long = big_eval.run_sizes(tmp_path, server.url, [2_000, 20_000])
    assert long["eval"]["mb"] < 1.5 * short["eval"]["mb"], (short["eval"], long["eval"])  # it was 3.3x
    assert long["record_mb"] > 8 * short["record_mb"]  # every sample is on record all the same
    assert long["page"] < 1.2 * short["page"]
    [run] = (tmp_path / "runs-20000").iterdir()
    shown = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "show", str(run)], capture_output=True, text=True, check=True
    ).stdout
    assert len(re.findall(r"^(right|wrong|lost): ", shown, re.M)) == SHOWN_SAMPLES
    assert f"{20_000 - SHOWN_SAMPLES} more samples not shown" in shown
