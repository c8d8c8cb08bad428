"""Demonstrations as trainable parameters (issue 18): a `demos` param holds examples of a node's inputs and
output, shown in its prompt. The optimizer fills a trainable one from training samples the whole pipeline got
right, the set passes the gate like any step, and is written back into the file in a readable form that
loads to the same IR; a frozen one never changes; a rejected set leaves the file as it was."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from conftest import Script

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.syntax.parser import parse
from sembp_dsl.language.syntax.source import load
from sembp_dsl.language.syntax.yaml_form import parse_yaml
from sembp_dsl.language.tooling.fmt import format_text
from sembp_dsl.language.tooling.writeback import rewrite, updated
from sembp_dsl.learning.summary import summary
from sembp_dsl.records.record import SCHEMA, check
from sembp_dsl.records.report import render as render_report
from sembp_dsl.records.runs import render_show, resolve

QA = '''pipeline qa "Add a number to itself"

input question: text

param task = "Answer with the number alone."
demos shots max 2 = []

template ask = """
  {{ prompt }}

  {{ shots }}

  Question: {{ question }}
  """

node answer: text { prompt = task  template = ask  demos = shots }

question -> answer
output answer
'''

QA_YAML = """pipeline: qa
description: Add a number to itself
inputs:
  question: text
params:
  task: Answer with the number alone.
  shots:
    max: 2
    demos: []
templates:
  ask: |-
    {{ prompt }}

    {{ shots }}

    Question: {{ question }}
nodes:
  answer: {type: text, prompt: task, template: ask, demos: shots}
edges:
  - question -> answer
output: answer
"""

HANDWRITTEN = '''pipeline qa "Add a number to itself"
input question: text
param task = "Answer with the number alone."
frozen demos shots = [
  {question: "What is 1 + 1?", answer: "2"},
  {
    question: """
      What is 2 + 2?
      Think first.
      """,
    answer: "4",
  },
]
node answer: text { prompt = task  demos = shots }
question -> answer
output answer
'''


def rows(numbers):
    return [{"question": f"What is {n} + {n}?", "answer": str(2 * n)} for n in numbers]


class Adder(Script):
    """Adds right when the number is even, or when the prompt holds an example (`helped`); else answers 0."""

    def __init__(self, helped=True):
        super().__init__()
        self.helped = helped

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        if self.kind(prompt) != "forward":
            return super().__call__(messages)
        self.prompts.append(prompt)
        n = int(re.findall(r"What is (\d+) \+", prompt)[-1])
        return str(2 * n) if n % 2 == 0 or (self.helped and "Example 1:" in prompt) else "0"


@pytest.fixture
def adder(tmp_path):
    from fake_server import FakeServer

    script = Adder()
    with FakeServer(delay=0.0, reply=script) as server:
        yield server, script


def pipeline_file(tmp_path, server, text=QA, name="qa.sbp"):
    path = tmp_path / name
    if name.endswith(".sbp"):
        text += f'\nmodel {{ name = "openai/fake"  api_base = "{server.url}" }}\n'
    else:
        text += f"models:\n  default: {{name: openai/fake, api_base: '{server.url}'}}\n"
    path.write_text(text)
    return path


def optimize(path, train=(2, 3, 4, 5, 7), val=(11, 13, 15, 17, 19, 20), **settings):
    settings = {"iterations": 1, "gate": "val", "write": True, "runs_dir": path.parent / "runs", **settings}
    with sbp.load(path) as pipeline:
        return pipeline.optimize(rows(train), rows(val), **settings)


# --- the language ---------------------------------------------------------------------------------------


def test_demos_are_shown_where_the_template_names_them_and_as_a_loop():
    graph = build(parse(HANDWRITTEN, "qa.sbp"))
    assert graph.trainable == ("task",) and graph.trainable_demos == ()  # frozen: never picked
    prompt = graph.nodes["answer"].render({"question": "What is 5 + 5?"}, graph.prompts)
    # no template: the default shows them between the prompt and the inputs
    assert prompt == (
        "Answer with the number alone.\n\nExample 1:\nQuestion: What is 1 + 1?\nAnswer: 2\n\n"
        "Example 2:\nQuestion: What is 2 + 2?\nThink first.\nAnswer: 4\n\nQuestion: What is 5 + 5?"
    )
    looped = HANDWRITTEN.replace(
        "demos = shots }",
        'demos = shots  template = "{% for ex in shots %}Q{{ loop.index }} {{ ex.answer }} {% endfor %}{{ question }}" }',
    )
    graph = build(parse(looped, "qa.sbp"))
    assert graph.nodes["answer"].render({"question": "q"}, graph.prompts) == "Q1 2 Q2 4 q"


def test_an_empty_demos_param_leaves_the_default_prompt_as_it_was():
    with_demos = build(
        parse(HANDWRITTEN.replace("frozen demos shots = [", "demos shots = [\n]\ndemos unused = ["), "qa.sbp")
    )
    plain = build(parse(HANDWRITTEN.replace("  demos = shots }", " }"), "qa.sbp"))
    values = {"question": "What is 5 + 5?"}
    assert with_demos.nodes["answer"].render(values, with_demos.prompts) == plain.nodes["answer"].render(
        values, plain.prompts
    )


def test_the_yaml_twin_compiles_to_the_same_ir_and_the_formatter_keeps_the_layout():
    assert parse(QA, "qa.sbp") == parse_yaml(QA_YAML, "qa.yaml")
    assert format_text(HANDWRITTEN) == HANDWRITTEN  # already in the layout write-back writes
    squeezed = HANDWRITTEN.replace("[\n  {question", "[{question").replace('"2"},\n  {\n', '"2"}, {\n')
    assert parse(squeezed) == parse(HANDWRITTEN) and format_text(squeezed) == HANDWRITTEN


@pytest.mark.parametrize(
    "change, code, words",
    [
        ("demos = shots }", "E090", "undefined demos param 'shot'"),
        ("prompt = task  template", "E093", "'shots' is a demos param"),
        ("max 2 = []", "E095", "max must be a whole number of examples, 1 or more, not 0"),
        ("max 2 = []", "E099", "holds 3 examples, more than its max 2"),
        ("max 2 = []", "E096", "gives 'qestion', which node 'answer' neither receives nor answers"),
        ("max 2 = []", "E097", "example 1 of demos 'shots' lacks 'answer'"),
        ("max 2 = []", "E098", "gives 'answer' twice"),
        ("{{ shots }}\n", "E091", "has the demos 'shots', but its template never shows them"),
        ("demos = shots }", "E094", "already node 'answer''s"),
        ("demos = shots }", "E093", "shows the demos 'shots', but node 'other' does not have them"),
        ("demos shots max 2", "W011", "frozen: the optimizer picks no examples"),
        ("demos shots max 2", "W012", "has no examples"),
    ],
)
def test_bad_demos_are_reported_with_their_code(change, code, words):
    bad = {
        "E090": QA.replace("demos = shots }", "demos = shot }"),
        "E093": QA.replace("prompt = task  template", "prompt = shots  template")
        if "prompt" in change
        else QA.replace(
            "question -> answer", 'node other: text { template = "{{ shots }}" }\nquestion -> answer, other'
        ),
        "E095": QA.replace("max 2 = []", "max 0 = []"),
        "E099": QA.replace("max 2 = []", "max 2 = [" + '{question: "a", answer: "b"},' * 3 + "]"),
        "E096": QA.replace("max 2 = []", 'max 2 = [{qestion: "a", answer: "b"}]'),
        "E097": QA.replace("max 2 = []", 'max 2 = [{question: "a"}]'),
        "E098": QA.replace("max 2 = []", 'max 2 = [{question: "a", answer: "b", answer: "c"}]'),
        "E091": QA.replace("{{ shots }}\n", ""),
        "E094": QA.replace("question -> answer", "node other: text { demos = shots }\nquestion -> answer, other"),
        "W011": QA.replace("demos shots max 2", "frozen demos shots max 2").replace(
            "= []", '= [{question: "a", answer: "b"}]'
        ),
        "W012": QA.replace("demos shots max 2", "frozen demos shots"),
    }[code]
    try:
        found = build(parse(bad, "qa.sbp")).warnings
    except PipelineError as exc:
        found = exc.diagnostics
    assert any(d.code == code and words in d.message for d in found), [(d.code, d.message) for d in found]


def test_a_function_node_cannot_have_demos():
    from sembp_dsl.language.check.checker import check

    bad = QA.replace("template = ask  demos = shots", "demos = shots") + 'function f = "tools:f"\n'
    bad = bad.replace(
        "node answer: text { prompt = task  demos = shots }", "node answer: json { function = f  demos = shots }"
    )
    _, found = check(parse(bad, "qa.sbp"))
    assert [d.code for d in found if d.severity == "error"] == ["E092"], found


def test_demos_written_back_load_to_the_same_ir_in_both_syntaxes(tmp_path):
    examples = [{"question": "What is 2 + 2?\nCarefully.", "answer": "4"}, {"question": 'Say "6"', "answer": "6"}]
    for name, text in (("qa.sbp", QA), ("qa.yaml", QA_YAML)):
        pipeline = (parse if name.endswith(".sbp") else parse_yaml)(text, name)
        graph = build(pipeline)
        value = json.dumps(examples)
        new = rewrite(pipeline, {**graph.prompts, "shots": value})
        again = (parse if name.endswith(".sbp") else parse_yaml)(new, name)
        shots = pipeline.param("shots")
        assert again == pipeline.__class__(
            **{**vars(pipeline), "params": tuple(updated(p, value) if p is shots else p for p in pipeline.params)}
        )
        assert build(again).prompts["shots"] == json.dumps(examples, ensure_ascii=False)
        assert new.count("\n") > text.count("\n") + 3  # one example a line at least, not one long line
        if name.endswith(".sbp"):
            assert format_text(new) == new


# --- the optimizer, on the fake server ----------------------------------------------------------------


def test_a_set_from_right_training_samples_passes_the_gate_and_is_written_back(tmp_path, adder):
    server, script = adder
    path = pipeline_file(tmp_path, server)
    before = path.read_text()
    optimized = optimize(path)
    [iteration] = optimized.outcome.iterations
    [task, shots] = iteration.candidates
    assert iteration.accepted and shots.param == "shots" and shots.fate == "taken"
    # drawn from the training samples the pipeline got right (the even numbers), each one as it was answered
    assert sorted(shots.samples) == ["train:1", "train:3"]  # 2 and 4; 3, 5 and 7 were answered wrong
    chosen = json.loads(shots.new)
    assert sorted(e["question"] for e in chosen) == ["What is 2 + 2?", "What is 4 + 4?"]
    assert all(e["answer"] == str(2 * int(e["question"].split()[2])) for e in chosen)  # the node's own answers
    assert iteration.gate.wins and not iteration.gate.losses  # the odd numbers, now right
    # written back, readable, in the formatter's layout, and loading to the same IR as the run's last graph
    after = path.read_text()
    assert after != before and format_text(after) == after
    assert '  {question: "What is 2 + 2?", answer: "4"},' in after.splitlines()
    reloaded = sbp.load(path)
    assert reloaded.prompts["shots"] == optimized.pipeline.prompts["shots"] == shots.new
    assert reloaded.demos["shots"] == chosen
    reloaded.close()
    # the record says which examples were tried, where from and what the gate made of them
    record = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert check(record) is None and record["version"] == 5
    shown = render_show(resolve("1", tmp_path / "runs"))
    assert "candidate for shots: taken" in shown and "from the training samples" in shown
    assert "Example 1:\n" in shown.replace("      ", "") and "gate" in shown
    page = render_report([resolve("1", tmp_path / "runs")])
    assert "from the training samples train:1, train:3" in page and "Question: What is 2 + 2?\nAnswer: 4" in page
    assert SCHEMA["$defs"]["candidate"]["properties"]["samples"]


def test_a_rejected_set_leaves_the_file_as_it_was(tmp_path):
    from fake_server import FakeServer

    script = Adder(helped=False)  # examples do not help: the gate sees no wins
    with FakeServer(delay=0.0, reply=script) as server:
        path = pipeline_file(tmp_path, server)
        before = path.read_bytes()
        optimized = optimize(path, only=("shots",))
    [iteration] = optimized.outcome.iterations
    [shots] = iteration.candidates
    assert not iteration.accepted and shots.fate.startswith("rejected by the gate")
    assert path.read_bytes() == before
    assert not script.of_kind("optimizer") and not script.of_kind("backward")  # only demos were asked for


def test_an_example_the_file_cannot_hold_is_left_out_with_why_and_the_rest_is_written(tmp_path, adder):
    """A training row holding a NUL, answered right, would make the write-back fail at the end of the run and the
    whole result be lost: its example is left out, with why, and the set of the others is written."""
    server, _ = adder
    path = pipeline_file(tmp_path, server)
    train = [{**row, "question": row["question"] + "\x00"} if row["answer"] == "4" else row for row in rows((2, 4, 3))]
    with sbp.load(path) as pipeline:
        optimized = pipeline.optimize(
            train, rows((11, 13, 15, 17, 19, 20)), iterations=1, only=("shots",), write=True, runs_dir=tmp_path / "runs"
        )
    [iteration] = optimized.outcome.iterations
    [shots] = iteration.candidates
    assert iteration.accepted and shots.samples == ["train:2"]  # 4 + 4 held the NUL
    assert shots.left_out == ["train:1: question: control character \\x00 in a string; pipelines hold text"]
    assert '{question: "What is 4 + 4?", answer: "8"}' in path.read_text() and "\\u0000" not in path.read_text()
    assert "left out, as the file cannot hold it: sample train:1" in summary(iteration, 1, 3)
    assert "left out, as the pipeline file cannot hold it: sample train:1" in render_show(
        resolve("1", tmp_path / "runs")
    )
    assert check(json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())) is None


class Talker(Adder):
    """Answers right on even numbers, then talks on: a small max_tokens cuts the answer's text short."""

    def __call__(self, messages) -> str:
        answer = super().__call__(messages)
        if self.kind(messages[-1]["content"]) != "forward":
            return answer
        return f"The sum is {answer}. Adding a number to itself doubles it, as counting shows."


@pytest.mark.parametrize("max_tokens, taken", [(64, True), (5, False)])
def test_an_answer_a_length_limit_cut_off_is_no_example(tmp_path, max_tokens, taken):
    """'The sum is 4. Adding' scores right by the number in it, but as an example it would be written into the
    file as it was cut: no set is made of such answers."""
    from fake_server import FakeServer

    with FakeServer(delay=0.0, reply=Talker()) as server:
        path = pipeline_file(tmp_path, server)
        path.write_text(path.read_text().replace('api_base = "', f'max_tokens = {max_tokens}  api_base = "'))
        before = path.read_bytes()
        says = lambda prediction, example: f"is {example['answer']}." in (prediction.text or "")  # noqa: E731
        optimized = optimize(path, train=(2, 4), only=("shots",), gate="none", metric=says)
    assert optimized.outcome.stopped is None, optimized.outcome.stopped
    [iteration] = optimized.outcome.iterations
    [shots] = iteration.candidates
    assert iteration.train_score == 1.0  # both answered right, whole or cut
    if taken:
        assert shots.fate == "taken" and "doubles it, as counting shows." in path.read_text()
    else:
        assert shots.fate == "rejected: no sample answered right gave a whole example (unreadable, or cut off)"
        assert path.read_bytes() == before


def test_a_frozen_demos_param_never_changes(tmp_path):
    from fake_server import FakeServer

    script = Adder(helped=False)  # odd numbers stay wrong: there are errors to learn from
    with FakeServer(delay=0.0, reply=script) as server:
        path = pipeline_file(tmp_path, server, HANDWRITTEN)
        loaded = load(str(path))
        before = loaded.param("shots")
        optimized = optimize(path, gate="none")
    [iteration] = optimized.outcome.iterations
    assert [c.param for c in iteration.candidates] == ["task"] and iteration.accepted
    after = load(str(path))
    assert after.param("task").text == "Improved instruction for task."  # its neighbour changed
    written = lambda p: p.text[p.param("shots").literal.start : p.param("shots").literal.end]  # noqa: E731
    assert after.param("shots") == before and written(after) == written(loaded)  # the very same bytes
    assert all("Example 2:\nQuestion: What is 2 + 2?\nThink first.\nAnswer: 4" in p for p in script.of_kind("forward"))


def test_the_yaml_twin_is_optimized_and_written_back_too(tmp_path, adder):
    server, _ = adder
    path = pipeline_file(tmp_path, server, QA_YAML, "qa.yaml")
    optimized = optimize(path)
    assert optimized.outcome.iterations[0].accepted
    text = path.read_text()
    assert '      - question: "What is 2 + 2?"\n        answer: "4"\n' in text
    with sbp.load(path) as again:
        assert again.prompts["shots"] == optimized.pipeline.prompts["shots"]


def test_the_api_sets_demos_from_a_list_and_refuses_examples_of_another_node(tmp_path, adder):
    server, script = adder
    path = pipeline_file(tmp_path, server)
    with sbp.load(path) as pipeline:
        helped = pipeline.with_prompts({"shots": [{"question": "What is 1 + 1?", "answer": "2"}]})
        assert helped(question="What is 3 + 3?").output == "6"
        assert helped.demos == {"shots": [{"question": "What is 1 + 1?", "answer": "2"}]}
        with pytest.raises(ValueError, match="must give question, answer"):
            pipeline.with_prompts({"shots": [{"q": "x", "answer": "2"}]})
        with pytest.raises(ValueError, match="at most 2 examples"):
            pipeline.with_prompts({"shots": [{"question": "x", "answer": "2"}] * 3})


def test_the_bad_input_corpus_has_each_demos_error_located(tmp_path):
    """tests/test_hostile_files.py runs every corpus file through check and compile (no traceback); here each
    demos file named after a code reports that code, at a line and column."""
    from hostile_corpus import corpus

    cases = [(name, data) for name, data in corpus() if name.startswith("demos_")]
    assert len(cases) > 25
    for name, data in cases:
        path = tmp_path / name
        path.write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["check", str(path)])
        assert status in (0, 1), name
        code = re.search(r"_([EW]\d{3})", name)
        if code:
            where = rf"{re.escape(str(path))}:\d+:\d+: (error|warning)\[{code.group(1)}\]"
            assert re.search(where, err.getvalue()), (name, err.getvalue())


def test_renaming_a_node_or_an_input_renames_the_fields_of_its_examples():
    from sembp_dsl.language.tooling.editor import Document

    document = Document(HANDWRITTEN, "qa.sbp")
    at = {"question": HANDWRITTEN.index("question -> answer"), "answer": HANDWRITTEN.index("-> answer") + 3}
    for old, new in (("question", "query"), ("answer", "reply")):
        occurrences = document.rename(at[old], new)
        renamed = HANDWRITTEN
        for o in sorted(occurrences, key=lambda o: o.start, reverse=True):
            renamed = renamed[: o.start] + new + renamed[o.end :]
        graph = build(parse(renamed, "qa.sbp"))  # still compiles: every example names the renamed node
        assert all(new in example for example in json.loads(graph.prompts["shots"]))


def test_the_plan_counts_a_trainable_demos_param_as_full(tmp_path, adder):
    server, _ = adder
    path = pipeline_file(tmp_path, server)
    plain = pipeline_file(tmp_path, server, QA.replace("  demos = shots }", " }").replace("{{ shots }}", ""), "p.sbp")
    with sbp.load(path) as pipeline, sbp.load(plain) as without:
        full, empty = (p.plan(rows([2, 3]), rows([5, 7])) for p in (pipeline, without))
    # two examples, each a question and a reply at max_tokens, on top of the prompt without them
    assert full.prompt_tokens["forward"] > empty.prompt_tokens["forward"] + 2 * 256


def test_with_the_gate_on_the_training_split_a_sets_own_samples_are_left_out_of_its_gate(tmp_path, adder):
    """An example's own sample was answered right already: in its gate it can only tie or lose, and it says
    nothing of whether the examples help elsewhere. It is left out of the gate, and the record says so."""
    server, script = adder
    path = pipeline_file(tmp_path, server)
    optimized = optimize(path, gate="train", gate_alpha=1, only=("shots",))
    [iteration] = optimized.outcome.iterations
    [shots] = iteration.candidates
    assert sorted(shots.samples) == ["train:1", "train:3"]
    gate = iteration.gate
    assert gate.of == 3 and gate.held_out == ["train:1", "train:3"]
    assert not set(shots.samples) & set(gate.evaluated or ())
    # every one of the 3 a win: the first settles it at alpha 1 (the others can only win or tie), the rest of the
    # round is cancelled or not counted
    assert iteration.accepted and len(gate.wins) == 1 and set(gate.wins) <= {"train:2", "train:4", "train:5"}
    assert "left out of the gate: train:1, train:3" in summary(iteration, 1, 5)


def test_at_low_accuracy_the_demos_still_see_every_right_answer_of_the_split(tmp_path, adder):
    """One right answer in 8 (the pipeline gets only even numbers right), one error to learn from: the error
    draw alone would stop at its first failure, but a trainable demos param keeps the forward pass going to the
    end of the split, so the one right answer becomes the example. The plan counts that whole pass."""
    server, script = adder
    path = pipeline_file(tmp_path, server)
    with sbp.load(path, concurrency=1) as pipeline:  # one sample at a time: the draw would stop at its error
        optimized = pipeline.optimize(
            rows((1, 3, 5, 7, 9, 11, 13, 4)),
            rows((11, 13, 15, 17, 19, 20)),
            iterations=1,
            errors_per_gradient=1,
            only=("shots",),
            runs_dir=tmp_path / "runs",
        )
    [iteration] = optimized.outcome.iterations
    [shots] = iteration.candidates
    assert shots.samples == ["train:8"] and iteration.train_samples == 8


def test_with_no_training_sample_answered_right_labelled_examples_are_offered_and_gated(tmp_path, adder):
    """As DSPy's LabeledFewShot: the output node's examples are what it saw and each sample's own answer."""
    server, script = adder
    path = pipeline_file(tmp_path, server)
    optimized = optimize(path, train=(3, 5, 7), val=(11, 13, 15, 17), only=("shots",))  # odd: all answered 0
    [iteration] = optimized.outcome.iterations
    [shots] = iteration.candidates
    assert iteration.train_score == 0 and shots.fate == "taken" and iteration.gate.wins
    chosen = json.loads(shots.new)
    assert len(chosen) == 2 and all(e["answer"] == str(2 * int(e["question"].split()[2])) for e in chosen)
    assert all(e["answer"] != "0" for e in chosen)  # the rows' own answers, never what the node said


def test_a_node_behind_a_branch_that_ran_on_no_right_sample_is_said_so():
    """Right answers from the other side of a branch give the node no example, and its reason says why (the matrix
    found it blamed unreadable or cut-off replies)."""
    import random

    from sembp_dsl.language.nodes.trace import NodeTrace, Trace
    from sembp_dsl.learning.bootstrap import propose_demos
    from sembp_dsl.runtime.datasets import Sample
    from sembp_dsl.runtime.evaluate import Result

    graph = build(
        parse(
            'pipeline b\ninput q: text\nparam t = "Answer."\nparam s = "Go?"\ndemos shots max 2 = []\n'
            "node route: choice(go, stop) { prompt = s }\nnode a: text { prompt = t  demos = shots }\n"
            "node other: text { prompt = t }\nq -> route\nroute, q -> a when route == go\n"
            "route, q -> other when route == stop\noutput a | other\n",
            "b.sbp",
        )
    )
    traced = {"route": NodeTrace("route", "", "stop", "stop", None, 0, 0, 0.0, False)}
    traced |= {"a": NodeTrace.not_taken("a"), "other": NodeTrace("other", "", "4", "4", None, 0, 0, 0.0, False)}
    right = Result(Sample("1", {"q": "2+2"}, "4"), "4", Trace({"q": "2+2"}, traced, "other"), 1.0)
    candidate = propose_demos(graph, "shots", [right], random.Random(0))
    assert (
        candidate.new is None
        and candidate.reason == "'a' ran on no training sample answered right (a branch passed it by)"
    )
