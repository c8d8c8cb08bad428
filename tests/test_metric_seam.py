"""A built-in metric is a record and one line (docs/architecture.md): a `Metric` (how it scores a reply, the output
types it accepts, those it is the default of, why an expected answer could never match) in language/metrics.py's
METRICS. This test adds a throwaway one that way, and `sbpc check`, the editor, `eval`, `optimize` and the data
check take it with nothing else changed."""

from __future__ import annotations

import json

import pytest
from conftest import Script
from fake_server import FakeServer
from test_optimize import write

from sembp_dsl import cli
from sembp_dsl.language.nodes.metrics import BLANK, METRICS, Metric, score
from sembp_dsl.language.tooling.editor import Document
from sembp_dsl.records.runs import resolve


def _prefix(predicted: str, expected: str) -> bool:
    return predicted.casefold().startswith(expected.casefold())


def _never_prefix(answer: str, node: str, type_) -> str | None:
    return BLANK if not answer else None


PREFIX = Metric("prefix", _prefix, _never_prefix, accepts=("text",), needs="a text output")

PIPELINE = """\
pipeline said "Say something"
input q: text
param p = "Say."
node a: {type} {{ prompt = p }}
q -> a
output a
metric prefix
"""


@pytest.fixture
def prefix(monkeypatch):
    monkeypatch.setitem(METRICS, PREFIX.name, PREFIX)  # its one line


def rows(tmp_path, *answers: str) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"q": f"q{i}", "answer": a}) + "\n" for i, a in enumerate(answers)))
    return str(path)


def test_a_metric_is_a_record_and_one_line_and_scores_end_to_end(prefix, tmp_path, monkeypatch, capsys):
    """The fake model says "An analysis." to every node: the throwaway counts it for "an", the exact metric not."""
    monkeypatch.chdir(tmp_path)
    assert score("prefix", "An analysis.", "an") and not score("exact", "An analysis.", "an")
    with FakeServer(delay=0.0, reply=Script()) as server:
        path = write(tmp_path, "said.sbp", PIPELINE.format(type="text"), server.url)
        assert cli.main(["check", str(path)]) == 0
        capsys.readouterr()
        text = path.read_text()
        offered = Document(text, str(path)).completions(text.index("metric prefix") + len("metric "))
        assert "prefix" in [c.label for c in offered]
        data = rows(tmp_path, "an", "an", "a reply", "an")
        assert cli.main(["eval", str(path), "--data", data, "--json"]) == 0
        said = json.loads(capsys.readouterr().out)
        assert said["metric"] == "prefix" and said["accuracy"] == pytest.approx(0.75)
        argv = ["optimize", str(path), "--data", data, "--train-size", "2", "--val-size", "2", "--iters", "1"]
        assert cli.main(argv) == 0
    [iteration] = resolve("-1", ".sbpc/runs").iterations
    assert iteration.train_score and iteration.gate_before  # "exact" would score every answer 0


def test_what_it_accepts_and_the_answers_it_can_never_match_are_its_own(prefix, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with FakeServer(delay=0.0, reply=Script()) as server:
        number = write(tmp_path, "number.sbp", PIPELINE.format(type="number"), server.url)
        assert cli.main(["check", str(number)]) == 1
        assert "error[E046]: metric 'prefix' needs a text output, but 'a' is number" in capsys.readouterr().err
        path = write(tmp_path, "said.sbp", PIPELINE.format(type="text"), server.url)
        assert cli.main(["eval", str(path), "--data", rows(tmp_path, "an", "")]) == 1
        assert "no expected answer (its value is blank or null)" in capsys.readouterr().err
        monkeypatch.delitem(METRICS, PREFIX.name)
        assert cli.main(["check", str(path)]) == 1
        assert "error[E045]: unknown metric 'prefix'" in capsys.readouterr().err
