"""`sbpc compare` against the fake model: rows, interval arithmetic, the shared cache, nothing written."""

from __future__ import annotations

import json
import math

import pytest
from test_optimize import TOY, data, write

from sembp_dsl import cli
from sembp_dsl.compare import Row, RowResult, SeedResult, make_rows
from sembp_dsl.learning.stats import t975, t_interval


def snapshot(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and "cache" not in p.parts}


@pytest.fixture
def setup(tmp_path, fake_llm, script, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # the improved judge gets claims 0-4 right: accuracy moves by seed, as the test split does
    script.verdict = lambda prompt: (
        "Yes" if "Improved" in prompt and any(f"claim {i}\n" in prompt for i in range(5)) else "No"
    )
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    return path, data(tmp_path, n=14)


def compare(capsys, path, dataset, *flags) -> tuple[int, str, str]:
    code = cli.main(
        [
            "compare",
            str(path),
            "--data",
            dataset,
            "--train-size",
            "3",
            "--val-size",
            "3",
            "--test-size",
            "6",
            "--iters",
            "1",
            "--gate-alpha",
            "1",
            "--seeds",
            "3",
            *flags,
        ]
    )
    out = capsys.readouterr()
    return code, out.out, out.err


LIAR_SH = ["--vary", "gradient=sibling,no-sibling,none", "--vary", "only=each", "--vary", "gate=validation,none"]


def test_one_row_per_setting_one_at_a_time(setup, capsys):
    path, dataset = setup
    code, out, _ = compare(capsys, path, dataset, *LIAR_SH, "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    # the base, 2 other gradients, all + 3 single prompts (all is the base), 1 other gate: liar.sh's design
    assert [r["row"] for r in rows] == [
        "base: gradient=sibling, only=all, gate=val",
        "gradient=no-sibling",
        "gradient=none",
        "only=look",
        "only=check",
        "only=verdict_task",
        "gate=none",
    ]
    assert all(len(r["seeds"]) == 3 and [s["seed"] for s in r["seeds"]] == [0, 1, 2] for r in rows)
    assert rows[3]["changes"] == {"gradient": "sibling", "only": ["look"], "gate": "val"}


def test_grid_gives_every_combination():
    rows = make_rows([("gradient", ["sibling", "none"]), ("gate", ["val", "train", "none"])], grid=True)
    assert len(rows) == 6 and rows[-1] == Row("gradient=none, gate=none", {"gradient": "none", "gate": "none"})


def test_the_intervals_are_t_intervals_over_seeds_and_paired_by_seed():
    assert t_interval([0.5, 0.6, 0.7]) == pytest.approx(
        (0.6, 0.6 - 4.303 * 0.1 / math.sqrt(3), 0.6 + 4.303 * 0.1 / math.sqrt(3))
    )
    assert t_interval([0.4]) == (0.4, None, None)
    assert t975(1) == 12.706 and t975(30) == 2.042 and t975(1000) == pytest.approx(1.962, abs=1e-3)

    def row(label, finals):
        return RowResult(Row(label, {}), [SeedResult(seed, 0.5, acc, 1, 1, 0.0, 0.0, "") for seed, acc in finals])

    first = row("a", [(0, 0.5), (1, 0.6), (2, 0.7)])
    other = row("b", [(2, 0.9), (0, 0.6), (1, 0.6)])  # in another order: paired by seed, not by position
    mean, low, high = other.difference(first)
    assert (mean, high - mean) == pytest.approx((0.1, 4.303 * 0.1 / math.sqrt(3)))
    wide = row("c", [(0, 0.0), (1, 1.0), (2, 1.0)])
    assert wide.accuracy()[1:] == (0.0, 1.0)  # an accuracy interval is clipped to [0, 1]


def test_the_table_holds_what_the_runs_did(setup, capsys):
    path, dataset = setup
    code, out, _ = compare(capsys, path, dataset, "--vary", "gradient=sibling,none", "--json")
    assert code == 0
    first, second = json.loads(out)["rows"]
    finals = [s["test_final"] for s in first["seeds"]]
    assert len(set(finals)) > 1  # the seeds' test splits differ, so the interval has width
    assert (first["test_accuracy"]["mean"], first["test_accuracy"]["high"]) == pytest.approx(
        (t_interval(finals)[0], min(1.0, t_interval(finals)[2]))
    )
    diffs = [b["test_final"] - a["test_final"] for a, b in zip(first["seeds"], second["seeds"])]
    assert list(second["difference_from_first"].values()) == pytest.approx(list(t_interval(diffs)))
    assert first["calls"] == sum(s["calls"] for s in first["seeds"]) > 0
    code, out, _ = compare(capsys, path, dataset, "--vary", "gradient=sibling,none")
    lines = out.splitlines()
    assert lines[2].startswith("| setting | test accuracy, mean [95% CI] | difference from the first row")
    assert lines[4].startswith("| base: gradient=sibling | ") and "(the reference)" in lines[4]
    assert lines[5].startswith("| gradient=none | ")


def test_a_second_identical_compare_makes_no_call_and_nothing_is_written(setup, tmp_path, capsys):
    path, dataset = setup
    before = snapshot(tmp_path)
    code, first, _ = compare(capsys, path, dataset, "--vary", "gradient=sibling,no-sibling", "--json")
    assert code == 0 and json.loads(first)["ledger"]["calls"] > 0
    code, second, _ = compare(capsys, path, dataset, "--vary", "gradient=sibling,no-sibling", "--json")
    assert code == 0 and json.loads(second)["ledger"]["calls"] == 0
    assert [r["calls"] for r in json.loads(second)["rows"]] == [0, 0]
    assert [r["test_accuracy"] for r in json.loads(second)["rows"]] == [
        r["test_accuracy"] for r in json.loads(first)["rows"]
    ]
    assert snapshot(tmp_path) == before  # the pipeline untouched, no run record, no report


def test_report_and_kept_runs(setup, tmp_path, capsys):
    path, dataset = setup
    code, _, err = compare(
        capsys,
        path,
        dataset,
        "--vary",
        "gradient=sibling,none",
        "--seeds",
        "2",
        "--report",
        str(tmp_path / "c.html"),
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert code == 0 and "wrote" in err
    html = (tmp_path / "c.html").read_text()
    assert html.count('<img class="plot"') == 2 and "gradient=none" in html and "<script" not in html
    assert len(list((tmp_path / "runs").glob("*/run.json"))) == 4  # 2 rows x 2 seeds, readable by `sbpc runs`
    assert cli.main(["runs", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out.count("finished") == 4


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--vary", "temperature=0,1"], "cannot vary 'temperature'"),
        (["--vary", "gradient=sibling,sideways"], "'sideways' is not one of"),
        (["--vary", "only=look,nope"], "'nope' is not a trainable param"),
        (["--vary", "iterations=one"], "'one' is not a whole number"),
        (["--test-size", "0"], "--test-size of at least 1"),
        (["--vary", "iterations=-1,2"], "--vary iterations: '-1' is out of range (0 to 1000)"),
        (["--vary", "gate_alpha=0,1"], "--vary gate_alpha: '0' is out of range (above 0 to 1)"),
        (["--vary", "gate_alpha=nan"], "'nan' is out of range"),
        (
            ["--vary", "train_size=0,3"],
            "row 'base: train_size=0': the train split is empty: give --train-size of at least 1",
        ),
    ],
)
def test_bad_experiments_are_refused_before_any_call(setup, capsys, fake_llm, flags, message):
    path, dataset = setup
    code, out, err = compare(capsys, path, dataset, *flags)
    assert code == 1 and message in err and "Traceback" not in err and out == ""
    assert fake_llm.requests == 0


def test_every_phase_of_every_optimize_reports_progress(setup):
    import sembp_dsl as sbp
    from sembp_dsl import compare as comparing

    path, dataset = setup
    phases, finished = [], []

    def progress(what, total):
        phases.append((what, total))
        return lambda done: None

    with sbp.load(path) as pipeline:
        experiment = comparing.Experiment(
            pipeline, sbp.Data(dataset), dict(iterations=1, train_size=3, val_size=3, test_size=6)
        )
        rows = comparing.make_rows([("gradient", ["sibling", "none"])])
        results = comparing.compare(experiment, rows, [0, 1], tick=finished.append, progress=progress)
    assert [len(r.seeds) for r in results] == [2, 2]
    assert finished == [
        "base: gradient=sibling, seed 0",
        "base: gradient=sibling, seed 1",
        "gradient=none, seed 0",
        "gradient=none, seed 1",
    ]
    assert ("iteration 1: train", 3) in phases and ("test, final", 6) in phases


def test_a_report_with_no_folder_is_refused_before_any_call(setup, tmp_path, capsys, fake_llm):
    path, dataset = setup
    with pytest.raises(SystemExit) as exit:
        compare(capsys, path, dataset, "--report", str(tmp_path / "nowhere" / "c.html"))
    assert exit.value.code == 2 and "--report: no folder" in capsys.readouterr().err and fake_llm.requests == 0


def test_lost_test_samples_are_said_under_the_table():
    from types import SimpleNamespace

    from sembp_dsl.compare import markdown

    experiment = SimpleNamespace(describe=lambda: "toy.sbp on d", size=lambda key, changes: 6)
    seeds = [SeedResult(0, 0.5, 0.5, 1, 1, 0.0, 0.0, "", lost=2), SeedResult(1, 0.5, 0.7, 1, 1, 0.0, 0.0, "")]
    text = markdown([RowResult(Row("base", {}), seeds)], experiment)
    assert text.endswith("Warning: test samples lost to failed calls were left out of the scores: base: 2")
    assert "lost" not in markdown([RowResult(Row("base", {}), seeds[1:])], experiment)


def test_only_each_on_one_trainable_param_is_refused_and_all_named_is_all(setup):
    from dataclasses import replace

    from sembp_dsl import compare
    from sembp_dsl.language.graph.compile import compile_file

    graph = compile_file(str(setup[0]))
    assert len(graph.trainable) > 1
    assert compare.parse_vary([f"only=all,{'+'.join(graph.trainable)}"], graph) == [("only", [()])]  # one row, not two
    lone = replace(graph, trainable=graph.trainable[:1])
    with pytest.raises(compare.CompareError, match=rf"only=each: .* has one trainable param \({graph.trainable[0]}\)"):
        compare.parse_vary(["only=each"], lone)


def test_an_interrupted_compare_says_what_finished_and_what_is_kept(setup, tmp_path, capsys, monkeypatch):
    from sembp_dsl import compare as module

    path, dataset = setup
    real, calls = module.optimize_once, []

    def interrupted_on_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "optimize_once", interrupted_on_the_third)
    code, out, err = compare(
        capsys, path, dataset, "--vary", "gate=validation,none", "--runs-dir", str(tmp_path / "runs")
    )
    assert code == 130 and out == ""
    assert (
        f"interrupted after 2 of 6 optimize runs: no table, since rows must share seeds to be compared; "
        f"their run records are in {tmp_path / 'runs'}. Run it again" in err
    )
    assert "interrupted" not in err.splitlines()  # said once, with what was kept: no bare word after it
    assert len(list((tmp_path / "runs").glob("*/run.json"))) == 2
