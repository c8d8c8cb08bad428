"""Every prompt sbpc lays out itself puts what stays the same from sample to sample before what varies, so that
a provider's prompt cache can serve the repeated beginning (docs/performance.md, "Prompt caches"): two samples'
prompts agree up to the first text a sample brings, and no fixed text of sbpc's follows it."""

from __future__ import annotations

import os
from pathlib import Path

from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.nodes.shapes import describe
from sembp_dsl.runtime.judge import VERDICT

ROOT = Path(__file__).resolve().parents[1]

SAMPLES = [
    {
        "statement": "Taxes rose.",
        "job_title": "Senator",
        "state": "Ohio",
        "party": "red",
        "source": "a debate",
        "statement_analysis": "Checkable.",
        "job_title_analysis": "Plausible.",
        "state_analysis": "Local.",
        "party_analysis": "On message.",
        "source_analysis": "Heated.",
        "verdict": "Yes",
    },
    {
        "statement": "Crime fell.",
        "job_title": "Mayor",
        "state": "Texas",
        "party": "blue",
        "source": "a tweet",
        "statement_analysis": "Vague.",
        "job_title_analysis": "Self-serving.",
        "state_analysis": "Statewide.",
        "party_analysis": "Partisan.",
        "source_analysis": "Brief.",
        "verdict": "No",
    },
]


def shared(first: str, second: str) -> str:
    return os.path.commonprefix([first, second])


def test_a_backward_question_shows_its_request_and_instruction_before_the_sample():
    graph = compile_file(str(ROOT / "pipelines/liar.sbp"))
    node = graph.nodes["verdict"]
    for sibling in (True, False):
        asked = [
            graph.backward_questions(node, s, s["verdict"], f"Wrong: {s['verdict']}", sibling)[0][1] for s in SAMPLES
        ]
        same = shared(*asked)
        assert asked[0].index("# Context\n") <= len(same)  # nothing of the sample before its context
        assert "Answer with exactly one line" in same and "# Instruction given to verdict\nDetermine whether" in same
        assert asked[0].endswith("# Feedback on the output\nWrong: Yes")  # the request is not repeated after it


def test_an_optimizer_question_shows_its_request_and_the_current_instruction_before_the_examples():
    graph = compile_file(str(ROOT / "pipelines/liar.sbp"))
    asked = [
        graph.optimizer_prompt(
            "verdict_task", "verdict", [{"input": s["statement"], "output": s["verdict"], "gradient": "Say more."}]
        )
        for s in SAMPLES
    ]
    same = shared(*asked)
    assert asked[0].index("## Example 1") <= len(same)
    assert "Reply with only the new instruction inside <prompt>...</prompt>." in same
    assert f"<prompt>\n{graph.prompts['verdict_task']}\n</prompt>" in same
    assert asked[0].rstrip().endswith("How the output should change:\nSay more.")


def test_a_judge_question_shows_its_rubric_and_scale_before_the_answer_it_grades():
    graph = compile_file(str(ROOT / "pipelines/replies.sbp"))
    spec = graph.metrics["helpful"]
    fields = describe(VERDICT)  # for a model no JSON Schema reaches
    asked = [
        graph.judge_question(spec, {"message": m}, f"Reply to {m}", "", fields) for m in ("It broke.", "Refund me.")
    ]
    same = shared(*asked)
    assert asked[0].index("# Inputs\n") <= len(same)
    assert "A good reply is polite" in same and "Reply with one JSON object" in same and "from 1 (worst) to 5" in same
    assert f"to 5.\n{fields}\n\n# Rubric" in same


def test_the_default_template_shows_the_instruction_and_demos_before_the_inputs(tmp_path):
    path = tmp_path / "demo.sbp"
    path.write_text(
        'pipeline demo "Answer a question"\n'
        "input question, topic: text\n"
        'param task = "Answer the question in one word."\n'
        'param style = "You are terse."\n'
        'demos shots max 2 = [{question: "Capital of France?", topic: "geography", answer: "Paris"}]\n'
        "node answer: text { prompt = task  demos = shots  system = style }\n"
        "question, topic -> answer\n"
        "output answer\n"
        "metric exact\n"
    )
    graph = compile_file(str(path))
    node = graph.nodes["answer"]
    rows = [{"question": "Capital of Peru?", "topic": "geography"}, {"question": "Two plus two?", "topic": "sums"}]
    asked = [node.render(row, graph.prompts) for row in rows]
    same = shared(*asked)
    assert asked[0].index("Question: Capital of Peru?") <= len(same)
    assert same.startswith("Answer the question in one word.") and "Example 1:\nQuestion: Capital of France?" in same
    assert [node.system_message(row, graph.prompts) for row in rows] == ["You are terse."] * 2  # sent first, alone
