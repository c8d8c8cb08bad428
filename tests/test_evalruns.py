"""Evaluations are runs too: `sbpc eval` keeps a record that `runs` lists, `show` prints sample by sample,
and `report` turns into a page, for one evaluation or two compared sample by sample."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
import test_report
from conftest import eval_samples, with_fake_model, write_eval_samples

from sembp_dsl import cli
from sembp_dsl.api import load

browser = test_report.browser  # the headless-Chromium fixture, over its DevTools pipe

ECHO = textwrap.dedent("""\
    pipeline echo "Answer a question"
    input q: text
    param ask = "Answer."
    node answer: text { prompt = ask }
    q -> answer
    output answer
    """)


@pytest.fixture
def two_evals(tmp_path, fake_llm, script, monkeypatch):
    """The same four rows scored twice: with "Answer." the fake model says "An analysis." (right only for the
    last row), with a VERDICT prompt it says "ok" (right for the first three)."""
    monkeypatch.chdir(tmp_path)
    script.verdict = lambda prompt: "ok"
    rows = [{"q": f"q{i}", "answer": "ok" if i < 3 else "An analysis."} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pipeline = tmp_path / "echo.sbp"
    for ask in ("Answer.", "VERDICT <b>now</b>."):
        pipeline.write_text(with_fake_model(ECHO.replace("Answer.", ask), fake_llm.url))
        assert cli.main(["eval", "echo.sbp", "--data", "rows.jsonl"]) == 0
    return tmp_path


def test_eval_writes_a_record_that_runs_lists_and_show_prints(two_evals, capsys):
    capsys.readouterr()
    assert cli.main(["runs"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2 and all(re.match(r"\s+\d  eval ", line) for line in listed)
    assert "score 0.250 (1/4 right)" in listed[0] and "score 0.750 (3/4 right)" in listed[1]

    assert cli.main(["show", "1"]) == 0
    shown = capsys.readouterr().out
    wrong, right = shown.index("wrong: rows.jsonl:1"), shown.index("right: rows.jsonl:4")
    assert wrong < right  # wrong samples first
    assert "expected 'ok', got 'An analysis.'" in shown and "answer replied: An analysis." in shown

    assert cli.main(["show", "2", "--wrong"]) == 0
    shown = capsys.readouterr().out
    assert "wrong: rows.jsonl:4" in shown and "right:" not in shown

    record = json.loads(sorted((two_evals / ".sbpc/runs").glob("*/run.json"))[-1].read_text())
    assert record["kind"] == "eval" and record["initial_prompts"] == {"ask": "VERDICT <b>now</b>."}
    first = eval_samples(sorted((two_evals / ".sbpc/runs").glob("*/run.json"))[-1])[0]
    assert first["nodes"]["answer"]["prompt"].startswith("VERDICT <b>now</b>.")
    assert first["inputs"] == {"q": "q0"} and first["score"] == 1.0 and record["evaluation"]["split"] == "test"


def test_runs_json_says_which_kind(two_evals, capsys):
    capsys.readouterr()
    assert cli.main(["runs", "--json"]) == 0
    assert [r["kind"] for r in json.loads(capsys.readouterr().out)] == ["eval", "eval"]


def test_report_compares_two_evaluations_sample_by_sample(two_evals, capsys):
    assert cli.main(["report", "1", "2", "--out", "cmp.html"]) == 0
    page = (two_evals / "cmp.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    assert "3 wrong -> right, 1 right -> wrong, 0 unchanged" in text
    assert "B - A, paired by sample: +0.500 [" in text  # the mean of 1, 1, 1, -1 with its t interval
    flipped_up = text[text.index("wrong -> right (3)") : text.index("right -> wrong (1)")]
    assert all(f"rows.jsonl:{i}" in flipped_up for i in (1, 2, 3)) and "rows.jsonl:4" not in flipped_up
    assert "VERDICT &lt;b&gt;now&lt;/b&gt;." in page and "<b>now</b>" not in page  # prompts are escaped
    assert "<script" not in page


def test_report_of_one_evaluation_lists_its_samples_wrong_first(two_evals):
    assert cli.main(["report", "2", "--out", "one.html"]) == 0
    page = (two_evals / "one.html").read_text()
    assert page.index('<tr class="wrong">') < page.index('<tr class="right">')
    assert 'id="only-wrong"' in page and "#only-wrong:checked" in page  # the filter is the page's own style
    assert "<details" in page and "<summary>rows.jsonl:4: wrong, score 0.000</summary>" in page


def test_report_refuses_an_evaluation_beside_an_optimization(two_evals, capsys):
    folder = sorted((two_evals / ".sbpc/runs").glob("*"))[-1]
    record = json.loads((folder / "run.json").read_text())
    old = {"settings": record["settings"], "initial_prompts": {}, "iterations": [], "finished": True}  # version 1
    (two_evals / ".sbpc/runs/0-old").mkdir()
    (two_evals / ".sbpc/runs/0-old/run.json").write_text(json.dumps(old))  # no kind: an optimization
    capsys.readouterr()
    assert cli.main(["runs"]) == 0
    assert re.match(r"\s+1  optimize ", capsys.readouterr().out)
    assert cli.main(["report", "1", "2", "--out", "x.html"]) == 1
    assert "two evaluations to compare" in capsys.readouterr().err


def test_a_record_of_an_unknown_kind_is_unreadable(two_evals, capsys):
    path = sorted((two_evals / ".sbpc/runs").glob("*/run.json"))[-1]
    path.write_text(json.dumps({**json.loads(path.read_text()), "kind": "dream"}))
    capsys.readouterr()
    assert cli.main(["runs"]) == 0
    assert "kind is 'dream', not one of optimize, eval" in capsys.readouterr().out


def test_the_api_keeps_a_record_with_runs_dir(tmp_path, fake_llm, script):
    script.verdict = lambda prompt: "ok"
    path = tmp_path / "echo.sbp"
    path.write_text(with_fake_model(ECHO.replace("Answer.", "VERDICT."), fake_llm.url))
    with load(path) as pipeline:
        evaluation = pipeline.evaluate([{"q": "a", "answer": "ok"}], runs_dir=tmp_path / "runs")
        assert pipeline.evaluate([{"q": "a", "answer": "ok"}]).record is None
    record = json.loads((evaluation.record / "run.json").read_text())
    assert record["kind"] == "eval" and record["evaluation"]["score"] == 1.0
    assert record["settings"]["data"] == "examples"


def _open(browser, path) -> str:
    """A session with `path` loaded offline in the headless Chromium of tests/test_report.py."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session)
    browser.send(
        "Network.emulateNetworkConditions", session, offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1
    )
    browser.events.clear()
    browser.send("Page.navigate", session, url=path.as_uri())
    browser.wait_for("Page.loadEventFired")
    return session


def _value(browser, session, expression: str):
    return browser.send("Runtime.evaluate", session, returnByValue=True, expression=expression)["result"]["value"]


def _errors(browser) -> list:
    return [
        e
        for e in browser.events
        if e.get("method") in ("Runtime.exceptionThrown", "Page.javascriptDialogOpening")
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]


def test_the_comparison_page_in_a_browser_lists_the_flips_and_runs_nothing(two_evals, browser):
    assert cli.main(["report", "1", "2", "--out", "cmp.html"]) == 0
    session = _open(browser, two_evals / "cmp.html")
    seen = _value(
        browser,
        session,
        "({text: document.body.innerText, scripts: document.scripts.length, bold: document.querySelectorAll('pre b').length})",
    )
    browser.send("Runtime.evaluate", session, expression="1")
    assert _errors(browser) == [] and seen["scripts"] == 0 and seen["bold"] == 0
    assert "3 wrong -> right, 1 right -> wrong" in seen["text"] and "wrong -> right (3)" in seen["text"]
    assert "VERDICT <b>now</b>." in seen["text"]  # the prompt shown as text, not markup


def test_the_wrong_only_filter_of_one_evaluation_works_without_a_script(two_evals, browser):
    assert cli.main(["report", "1", "--out", "one.html"]) == 0
    session = _open(browser, two_evals / "one.html")
    shown = "[...document.querySelectorAll('tr.right, tr.wrong, details.right')].filter(r => r.offsetParent).length"
    before = _value(browser, session, shown)
    after = _value(browser, session, f"document.getElementById('only-wrong').click(); {shown}")
    assert (before, after) == (5, 3)  # 4 rows and the right sample's <details>; then the three wrong rows
    assert _errors(browser) == []


def test_an_evaluation_stopped_by_a_budget_is_kept_as_stopped_in_the_flags_words(tmp_path, fake_llm, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"q": f"q{i}", "answer": "ok"}) + "\n" for i in range(6)))
    (tmp_path / "echo.sbp").write_text(with_fake_model(ECHO, fake_llm.url))
    cli.main(["eval", "echo.sbp", "--data", "rows.jsonl", "--max-calls", "2", "--concurrency", "1"])
    record = json.loads(sorted((tmp_path / ".sbpc/runs").glob("*/run.json"))[-1].read_text())
    assert record["finished"] is False and "--max-calls" in record["stopped"]


def test_a_sample_its_metric_could_not_score_shows_no_score(tmp_path, fake_llm, capsys, monkeypatch):
    """Lost: no score in `show`, in `report` (its record keeps 0, as run.schema.json says) or in `eval --json`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.py").write_text(
        "def loud(prediction, example):\n"
        "    if example['q'] == 'q0':\n"
        "        raise RuntimeError('boom')\n"
        "    return False\n"
    )
    rows = [{"q": f"q{i}", "answer": "ok"} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = ECHO + 'metric loud = "metrics:loud"\n'
    (tmp_path / "echo.sbp").write_text(with_fake_model(source, fake_llm.url))
    assert cli.main(["eval", "echo.sbp", "--data", "rows.jsonl", "--metric", "loud", "--json", "--errors", "4"]) == 0
    errors = {e["id"]: e for e in json.loads(capsys.readouterr().out)["errors"]}
    assert errors["rows.jsonl:1"]["score"] is None and errors["rows.jsonl:2"]["score"] == 0.0

    assert cli.main(["show", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    [lost] = [line for line in lines if line.startswith("lost: ")]
    assert lost.startswith("lost: rows.jsonl:1  expected 'ok'") and "score" not in lost, lost
    assert "RuntimeError: boom" in lost
    assert any(line.startswith("wrong: rows.jsonl:2  score 0.000  ") for line in lines)

    assert cli.main(["report", "1", "--out", "one.html"]) == 0
    page = (tmp_path / "one.html").read_text()
    assert "<summary>rows.jsonl:1: lost</summary>" in page and "<td>lost</td><td>-</td>" in page
    assert "<summary>rows.jsonl:2: wrong, score 0.000</summary>" in page


def test_report_of_two_evaluations_with_partial_credit_shows_every_score_that_moved(two_evals, capsys):
    """No sample flips between right and wrong, yet scores move (0.4 -> 0.7, 0.5 -> 0.45): the page lists the
    samples whose score changed, by how much, largest first; the unchanged one is not among them."""
    first, second = sorted((two_evals / ".sbpc/runs").glob("*/run.json"))
    for path, scores in ((first, (0.4, 0.2, 0.5, 0.9)), (second, (0.7, 0.2, 0.45, 0.3))):
        samples = eval_samples(path)
        for sample, score in zip(samples, scores):
            sample["score"] = score
        write_eval_samples(path, samples)
    assert cli.main(["report", "1", "2", "--out", "cmp.html"]) == 0
    text = re.sub(r"<[^>]+>", " ", (two_evals / "cmp.html").read_text())
    assert "0 wrong -> right, 0 right -> wrong" in text
    moved = text[text.index("scores changed (3)") :]
    rows = re.findall(r"rows\.jsonl:(\d)\s+([\d.]+)\s+([\d.]+)\s+([+-][\d.]+)", moved)
    assert rows == [
        ("4", "0.900", "0.300", "-0.600"),
        ("1", "0.400", "0.700", "+0.300"),
        ("3", "0.500", "0.450", "-0.050"),
    ]


def test_a_sample_without_an_answer_is_said_so_in_eval_errors_show_and_the_report(
    tmp_path, fake_llm, monkeypatch, capsys
):
    """A reply no choice can be read from: `got no answer`, never Python's `None` (the matrix found it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text(json.dumps({"q": "q0", "answer": "Yes"}) + "\n")
    (tmp_path / "pick.sbp").write_text(
        with_fake_model(ECHO.replace("node answer: text", "node answer: choice(Yes, No)"), fake_llm.url)
    )
    assert cli.main(["eval", "pick.sbp", "--data", "rows.jsonl", "--errors", "1"]) == 0
    assert "(expected 'Yes', got no answer, the reply does not start with one of Yes, No)" in capsys.readouterr().out
    assert cli.main(["show", "-1"]) == 0
    assert "expected 'Yes', got no answer" in capsys.readouterr().out
    assert cli.main(["report", "-1", "--out", "eval.html"]) == 0
    assert "got <b>no answer</b>" in (tmp_path / "eval.html").read_text()
