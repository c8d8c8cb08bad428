"""pipelines/liar_paper.sbp: the paper's LIAR graph as its code runs it, checked node by node and call by call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT, with_fake_model

from sembp_dsl import cli
from sembp_dsl.language.graph.compile import compile_file

PAPER = str(ROOT / "pipelines" / "liar_paper.sbp")
ANALYSTS = ["statement_analysis", "party_analysis", "job_title_analysis", "source_analysis", "state_analysis"]
RECORD = ["statement", "job_title", "state", "party", "source"]  # the order of the paper's record text
PAPER_CODE = ROOT.parent / "shared" / "paper" / "code" / "semantic_backprop"


@pytest.fixture(scope="module")
def graph():
    return compile_file(PAPER)


def test_topology_hint_order_and_output(graph):
    assert list(graph.nodes) == [*ANALYSTS, "final"] and graph.output == "final"
    final = graph.nodes["final"]
    assert list(final.hints) == ANALYSTS  # hint k of the judge = the paper's k-th task
    assert list(final.context) == RECORD
    assert final.type.choices == ("Yes", "No")
    for name in ANALYSTS:
        node = graph.nodes[name]
        assert list(node.inputs) == RECORD and not node.hints and node.type.kind == "text"
    assert graph.trainable == (
        "statement_task",
        "party_task",
        "job_title_task",
        "source_task",
        "state_task",
        "final_task",
    )


def test_models_limits_and_settings_are_liar_sh(graph):
    names = {role: graph.models[role].name for role in ("forward", "backward", "optimizer")}
    assert names == {
        "forward": "openai/gpt-4o-mini-2024-07-18",
        "backward": "openai/gpt-4-turbo-2024-04-09",
        "optimizer": "openai/gpt-4-turbo-2024-04-09",
    }
    for role in names:
        assert dict(graph.models[role].settings) == {"temperature": 0, "max_tokens": 1024}
    o = graph.optimize
    assert (o.iterations, o.errors_per_gradient, o.gradient, o.update, o.gate, o.gate_alpha, o.train_size) == (
        8,
        2,
        "sibling",
        "full",
        "train",
        1,
        50,
    )


VALUES = {
    "statement": "S",
    "job_title": "J",
    "state": "T",
    "party": "P",
    "source": "C",
    **{name: f"<{name}>" for name in ANALYSTS},
}


def test_forward_prompts_have_the_papers_layout(graph):
    context = "# Context\nStatement: S\nJob title: J\nState: T\nParty: P\nSource: C\n\n"
    analyst = graph.nodes["party_analysis"].render(VALUES, graph.prompts)
    assert analyst == (
        "# Task\nHow does the party feel about the statement?\n\n# Output format\n"
        "Answer in no more than two sentences.\n\n" + context + "#Answer"
    )
    final = graph.nodes["final"].render(VALUES, graph.prompts)
    hints = "".join(f"{k}. <{name}>\n" for k, name in enumerate(ANALYSTS, 1))
    assert final == (
        "# Task\n"
        + graph.prompts["final_task"]
        + "\n\n# Output format\nAnswer Yes or No as labels\n\n"
        + context
        + "# Hints\n"
        + hints
        + "\n# Answer"
    )


def test_backward_asks_once_with_every_hint_in_order(graph):
    [(receivers, question)] = graph.backward_questions(
        graph.nodes["final"], VALUES, "No", "The answer should be Yes.", sibling=True
    )
    assert receivers == tuple(ANALYSTS)
    assert graph.prompts["final_task"] in question and "Statement: S\nJob title: J" in question
    assert re.search(
        r"Hints:\n1\. <statement_analysis>\n2\. <party_analysis>\n3\. <job_title_analysis>\n"
        r"4\. <source_analysis>\n5\. <state_analysis>\n",
        question,
    )
    assert "Answer given: No" in question and "The answer should be Yes." in question
    assert (
        question.index("Task:") < question.index("Context:") < question.index("Hints:") < question.index("Answer given")
    )
    assert '"Hint x:"' in question


def test_no_sibling_shows_one_hint_and_neither_task_nor_record(graph):
    asks = graph.backward_questions(graph.nodes["final"], VALUES, "No", "The answer should be Yes.", sibling=False)
    assert [receivers for receivers, _ in asks] == [(name,) for name in ANALYSTS]
    for (name,), question in asks:
        assert (
            f"<{name}>" in question and "Statement: S" not in question and graph.prompts["final_task"] not in question
        )
        assert all(f"<{other}>" not in question for other in ANALYSTS if other != name)


def test_loss_and_optimizer_prompts(graph):
    assert (
        graph.render_builtin("loss", node="final", output="No", expected="Yes", parse_error="")
        == "The answer should be Yes."
    )
    examples = [{"input": "Statement: S", "output": "No", "gradient": "Hint said too little."}]
    prompt = graph.render_builtin(
        "optimizer", node="final", param="final_task", prompt="Decide.", examples=examples, max_chars=800
    )
    assert '"Decide."' in prompt and "## Case 1" in prompt and "Hint said too little." in prompt
    assert prompt.index("What it read:") < prompt.index("What it wrote:") < prompt.index("What it was told")
    assert "step by step" in prompt and "<prompt> and </prompt>" in prompt and prompt.rstrip().endswith("</prompt>.")
    bare = graph.render_builtin(
        "optimizer",
        node="final",
        param="final_task",
        prompt="Decide.",
        examples=[{**examples[0], "gradient": ""}],
        max_chars=800,
    )
    assert "What it was told" not in bare  # the no-gradient row shows input and output only, as the paper's does


@pytest.mark.skipif(not PAPER_CODE.is_dir(), reason="the paper's code is not beside the repository")
def test_our_method_prompts_do_not_copy_the_papers_wording():
    """The method's prompts say what the paper's say, in other words: no run of 6 words in common."""
    source = Path(PAPER).read_text()
    ours = source[source.index("template loss") : source.index("node statement_analysis")]
    theirs = (PAPER_CODE / "prompt_tmp.py").read_text()

    def runs(text: str) -> set[tuple[str, ...]]:
        words = re.findall(r"[a-z]+", text.lower())
        return {tuple(words[i : i + 6]) for i in range(len(words) - 5)}

    assert runs(ours) & runs(theirs) == set()


class PaperModel:
    """A fake model that answers the paper pipeline's own prompts, and keeps them by kind."""

    def __init__(self):
        self.prompts: dict[str, list[str]] = {"forward": [], "backward": [], "optimizer": []}

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        if "write a better prompt" in prompt:
            self.prompts["optimizer"].append(prompt)
            return "Step 1: think.\n<prompt>Weigh every hint before deciding.</prompt>"
        if "helped by a few hints" in prompt:
            self.prompts["backward"].append(prompt)
            return "\n".join(f"Hint {k}: be more specific." for k in range(1, 6))
        self.prompts["forward"].append(prompt)
        return (
            "No" if "# Hints" in prompt else f"{prompt.splitlines()[1]} {prompt.splitlines()[8]}"
        )  # own to the analyst and the sample


@pytest.mark.parametrize("gradient, backward_per_sample", [("sibling", 1), ("no-sibling", 5), ("none", 0)])
def test_one_iteration_on_liar_calls_as_the_papers_code_does(tmp_path, gradient, backward_per_sample):
    from fake_server import FakeServer

    model = PaperModel()
    with FakeServer(delay=0.0, reply=model) as server:
        path = tmp_path / "liar_paper.sbp"
        path.write_text(with_fake_model(Path(PAPER).read_text(), server.url))
        code = cli.main(
            [
                "optimize",
                str(path),
                "--data",
                "liar",
                "--train-size",
                "6",
                "--iters",
                "1",
                "--gradient",
                gradient,
                "--dry-run",
                "--runs-dir",
                str(tmp_path / "runs"),
            ]
        )
    assert code == 0
    assert len(model.prompts["backward"]) == 2 * backward_per_sample  # errors_per_gradient = 2
    assert len(model.prompts["optimizer"]) == 6  # every instruction, as liar.sh's SBP row
    told = [p for p in model.prompts["optimizer"] if "What it was told about its answer" in p]
    if gradient == "none":
        assert told == []
    else:
        judge = next(p for p in model.prompts["optimizer"] if "Determine whether the Statement" in p)
        assert "The answer should be Yes." in judge  # the loss reaches the judge's prompt
        assert len(told) == 6


def test_checks_clean_while_an_override_reading_a_missing_field_is_refused(tmp_path, capsys):
    """Built-in overrides are trial-rendered with hints and examples shaped as the method passes them:
    a field those records never have can never render."""
    assert cli.main(["check", PAPER]) == 0
    assert capsys.readouterr().err == ""
    source = Path(PAPER).read_text().replace("{{ hint.value }}\n", "{{ hint.text }}\n", 1)
    broken = tmp_path / "broken.sbp"
    broken.write_text(source)
    assert cli.main(["check", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "error[E052]: template cannot render" in err and "has no attribute 'text'" in err
