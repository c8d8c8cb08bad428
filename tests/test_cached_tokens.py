"""Issue 45's acceptance: on a loopback server that reports cached tokens for a repeated prompt prefix (as
OpenAI's usage does), an optimize of pipelines/liar_paper.sbp counts them, prices them at the model's cached rate,
and says so in its summary, in `sbpc show` and in the HTML report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sembp_dsl import cli
from sembp_dsl.models import prices

ROOT = Path(__file__).resolve().parents[1]
FORWARD = "openai/gpt-4o-mini-2024-07-18"  # liar_paper's forward model: litellm's table gives it a cached rate


def paper_model(messages: list) -> str:
    """Answers liar_paper's prompts: five hint lines to a backward question, a prompt to the optimizer, Yes from
    the judge (wrong on every No), a sentence from an analyst."""
    text = messages[-1]["content"]
    if '"Hint x' in text:
        return "\n".join(f"Hint {k}: Weigh the record more." for k in range(1, 6))
    if "<prompt>" in text:
        return "<prompt>Decide whether the Statement is a lie (Yes) or not (No) from the Context and hints.</prompt>"
    return "Yes" if "Answer Yes or No as labels" in text else "The statement reads as plausible."


@pytest.fixture
def optimized(tmp_path, capsys, monkeypatch):
    """An optimize of liar_paper against a server caching prefixes of 16 words on (its prompts are shorter than
    OpenAI's 1,024 tokens): its run record, the summary it printed, and its run's folder."""
    from fake_server import FakeServer

    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "pipelines" / "liar_paper.sbp", tmp_path / "liar_paper.sbp")
    rows = [
        {
            "statement": f"Claim number {i}.",
            "job_title": "Senator",
            "state": "Ohio",
            "party": "red",
            "context": "a talk",
        }
        | {"answer": "Yes" if i % 2 else "No"}
        for i in range(6)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FakeServer(reply=paper_model) as server:
        server.configure(cache_min=16, cache_step=16)
        argv = ["optimize", "liar_paper.sbp", "--data", "rows.jsonl", "--train-size", "6", "--val-size", "0"]
        argv += ["--test-size", "0", "--iters", "1", "--no-cache", "--api-base", server.url, "--runs-dir", "runs"]
        assert cli.main(argv) == 0
    printed = capsys.readouterr().err  # the ledger's summary
    [folder] = (tmp_path / "runs").iterdir()
    return json.loads((folder / "run.json").read_text()), printed, folder


def test_cached_prompt_tokens_are_counted_and_priced_at_the_cached_rate(optimized):
    record, _, _ = optimized
    ledger, forward = record["ledger"], record["ledger"]["roles"]["forward"]
    assert 0 < forward["cached_tokens"] < forward["prompt_tokens"]
    assert ledger["cached_tokens"] == sum(r.get("cached_tokens", 0) for r in ledger["roles"].values())
    rates = prices.entry(FORWARD, "input_cost_per_token")
    full, cached, out = (
        rates[k] for k in ("input_cost_per_token", "cache_read_input_token_cost", "output_cost_per_token")
    )
    assert cached < full
    uncached = forward["prompt_tokens"] - forward["cached_tokens"]
    assert forward["cost"] == pytest.approx(
        uncached * full + forward["cached_tokens"] * cached + forward["completion_tokens"] * out
    )
    assert forward["cache_saving"] == pytest.approx(forward["cached_tokens"] * (full - cached))
    assert ledger["cache_saving"] == pytest.approx(sum(r.get("cache_saving", 0) for r in ledger["roles"].values()))


def test_the_summary_show_and_report_say_the_cached_tokens_and_what_their_rate_saved(optimized, capsys):
    record, printed, folder = optimized
    ledger = record["ledger"]
    prompt = sum(r["prompt_tokens"] for r in ledger["roles"].values())
    assert f"prompt tokens the provider's cache served: {ledger['cached_tokens']} of {prompt}" in printed
    assert f"at its cached rate: ${ledger['cache_saving']:.4f} less than at the full rate" in printed
    said = f"{ledger['cached_tokens']} prompt tokens from the provider's cache, ${ledger['cache_saving']:.4f} less"
    assert cli.main(["show", str(folder)]) == 0
    assert said in capsys.readouterr().out
    assert cli.main(["report", str(folder), "--out", str(folder / "report.html")]) == 0
    tokens = (
        f"{ledger['tokens']} ({ledger['cached_tokens']} cached, ${ledger['cache_saving']:.4f} less at its cached rate)"
    )
    assert tokens in (folder / "report.html").read_text()


def test_an_evaluation_keeps_its_cached_tokens_and_what_they_saved(tmp_path, capsys, monkeypatch):
    from fake_server import FakeServer

    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "pipelines" / "liar_paper.sbp", tmp_path / "liar_paper.sbp")
    row = {"job_title": "Senator", "state": "Ohio", "party": "red", "context": "a talk", "answer": "No"}
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"statement": f"Claim {i}.", **row}) + "\n" for i in range(4))
    )
    with FakeServer(reply=paper_model) as server:
        server.configure(cache_min=16, cache_step=16)
        argv = ["eval", "liar_paper.sbp", "--data", "rows.jsonl", "--split", "train", "--train-size", "4"]
        assert cli.main([*argv, "--val-size", "0", "--test-size", "0", "--no-cache", "--api-base", server.url]) == 0
    [folder] = (tmp_path / ".sbpc" / "runs").iterdir()
    ledger = json.loads((folder / "run.json").read_text())["ledger"]
    assert ledger["cached_tokens"] > 0 and ledger["cache_saving"] > 0
    capsys.readouterr()
    assert cli.main(["show", str(folder)]) == 0
    assert f"{ledger['cached_tokens']} prompt tokens from the provider's cache, $" in capsys.readouterr().out


RULES = " ".join(f"Rule {i}: weigh the claim's source and its date before anything else." for i in range(120))
LONG = f'''pipeline long "Answer a question"
input question: text
param rules = "{RULES}"
param answer_task = "Answer in one word."
node notes: text {{ prompt = rules }}
node answer: text {{ prompt = answer_task }}
question -> notes
question, notes -> answer
output answer
metric exact
model {{ name = "openai/gpt-4o-mini"  max_tokens = 50 }}
'''


def planned(tmp_path, capsys, source: str, *flags: str) -> tuple[dict, str]:
    """`optimize --plan` on a pipeline's text: the plan as --json gives it, and as it is printed."""
    (tmp_path / "p.sbp").write_text(source)
    rows = [{"question": f"Question {i}?", "answer": "a"} for i in range(10)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["optimize", str(tmp_path / "p.sbp"), "--data", str(tmp_path / "rows.jsonl"), "--plan", *flags]
    assert cli.main([*argv, "--train-size", "5", "--val-size", "5", "--iters", "2", "--json"]) == 0
    bound = json.loads(capsys.readouterr().out)
    assert cli.main([*argv, "--train-size", "5", "--val-size", "5", "--iters", "2"]) == 0
    return bound, capsys.readouterr().out


def test_the_plan_says_what_a_long_repeated_instruction_could_save_at_the_cached_rate(tmp_path, capsys):
    """An instruction of 2,000 tokens starts every call of its node, and its optimizer question: the plan prices
    them in full and says apart what the cached rate could save (OpenAI's rule: 1,024 tokens on, in 128s)."""
    bound, printed = planned(tmp_path, capsys, LONG)
    cached = bound["cached_tokens"]
    assert cached["forward"] % 128 == 0 and cached["forward"] >= 1024 * (bound["calls"]["forward"] // 2 - 1)
    assert cached["optimizer"] > 0 and cached["backward"] == 0  # the answer's instruction is one line
    rates = prices.entry("openai/gpt-4o-mini", "input_cost_per_token")
    per_token = rates["input_cost_per_token"] - rates["cache_read_input_token_cost"]
    assert bound["cache_saving"] == pytest.approx(sum(cached.values()) * per_token)
    assert 0 < bound["cache_saving"] < bound["cost"]
    assert f"cached rate: up to about {sum(cached.values())} of those prompt tokens" in printed
    assert f"at most about ${bound['cache_saving']:.4f} less than the cost above, which prices them in full" in printed
    short, printed = planned(tmp_path, capsys, LONG.replace(RULES, "Take notes."))
    assert short["cost"] < bound["cost"] and short["cache_saving"] == 0 and not any(short["cached_tokens"].values())
    assert "cached rate: no prompt repeats a prefix of 1,024 tokens or more" in printed


def test_a_plan_on_models_without_a_cached_rate_says_nothing_of_one(tmp_path, capsys):
    bound, printed = planned(tmp_path, capsys, LONG, "--model", "embedded/smollm2-135m")
    assert bound["cache_saving"] is None and "cached rate" not in printed
