"""pipelines/support.sbp, issue 17's example, end to end on the loopback fake server: its cheap and strong models,
its system message and record output, eval and optimize; a step is written back only when it passes the gate."""

from __future__ import annotations

import difflib
import json
import re
import shutil

import pytest
from conftest import ROOT, Script

from sembp_dsl import cli
from sembp_dsl.language.syntax.source import load

ANSWERS = {
    row["ticket"]: row["answer"]
    for row in map(json.loads, (ROOT / "pipelines/support.jsonl").read_text(encoding="utf-8").splitlines())
}


class Desk(Script):
    """The support desk's models: facts and a draft for any ticket; the review decides as `decide` says, from
    the ticket and its instructions (system message and prompt): by default it sends every draft until the
    instructions are rewritten, then decides right."""

    def __init__(self):
        super().__init__()
        self.decide = lambda ticket, instructions: ANSWERS[ticket] if "Improved" in instructions else "send"

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        if self.kind(prompt) != "forward":
            return super().__call__(messages)
        self.prompts.append(prompt)
        if "Draft reply:" in prompt:
            ticket = re.search(r"^Ticket: (.*)$", prompt, re.M).group(1)
            decision = self.decide(ticket, messages[0]["content"] + "\n" + prompt)
            return json.dumps({"decision": decision, "reason": "as the rules say", "confidence": 0.9})
        if "House style" in prompt:
            return "Thank you for writing. We are looking into it.\nThe support team"
        return "product: the app; problem: as written; asks: help"


@pytest.fixture
def desk(tmp_path):
    from fake_server import FakeServer

    script = Desk()
    with FakeServer(delay=0.0, reply=script) as server:
        text = (ROOT / "pipelines/support.sbp").read_text(encoding="utf-8")
        names = {"fast": "openai/fake-fast", "strong": "openai/gpt-4o-mini"}  # gpt-4o-mini takes a JSON Schema
        for block in ("fast", "strong", "backward", "optimizer"):
            text = re.sub(
                rf'(model {block}\s*\{{ name = )"embedded/smollm2-135m"',
                rf'\1"{names.get(block, "openai/fake")}"  api_base = "{server.url}"',
                text,
            )
        path = tmp_path / "support.sbp"
        path.write_text(text, encoding="utf-8")
        shutil.copy(ROOT / "pipelines/support.jsonl", tmp_path / "support.jsonl")
        yield path, server, script


def sbpc(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_example_checks_clean_and_uses_every_feature():
    graph = __import__("sembp_dsl").load(ROOT / "pipelines/support.sbp").graph
    assert {n.model for n in graph.nodes.values()} == {"fast", "strong"}
    review = graph.nodes["review"]
    assert review.type.kind == "record" and review.system_params == ("review_rules",)
    assert graph.nodes["draft"].params == ("draft_task", "style") and graph.output_field == "decision"
    assert "style" not in graph.trainable
    rows = (ROOT / "pipelines/support.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 20 and {json.loads(r)["answer"] for r in rows} == {"send", "escalate"}


def test_eval_sends_each_node_to_its_model_and_scores_the_decision(desk, capsys):
    path, server, _ = desk
    code, out, _ = sbpc(capsys, "eval", str(path), "--data", str(path.parent / "support.jsonl"), "--json")
    assert code == 0
    report = json.loads(out)
    escalations = sum(answer == "escalate" for answer in ANSWERS.values())
    assert report["scored"] == 20 and report["correct"] == 20 - escalations  # every draft sent
    assert report["ledger"]["models"]["fast"]["calls"] == 40 and report["ledger"]["models"]["strong"]["calls"] == 20
    reviews = [b for b in server.bodies if b["model"] == "gpt-4o-mini"]
    assert len(reviews) == 20 and all(b["messages"][0]["role"] == "system" for b in reviews)
    assert all(
        b["response_format"]["json_schema"]["schema"]["required"] == ["decision", "reason", "confidence"]
        for b in reviews
    )
    drafts = [b for b in server.bodies if b["model"] == "fake-fast" and "House style" in b["messages"][-1]["content"]]
    assert len(drafts) == 20 and all("response_format" not in b for b in drafts)


def optimize(path, capsys, iterations: int = 1) -> tuple[int, str]:
    code, out, err = sbpc(
        capsys,
        "optimize",
        str(path),
        "--data",
        str(path.parent / "support.jsonl"),
        "--train-size",
        "6",
        "--val-size",
        "14",
        "--iters",
        str(iterations),
        "--runs-dir",
        str(path.parent / "runs"),
    )
    return code, out + err


def test_optimize_writes_back_a_step_that_passes_the_gate(desk, capsys):
    path, _, script = desk
    before = load(str(path))
    code, output = optimize(path, capsys)
    assert code == 0 and "accepted" in output, output
    after = load(str(path))
    old, new = ({p.name: p.text for p in x.params} for x in (before, after))
    assert new["review_rules"] == "Improved instruction for review_rules."  # the system message, trained
    assert new["style"] == old["style"]  # frozen: never rewritten
    assert {name for name in old if new[name] != old[name]} <= {
        "extract_task",
        "draft_task",
        "review_rules",
        "review_task",
    }
    # nothing but those literals changed: nodes, templates, models, comments
    assert (after.nodes, after.templates, after.blocks, after.edges) == (
        before.nodes,
        before.templates,
        before.blocks,
        before.edges,
    )
    comments = [line for line in before.text.splitlines() if line.startswith("#")]
    assert comments and all(line in after.text.splitlines() for line in comments)
    assert any('"review_rules"' in p for p in script.of_kind("optimizer"))
    # the diff docs/language.md shows is this run's
    name = "pipelines/support.sbp"
    written = difflib.unified_diff(
        before.text.splitlines(keepends=True), after.text.splitlines(keepends=True), f"a/{name}", f"b/{name}"
    )
    doc = (ROOT / "docs/language.md").read_text(encoding="utf-8")
    assert "".join(written) == re.search(r"```diff\n(--- a/pipelines/support\.sbp\n.*?)```", doc, re.S).group(1)


def test_optimize_leaves_the_file_alone_when_the_step_fails_the_gate(desk, capsys):
    path, _, script = desk
    script.decide = lambda ticket, instructions: "escalate" if "Improved" in instructions else "send"  # worse
    before = path.read_text(encoding="utf-8")
    code, output = optimize(path, capsys)
    assert code == 0 and "rejected by the gate" in output, output
    assert path.read_text(encoding="utf-8") == before


def test_optimize_writes_back_the_step_that_passed_and_not_the_one_that_failed(desk, capsys):
    """Two iterations: the first rewrite escalates every ticket (worse on the gate: rejected), the second decides
    right (accepted). The file ends with the second's texts, and nothing of the first."""
    path, _, script = desk
    rounds: dict[str, int] = {}

    def improve(param, prompt):
        rounds[param] = rounds.get(param, 0) + 1
        return f"Improved instruction for {param}, round {rounds[param]}."

    def decide(ticket, instructions):
        if "round 1" in instructions:
            return "escalate"
        return ANSWERS[ticket] if "round 2" in instructions else "send"

    script.improve, script.decide = improve, decide
    code, output = optimize(path, capsys, iterations=2)
    assert code == 0 and "rejected by the gate" in output and "accepted" in output, output
    after = path.read_text(encoding="utf-8")
    assert "round 1" not in after
    params = {p.name: p.text for p in load(str(path)).params}
    assert params["review_rules"] == "Improved instruction for review_rules, round 2."
    assert rounds["review_rules"] == 2 and "style" not in rounds  # asked twice; the frozen style never


def test_a_role_no_node_calls_needs_no_model(desk, capsys, monkeypatch):
    """Every node names its model, so the forward role has none and needs none: without the embedded model
    installed, eval and optimize still run. The roles a run does call must have one, before any call."""
    from sembp_dsl.models import embedded

    monkeypatch.setattr(embedded, "available", lambda: False)
    path, server, _ = desk
    data = str(path.parent / "support.jsonl")
    code, out, err = sbpc(capsys, "eval", str(path), "--data", data, "--limit", "2", "--json")
    assert code == 0, err
    assert set(json.loads(out)["ledger"]["models"]) == {"fast", "strong"}
    optimize = ["optimize", str(path), "--data", data, "--iters", "1", "--train-size", "2", "--val-size", "4"]
    optimize += ["--test-size", "0"]
    code, _, err = sbpc(capsys, *optimize)
    assert code == 0, err
    path.write_text(re.sub(r"model optimizer \{[^}]*\}\n", "", path.read_text()))
    calls = server.requests
    code, _, err = sbpc(capsys, *optimize)
    assert code == 1 and "no model is configured for optimizer calls" in err and server.requests == calls
