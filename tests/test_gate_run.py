"""The gate inside a run: what the current prompts lost, a gate that lost most of its samples, and how its
decision reads."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import TRIAGE, Script

import sembp_dsl as sbp
from sembp_dsl.language.messages import Message
from sembp_dsl.learning.stats import sign_test as p
from sembp_dsl.learning.summary import summary
from sembp_dsl.models import llm as llm_module
from sembp_dsl.models import wire
from sembp_dsl.models.mock import MockTransport
from sembp_dsl.models.transport import Reply
from sembp_dsl.records.record import GateDecision, Iteration


@pytest.fixture
def triage(tmp_path, fake_llm, script):
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url) as pipeline:
        yield pipeline


@pytest.fixture
def fixed_triage(tmp_path, fake_llm, script):
    """At a fixed concurrency: no window learns from the server's 429s (an adaptive one would make them rare)."""
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    with sbp.load(path, model="openai/fake", api_base=fake_llm.url, concurrency=16) as pipeline:
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


def test_a_gate_that_lost_most_of_its_samples_stops_the_run_and_accepts_nothing(
    fixed_triage, script, fake_llm, tmp_path
):
    """From the optimizer call on, the server answers 429 to any request past 1 in flight: the gate loses most of
    its samples. It decides nothing: the run stops with the cause, resumable, no step accepted; once the server
    is well again, --resume finishes it."""
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"

    def improve(param, prompt):
        fake_llm.configure(limit=1, delay=0.05)
        return f"Improved {param}: Answer Yes or No."

    script.improve = improve
    lines: list[str] = []
    outcome = fixed_triage.optimize(
        rows(4, "Yes"), rows(12, "Yes", start=20), iterations=1, runs_dir=tmp_path / "runs", log=lines.append
    )
    assert outcome.outcome.failed and not any(it.accepted for it in outcome.outcome.iterations)
    found = re.fullmatch(
        r"the gate lost (\d+) of the (\d+) samples it evaluated \(iteration 1\), so it decides nothing: "
        r"429 Too Many Requests x(\d+)",
        outcome.outcome.stopped,
    )
    assert found and int(found[1]) == int(found[3]) and int(found[1]) * 2 > int(found[2])
    assert outcome.pipeline.prompts == fixed_triage.prompts
    record = json.loads((Path(outcome.record) / "run.json").read_text())
    assert record["iterations"] == [] and not record["finished"]
    fake_llm.configure(limit=0, delay=0.0)
    again = fixed_triage.optimize(
        rows(4, "Yes"), rows(12, "Yes", start=20), iterations=1, runs_dir=tmp_path / "runs", resume=True
    )
    assert again.outcome.iterations[0].accepted and not again.outcome.failed


def gate_line(alpha: float, wins: int, losses: int, accepted: bool, before=0.5, after=None, **gate) -> str:
    it = Iteration(1, 0.5, before, after, accepted=accepted)
    it.gate = GateDecision(
        [f"w{i}" for i in range(wins)], [f"l{i}" for i in range(losses)], p(wins, losses), alpha, **gate
    )
    return summary(it, iterations=2, train_size=4).splitlines()[1]


def test_the_gate_line_reads_right_at_every_alpha():
    assert gate_line(0.05, 1, 2, False).endswith("1 win, 2 losses, p = 0.875 > 0.05: does not pass")
    falls = gate_line(0.2, 5, 1, False, gain=-0.5)
    assert falls.endswith("p = 0.109 <= 0.2, but the mean must rise (the scores fall by 0.500 in all): does not pass")
    assert gate_line(0.2, 5, 1, True).endswith("5 wins, 1 loss, p = 0.109 <= 0.2: passes")
    assert gate_line(1.0, 1, 1, False).endswith("1 win, 1 loss; at gate_alpha 1 wins must beat losses: does not pass")
    assert gate_line(1.0, 2, 1, True).endswith("2 wins, 1 loss; at gate_alpha 1 wins must beat losses: passes")
    partial = gate_line(1.0, 2, 1, False, gain=-0.6)
    assert partial.endswith("wins must beat losses, and the mean rise (the scores fall by 0.600 in all): does not pass")


def test_a_gate_line_with_a_score_unknown_on_either_side_does_not_crash():
    """An accepted step whose gate settled early leaves the next iteration's score before it unknown."""
    assert "gate: - -> 0.500; 1 win, 0 losses" in gate_line(0.5, 1, 0, True, before=None, after=0.5)
    assert gate_line(0.5, 1, 0, True, before=0.5, after=None).startswith("  gate: 1 win, 0 losses")


def test_the_plan_names_every_roles_model_and_warns_when_remote_nodes_learn_from_the_embedded_one(
    tmp_path, fake_llm, capsys
):
    """Nodes on a remote model, no model for backward and optimizer: those roles fall to the embedded model. The
    plan (printed at the start of every run) names each role's model and says so."""
    from sembp_dsl import cli

    source = (
        TRIAGE.replace("prompt = look }", "prompt = look  model = fast }").replace(
            "prompt = decide }", "prompt = decide  model = fast }"
        )
        + f'\nmodel fast {{ name = "openai/fake"  api_base = "{fake_llm.url}" }}\n'
    )
    path = tmp_path / "triage.sbp"
    path.write_text(source)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(12, "Yes")))
    flags = ["--train-size", "6", "--val-size", "6", "--test-size", "0", "--plan"]
    code = cli.main(["optimize", str(path), "--data", str(tmp_path / "rows.jsonl"), *flags])
    out = capsys.readouterr()
    assert code == 0, out.err
    text = out.out + out.err
    assert "models: fast openai/fake, backward embedded/smollm2-135m, optimizer embedded/smollm2-135m" in text
    assert (
        "warning[W013]: backward and optimizer run on the embedded model embedded/smollm2-135m while the nodes call "
        "openai/fake" in text
    )


def test_a_settled_gate_cancels_the_calls_still_in_flight_and_counts_none_of_them(tmp_path, monkeypatch):
    """Gate rule at alpha 1, the current prompts wrong on all 8 validation samples: the proposal's first right
    answer settles it. A round takes 8 samples; the proposal's calls on every sample but the first it is asked
    about hang until cancelled (or answer after 10 s, which would fail the counts). The 7 hung samples' first calls
    are cancelled in flight, their second node never asked: 9 calls of the proposal where the round whole takes
    16; no failure, no retry, and the cancelled samples unknown (not ties, not lost)."""
    script = Script()
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    script.improve = lambda param, prompt: f"Improved {param}: Answer Yes or No."
    first: list[str] = []
    asked: list[str] = []

    class Hanging(MockTransport):
        async def send(self, model: str, messages: Sequence[Message], *, timeout: float, **params: Any) -> Reply:
            prompt = messages[-1].content or ""
            ticket = re.search(r"ticket \d+", prompt)
            if ticket and "Improved" in prompt and script.kind(prompt) == "forward":
                asked.append(ticket[0])
                first[:] = first or [ticket[0]]
                if ticket[0] != first[0]:
                    try:
                        await asyncio.wait_for(asyncio.Event().wait(), 10)
                    except asyncio.TimeoutError:
                        pass
            return await super().send(model, messages, timeout=timeout, **params)

    mock = Hanging(lambda request: script(wire.encode(request.messages)))
    monkeypatch.setattr(llm_module, "serving", lambda name: lambda: mock)
    path = tmp_path / "triage.sbp"
    path.write_text(TRIAGE)
    with sbp.load(path, model="openai/fake", cache=False) as pipeline:
        found = pipeline.optimize(
            rows(2, "Yes"), rows(8, "Yes", start=10), iterations=1, gate_alpha=1.0, runs_dir=tmp_path / "runs"
        )
    [iteration] = found.outcome.iterations
    gate = iteration.gate
    assert iteration.accepted and gate is not None and len(gate.wins) == 1 and gate.losses == gate.lost == []
    assert gate.decided_after == gate.samples == 1 and gate.of == 8 and gate.evaluated == gate.wins
    assert len(gate.cancelled) == 7 and not set(gate.cancelled) & set(gate.wins)
    assert len(asked) == 9 < 2 * 8  # the round whole: 2 calls on each of 8 samples
    ledger = json.loads((Path(found.record) / "run.json").read_text())["ledger"]
    assert ledger["counters"]["calls cancelled in flight"] == 7
    assert all(usage["failures"] == usage["retries"] == 0 for usage in ledger["roles"].values())
