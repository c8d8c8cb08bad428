"""A run record handed over by a stranger: what `sbpc report` and `sbpc show` make of its hostile parts."""

from __future__ import annotations

import base64
import json
import re

from test_report import make_run, report

from sembp_dsl import cli
from sembp_dsl.language import kinds
from sembp_dsl.records.report import SHOWN_DEPLOYMENTS, SHOWN_POINTS, plot_concurrency


def svg_of(img: str) -> str:
    return base64.b64decode(re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', img).group(1)).decode()


def test_a_window_series_a_plot_cannot_place_is_left_out_not_a_crash():
    """Points cut short, NaN, negative, huge, not numbers: no traceback, and the plain points still drawn."""
    bad = [[0.5], [], [float("nan"), 3], [float("inf"), 2], [-5, -3], [1e308, 10**30], "x", [True, 2], [1.0, 4]]
    img = plot_concurrency({"concurrency": {"d": bad}, "refusals": {"d": [float("nan"), -1.0, 2.0, "x"]}})
    assert "refused for load x4" in svg_of(img)


def test_many_deployments_and_a_million_points_give_a_bounded_plot():
    names = {f"dep{i}": [[k * 0.001, 1 + k % 7] for k in range(1000 if i == 0 else 2)] for i in range(3000)}
    names["dep0"] = [[k * 0.001, 1 + k % 7] for k in range(10**6)]
    img = plot_concurrency({"concurrency": names, "refusals": {"dep5": [k * 0.01 for k in range(10**5)]}})
    svg = svg_of(img)
    assert f"{3000 - SHOWN_DEPLOYMENTS} more deployment(s) not drawn" in svg and "refused for load x100000" in svg
    assert len(img) < 60 * SHOWN_POINTS * SHOWN_DEPLOYMENTS


def test_a_deployment_name_with_escapes_is_shown_written_out():
    name = "\x1b]0;pwn\x07\u202e<script>alert(1)</script>"
    svg = svg_of(plot_concurrency({"concurrency": {name: [[0, 2], [1, 1]]}, "refusals": {}}))
    assert "\x1b" not in svg and "\u202e" not in svg and "\\x1b]0;pwn" in svg and "<script" not in svg


def test_an_unknown_kinds_megabytes_are_cut_short_where_a_short_form_is_shown():
    huge = {"zz": [[i] * 10 for i in range(20000)]}
    [short] = kinds.shown(huge)
    [full] = kinds.shown(huge, full=True)
    assert len(short.text) < 2100 and "more characters not shown" in short.text
    assert json.loads(full.text) == huge["zz"]


def test_a_record_with_a_broken_window_and_huge_unknown_data_reports_and_shows(tmp_path, fake_llm, script, capsys):
    make_run(tmp_path, fake_llm, script, "one")
    path = next((tmp_path / "runs").glob("*/run.json"))
    record = json.loads(path.read_text())
    record["ledger"]["concurrency"] = {"\x1b[2Jd": [[0.5], [1.0, 2]]}
    path.write_text(json.dumps(record))
    capsys.readouterr()
    html = report(tmp_path / "runs", tmp_path / "r.html", "1")
    assert html.count('<img class="plot"') == 3
    assert "\x1b" not in capsys.readouterr().err
    assert cli.main(["show", "1", "--runs-dir", str(tmp_path / "runs")]) == 0
