"""The pipeline a user actually runs, running: on the loopback fake server, each node's calls go to its own
model, system messages are sent and trained, a frozen param stays while its neighbour changes, a shared
param hears from both its nodes, record outputs are read, validated and scored by field, and
`response_format` goes only to providers that take one (issue 17)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import Script
from test_nodes import DESK

import sembp_dsl as sbp
from sembp_dsl.language.syntax.source import load
from sembp_dsl.models import prices

FACTS = {"product": "app", "mood": "angry"}


class Desk(Script):
    """Answers DESK's nodes by the marker each template starts with; backward and optimizer as Script does."""

    def __init__(self):
        super().__init__()
        self.facts = lambda prompt: json.dumps(FACTS)
        self.judge = lambda prompt: json.dumps({"verdict": "No", "reason": "calm enough", "confidence": 0.5})

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        if self.kind(prompt) != "forward":
            return super().__call__(messages)
        self.prompts.append(prompt)
        if prompt.startswith("FACTS"):
            return self.facts(prompt)
        if prompt.startswith("DRAFT"):
            return "Sorry about that."
        return self.judge(prompt)


@pytest.fixture
def desk(tmp_path):
    from fake_server import FakeServer

    script = Desk()
    with FakeServer(delay=0.0, reply=script) as server:
        path = tmp_path / "desk.sbp"
        named = DESK.replace("name = ", f'api_base = "{server.url}"  name = ')
        path.write_text(named + f'model {{ name = "openai/fake"  api_base = "{server.url}" }}  # backward, optimizer\n')
        yield path, server, script


def bodies(server, model: str) -> list[dict]:
    return [b for b in server.bodies if b["model"] == model]


def test_each_nodes_calls_go_to_its_own_model_and_the_ledger_counts_each(desk):
    path, server, _ = desk
    with sbp.load(path) as pipeline:
        prediction = pipeline(ticket="The app crashes and I am furious.")
        ledger = pipeline.ledger
    assert [b["model"] for b in server.bodies] == ["fake-fast", "fake-fast", "gpt-4o-mini"]  # facts, draft, judge
    assert ledger.roles["forward"].calls == 3
    assert (ledger.models["fast"].calls, ledger.models["strong"].calls) == (2, 1)
    rendered = ledger.render()
    assert re.search(r"^fast\s+2 .*openai/fake-fast$", rendered, re.M), rendered
    assert re.search(r"^strong\s+1 .*openai/gpt-4o-mini$", rendered, re.M), rendered
    assert prediction.output == "No"


def test_the_system_message_is_sent_before_the_prompt(desk):
    path, server, _ = desk
    with sbp.load(path) as pipeline:
        prediction = pipeline(ticket="t")
    [judge] = bodies(server, "gpt-4o-mini")
    assert judge["messages"][0] == {"role": "system", "content": "You follow the house rules."}
    assert judge["messages"][1]["role"] == "user" and judge["messages"][1]["content"].startswith("VERDICT")
    assert all(len(b["messages"]) == 1 for b in bodies(server, "fake-fast"))  # no system message of their own
    assert prediction.trace.nodes["judge"].system == "You follow the house rules."


def test_response_format_goes_only_to_a_provider_that_takes_one(desk):
    assert prices.supports_response_schema("openai/gpt-4o-mini") and not prices.supports_response_schema(
        "openai/fake-fast"
    )
    path, server, _ = desk
    with sbp.load(path) as pipeline:
        pipeline(ticket="t")
    facts, draft = bodies(server, "fake-fast")
    [judge] = bodies(server, "gpt-4o-mini")
    schema = judge["response_format"]["json_schema"]["schema"]
    assert judge["response_format"]["type"] == "json_schema" and schema["required"] == [
        "verdict",
        "reason",
        "confidence",
    ]
    assert schema["properties"]["verdict"] == {"type": "string", "enum": ["Yes", "No"]}
    assert "Reply with a JSON object" not in judge["messages"][-1]["content"]  # the schema says it
    # a provider that takes no schema is told the fields in words instead
    assert "response_format" not in facts and "response_format" not in draft
    assert facts["messages"][-1]["content"].endswith('- "product": text\n- "mood": one of "calm", "angry"')


def test_litellm_says_which_provider_takes_a_schema():
    litellm = pytest.importorskip("litellm")
    for model in ("openai/gpt-4o-mini", "openai/fake-fast", "anthropic/claude-3-5-haiku-latest", "ollama/llama3"):
        assert prices.supports_response_schema(model) == litellm.supports_response_schema(model), model


def test_a_record_is_read_by_field_downstream_and_scored_by_field(desk):
    path, server, script = desk
    with sbp.load(path) as pipeline:
        prediction = pipeline(ticket="t")
        assert prediction.record == {"verdict": "No", "reason": "calm enough", "confidence": 0.5}
        assert prediction.trace.nodes["facts"].output == json.dumps(FACTS)
        [draft] = [p for p in script.prompts if p.startswith("DRAFT")]
        assert "Product: app, mood: angry" in draft
        evaluation = pipeline.evaluate([{"ticket": "a", "answer": "No"}, {"ticket": "b", "answer": "Yes"}])
    assert (evaluation.correct, evaluation.scored) == (1, 2)  # the verdict, not the whole record, is scored
    assert [r.trace.output for r in evaluation.results] == ["No", "No"]


def test_a_metric_may_read_the_whole_record(desk):
    path, _, _ = desk
    with sbp.load(path) as pipeline:
        confident = pipeline.evaluate(
            [{"ticket": "a", "answer": "No"}], metric=lambda prediction, example: prediction.record["confidence"]
        )
    assert confident.accuracy == 0.5


def test_a_record_reply_that_does_not_fit_is_a_parse_failure_with_its_reason(desk):
    path, _, script = desk
    script.facts = lambda prompt: '{"product": "app", "mood": "livid"}'
    script.judge = lambda prompt: 'Sure! {"verdict": "Maybe", "reason": "unsure", "confidence": 1}'
    with sbp.load(path) as pipeline:
        prediction = pipeline(ticket="t")
    facts = prediction.trace.nodes["facts"]
    assert facts.output is None and facts.error == "field 'mood' is \"livid\", not one of calm, angry"
    assert prediction.output is None and prediction.error == "field 'verdict' is \"Maybe\", not one of Yes, No"
    assert not prediction.failed  # a reply was read and did not fit: scored wrong, not lost
    # successors read the raw reply of a node whose reply did not fit, in every field
    [draft] = [p for p in script.prompts if p.startswith("DRAFT")]
    assert 'Product: {"product": "app", "mood": "livid"}' in draft


def optimize(path, script, **settings):
    examples = [{"ticket": f"ticket {i}", "answer": "Yes"} for i in range(4)]
    with sbp.load(path) as pipeline:
        return pipeline.optimize(
            examples[:2], examples[2:], iterations=1, gate="none", write=True, runs_dir=path.parent / "runs", **settings
        )


def test_optimize_trains_the_system_message_and_every_param_but_the_frozen_one(desk):
    path, _, script = desk
    before = path.read_text()
    optimized = optimize(path, script)
    [iteration] = optimized.outcome.iterations
    fates = {c.param: c.fate for c in iteration.candidates}
    assert fates == dict.fromkeys(["extract_task", "write_task", "shared", "rules", "judge_task"], "taken")
    after = load(str(path))
    prompts = {p.name: p.text for p in after.params}
    assert prompts["rules"] == "Improved instruction for rules."  # the system message, trained
    assert prompts["write_task"] == "Improved instruction for write_task."  # the frozen style's neighbour
    assert prompts["style"] == "Be brief and kind."  # frozen: never asked about, never changed
    assert not any('"style"' in p for p in script.of_kind("optimizer"))
    # only the params' literals changed: comments, layout and every other byte stayed
    changed = [line for line in after.text.splitlines() if line not in before.splitlines()]
    assert len(changed) == 5 and all(line.startswith("param ") for line in changed), changed


def test_the_system_message_is_shown_to_the_backward_model(desk):
    path, _, script = desk
    optimize(path, script)
    judge_question = next(p for p in script.of_kind("backward") if "# Output of judge\n" in p)
    assert "# System message given to judge\nYou follow the house rules." in judge_question
    assert '# Output of judge\n{"verdict": "No", "reason": "calm enough", "confidence": 0.5}' in judge_question


def test_a_shared_param_hears_from_every_node_that_uses_it(desk):
    path, _, script = desk
    optimize(path, script)
    [shared] = [p for p in script.of_kind("optimizer") if 'The instruction "shared"' in p]
    # feedback on draft (from the judge's backward question) and on judge (the loss), for each sample
    assert shared.count("draft should say more.") == 2 and shared.count("The answer should be Yes.") == 2
    assert shared.count("Output:\nSorry about that.") == 2 and shared.count('Output:\n{"verdict": "No"') == 2
    [task] = [p for p in script.of_kind("optimizer") if 'The instruction "judge_task"' in p]
    assert "Output:\nSorry about that." not in task  # a param of one node hears from that node alone


def test_model_overrides_combine_with_named_models(desk):
    path, _, _ = desk
    everything = sbp.load(path, model="openai/other")
    # every node names its model, so no call takes the forward role: it is not a model of the run
    assert everything.models == {k: "openai/other" for k in ("backward", "optimizer", "fast", "strong")}
    one = sbp.load(path, roles={"strong": "openai/gpt-4o"})
    assert (one.models["strong"], one.models["fast"]) == ("openai/gpt-4o", "openai/fake-fast")
    with pytest.raises(ValueError, match=r"roles\['forward'\] would change no call: every node of .* names its own"):
        sbp.load(path, roles={"forward": "openai/gpt-4o"})
    with pytest.raises(ValueError, match="unknown model role 'stong'; did you mean 'strong'?"):
        sbp.load(path, roles={"stong": "x"})


def test_the_plan_counts_each_model(desk):
    path, _, _ = desk
    examples = [{"ticket": f"t{i}", "answer": "Yes"} for i in range(4)]
    with sbp.load(path) as pipeline:
        plan = pipeline.plan(examples[:2], examples[2:], iterations=1)
    # per node: 1 training pass of 2 + 2 gate passes of 2 = 6 forward calls
    assert plan.calls["forward"] == 18 and plan.models["fast"]["calls"] == 12 and plan.models["strong"]["calls"] == 6
    assert plan.models["backward"]["calls"] == plan.calls["backward"]
    assert "by model:" in plan.render() and re.search(r"^\s+fast\s+12 calls", plan.render(), re.M)
