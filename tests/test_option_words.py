"""Messages of the model layer (budgets, a missing model, failure hints, the cache) name options as the reader
passed them: keyword arguments to a Python caller (`max_calls=3`, `model=`, `cache=False`), flags to a user of
`sbpc` (`--max-calls 3`, `--model`, `--no-cache`), whose output stays word for word what it was."""

from __future__ import annotations

import json

import pytest
from conftest import TRIAGE

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.models import embedded, faults
from sembp_dsl.models.cache import CacheError

EXAMPLES = [{"ticket": f"ticket {i}", "answer": "No"} for i in range(4)]


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    return path


def sbpc(*argv: str, capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_budget_names_the_keyword_argument(path, fake_llm):
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url, max_calls=1) as pipeline:
        with pytest.raises(sbp.BudgetExceeded) as stop:
            pipeline(ticket="the app crashes")  # two nodes: the second call is over budget
    assert str(stop.value) == "max_calls=1 reached" and stop.value.cli == "--max-calls 1 reached"
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url, max_cost=0) as pipeline:
        evaluation = pipeline.evaluate(EXAMPLES)
    assert evaluation.stopped == "max_cost=0 reached (spent $0.0000)"
    assert evaluation.to_json()["stopped"] == "max_cost=0 reached (spent $0.0000)"
    assert "stopped early: max_cost=0 reached (spent $0.0000); scored 0 of 4" in evaluation.report("triage", "exact")


def test_an_optimize_stopped_by_its_budget_says_why_in_python_words(path, fake_llm, tmp_path):
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url, max_calls=5) as pipeline:
        found = pipeline.optimize(EXAMPLES[:2], EXAMPLES[2:], iterations=2, runs_dir=tmp_path / "runs")
    assert found.outcome.stopped == "max_calls=5 reached"
    # the run record is read by `sbpc runs`, `show` and `report`: it keeps the command line's words
    assert json.loads((found.record / "run.json").read_text())["stopped"] == "--max-calls 5 reached"


def test_the_command_line_still_names_its_budget_flags(path, fake_llm, tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES))
    flags = ["--data", data, "--model", "openai/fake", "--api-base", fake_llm.url]
    code, out, _ = sbpc("eval", path, *flags, "--max-cost", "0", "--json", capsys=capsys)
    assert code == 1 and json.loads(out)["stopped"] == "--max-cost 0.0 reached (spent $0.0000)"
    code, out, _ = sbpc("eval", path, *flags, "--max-cost", "0", capsys=capsys)
    assert "stopped early: --max-cost 0.0 reached (spent $0.0000); scored 0 of 4" in out
    optimize = [
        "optimize",
        path,
        *flags,
        "--train-size",
        "2",
        "--val-size",
        "2",
        "--test-size",
        "0",
        "--dry-run",
        "--runs-dir",
        tmp_path / "runs",
        "--max-calls",
        "5",
        "--no-cache",
    ]
    code, out, _ = sbpc(*optimize, "--json", capsys=capsys)
    assert code == 0 and json.loads(out)["stopped"] == "--max-calls 5 reached"
    code, out, _ = sbpc(*optimize, capsys=capsys)
    assert code == 0 and "stopped early: --max-calls 5 reached\n" in out
    code, _, err = sbpc("run", path, "--input", "ticket=x", *flags[2:], "--max-calls", "1", capsys=capsys)
    assert code == 1 and "sbpc: error: --max-calls 1 reached" in err


def test_no_model_names_the_model_keyword_or_the_flag(path, monkeypatch, capsys):
    monkeypatch.setattr(embedded, "available", lambda: False)
    with sbp.load(path) as pipeline:
        with pytest.raises(sbp.LLMError) as missing:
            pipeline(ticket="x")
    assert "in the pipeline, pass model=,\n  or install" in str(missing.value) and "--model" not in str(missing.value)
    code, _, err = sbpc("run", path, "--input", "ticket=x", capsys=capsys)
    assert code == 1 and "in the pipeline, pass --model,\n  or install the embedded local model" in err


def test_a_failure_hint_names_the_option_each_front_end_takes():
    unknown_model = faults.CallError("The model `gpt-9` does not exist", 404)
    described = faults.classify(unknown_model, "http://h/v1", reached=False).describe()
    assert described.endswith("(check the model name (model= or name in the model block))")
    assert described.cli.endswith("(check the model name (--model or name in the model block))")


def test_an_unusable_cache_names_cache_false_or_no_cache(path, tmp_path, monkeypatch, capsys):
    (tmp_path / "taken").write_text("a file where the cache folder should be")
    with pytest.raises(CacheError) as refused:
        sbp.load(path, model="openai/fake", cache=tmp_path / "taken" / "responses.sqlite")
    assert str(refused.value).endswith("or pass cache=False") and "--no-cache" not in str(refused.value)
    monkeypatch.setenv("SBPC_CACHE_DIR", str(tmp_path / "taken"))
    code, _, err = sbpc("run", path, "--input", "ticket=x", "--model", "openai/fake", capsys=capsys)
    assert code == 1 and err.rstrip().endswith("set SBPC_CACHE_DIR to another folder, or pass --no-cache")
