"""The gate inside a run: what the current prompts lost, a gate that lost most of its samples, and how its
decision reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TRIAGE

import sembp_dsl as sbp


@pytest.fixture
def triage(tmp_path, fake_llm, script):
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url) as pipeline:
        yield pipeline


def rows(n: int, answer: str, start: int = 0) -> list[dict]:
    return [{"ticket": f"ticket {i}", "answer": answer} for i in range(start, start + n)]


def test_samples_the_current_prompts_lost_give_the_proposal_no_free_wins(triage, script, tmp_path):
    """A metric that raises on 5 of 8 validation samples the first time it sees them (the current prompts'
    turn), and a step that changes no answer: the 5 are unknown, asked again, and tie; no step is accepted.
    Before, they scored 0 and the step passed with "5 wins, 0 losses"."""
    script.verdict = lambda prompt: "Yes"  # every answer Yes, whatever the prompts: no step changes one
    script.improve = lambda param, prompt: f"Improved {param}: Answer Yes or No."
    failed: set[str] = set()

    def flaky(prediction, example):
        if example["ticket"] in {f"ticket {i}" for i in range(10, 15)} and example["ticket"] not in failed:
            failed.add(example["ticket"])
            raise RuntimeError("the scoring service blinked")
        return 1.0 if prediction.output == example["answer"] else 0.0

    outcome = triage.optimize(
        rows(2, "No"), rows(8, "Yes", start=10), metric=flaky, iterations=1, runs_dir=tmp_path / "runs"
    )
    [iteration] = outcome.outcome.iterations
    assert iteration.gate is not None and not iteration.accepted
    assert iteration.gate.wins == [] and iteration.gate.losses == []
    record = json.loads((Path(outcome.record) / "run.json").read_text())
    assert len(record["initial_lost"]) == 5
