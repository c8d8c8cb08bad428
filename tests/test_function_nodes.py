"""Function nodes, running on the loopback fake server: a Python callable in the graph, called with its
predecessors as keyword arguments; its output reaches its successors, its exception or timeout is that sample's
failure while the run goes on, and feedback on the final answer reaches the prompt that wrote its input,
through it (issue 18)."""

from __future__ import annotations

import time

import pytest
from conftest import Script

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.learning.backward import backward_calls

RAG = """\
pipeline rag "Answer a question from retrieved passages"
input question: text
function search = "tools:search"
param write_query = "QUERY: write a search query for the question."
frozen param answer_task = "Answer the question from the passages."
node query: text {{ prompt = write_query }}
node passages: json {{ function = search {timeout} }}
node answer: text {{ prompt = answer_task }}
question -> query -> passages -> answer
question -> answer
output answer
model {{ name = "openai/fake"  api_base = "{url}"  temperature = 0 }}
"""

TOOLS = '''\
import asyncio
import time

CALLS = []


def search(query):
    """Return the passages of the corpus that mention the query's words."""
    CALLS.append(query)
    if "boom" in query:
        raise ValueError(f"cannot search for {query!r}")
    return [{"title": "Doc", "text": f"passage for {query}"}]


async def slow(query):
    """Takes its time."""
    await asyncio.sleep(5)
    return []


def sleepy(query):
    time.sleep(1)
    return []


def wrong(query):
    return {1, 2}
'''


class Rag(Script):
    """The query node echoes the question as its query; the answer node says "Paris"."""

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        if self.kind(prompt) == "forward" and prompt.startswith("QUERY"):
            self.prompts.append(prompt)
            return "query: " + prompt.rsplit("Question: ", 1)[-1]
        return super().__call__(messages) if self.kind(prompt) != "forward" else self.answer(prompt)

    def answer(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return "Paris"


@pytest.fixture
def rag(tmp_path):
    from fake_server import FakeServer

    script = Rag()
    with FakeServer(delay=0.0, reply=script) as server:

        def make(function: str = "search", timeout: str = "", tools: str = TOOLS):
            (tmp_path / "tools.py").write_text(tools)
            path = tmp_path / "rag.sbp"
            source = RAG.format(url=server.url, timeout=timeout)
            path.write_text(source.replace('"tools:search"', f'"tools:{function}"'))
            return path

        yield make, server, script


def test_a_function_nodes_output_reaches_its_successors_and_it_makes_no_model_call(rag):
    make, server, script = rag
    with sbp.load(make()) as pipeline:
        prediction = pipeline(question="What is the capital of France?")
    trace = prediction.trace.nodes
    assert trace["passages"].output == '[{"text": "passage for query: What is the capital of France?", "title": "Doc"}]'
    assert trace["passages"].prompt == 'search(query="query: What is the capital of France?")'
    [answer_prompt] = [p for p in script.prompts if p.startswith("Answer the question")]
    assert "passage for query: What is the capital of France?" in answer_prompt
    assert len(server.bodies) == 2  # query and answer: the function node called no model
    assert prediction.output == "Paris" and prediction.usage.calls == 2


def test_arguments_arrive_typed_and_an_async_function_is_awaited(rag):
    make, _, _ = rag
    tools = TOOLS + (
        "\n\nasync def first(passages):\n"
        "    '''The first passage's text.'''\n"
        "    assert isinstance(passages, list), type(passages)\n"
        "    return passages[0]['text']\n"
    )
    path = make(tools=tools)
    text = path.read_text().replace(
        'function search = "tools:search"', 'function search = "tools:search"\nfunction first = "tools:first"'
    )
    text = text.replace("node answer:", "node top: text { function = first }\nnode answer:")
    text = text.replace("query -> passages -> answer", "query -> passages -> top -> answer")
    path.write_text(text)
    with sbp.load(path) as pipeline:
        prediction = pipeline(question="q?")
    assert prediction.trace.nodes["top"].output == "passage for query: q?"


def test_an_exception_is_that_samples_failure_and_the_run_goes_on(rag):
    make, server, _ = rag
    with sbp.load(make()) as pipeline:
        good, bad = pipeline.batch([{"question": "fine"}, {"question": "boom"}])
        evaluation = pipeline.evaluate(
            [{"question": "fine", "answer": "Paris"}, {"question": "boom", "answer": "Paris"}]
        )
        ledger = pipeline.ledger
    assert good.output == "Paris" and good.error is None
    failed = bad.trace.nodes["passages"]
    assert failed.output is None and failed.error == (
        "function failed: search raised ValueError: cannot search for 'query: boom'"
    )
    assert bad.output is None and bad.error == f"not reached: {failed.error}"
    assert not bad.failed  # the pipeline's answer is wrong, not lost to a failed call
    assert evaluation.scored == 2 and evaluation.correct == 1 and not evaluation.lost
    assert ledger.counters["function failures"] == 2
    answered = [b for b in server.bodies if "Answer the question" in b["messages"][-1]["content"]]
    assert len(answered) == 1  # the good sample's (evaluate's is a cache hit): the failed one never reached it


def test_a_function_that_overruns_its_timeout_fails_its_sample(rag):
    make, _, _ = rag
    for function in ("slow", "sleepy"):
        with sbp.load(make(function, timeout="timeout = 0.2")) as pipeline:
            started = time.monotonic()
            prediction = pipeline(question="q")
            assert time.monotonic() - started < 0.9, function  # not the 5 s (or 1 s) it would take
        assert prediction.trace.nodes["passages"].error == (
            "function failed: search took longer than its timeout of 0.2s"
        )
        assert prediction.output is None


def test_a_return_value_its_type_cannot_hold_fails_its_sample(rag):
    make, _, _ = rag
    with sbp.load(make("wrong")) as pipeline:
        prediction = pipeline(question="q")
    assert prediction.trace.nodes["passages"].error.startswith(
        "function failed: what search returned is a set, which is not JSON"
    )


def test_run_trace_labels_a_function_that_raised_or_timed_out_a_function_failure(rag, capsys):
    make, _, _ = rag
    shown = {}
    for function, timeout in (("search", ""), ("slow", "timeout = 0.2")):
        code = cli.main(["run", str(make(function, timeout)), "--input", "question=boom", "--trace"])
        shown[function] = capsys.readouterr().out
        assert code == 1 and "PARSE ERROR" not in shown[function], shown[function]
    assert "FUNCTION FAILED: search raised ValueError: cannot search for 'query: boom'\n" in shown["search"]
    assert "NOT REACHED: function failed: search raised ValueError" in shown["search"]  # the answer node after it
    assert "FUNCTION FAILED: search took longer than its timeout of 0.2s\n" in shown["slow"]


def test_feedback_on_the_answer_reaches_the_query_prompt_through_the_function(rag):
    make, _, script = rag
    examples = [{"question": f"question {i}", "answer": "Lyon"} for i in range(2)]
    with sbp.load(make()) as pipeline:
        pipeline.optimize(examples, iterations=1, gate="none", runs_dir=make().parent / "runs")
    function_question = next(p for p in script.of_kind("backward") if "# Output of passages\n" in p)
    # the function's name and docstring stand as its instruction; its input, its output, and its feedback
    assert "A Python function, search (tools:search)" in function_question
    assert "Return the passages of the corpus that mention the query's words." in function_question
    assert "Hint 1 (from query): query: question" in function_question
    assert '"text": "passage for query: question' in function_question
    assert "# Feedback on the output\npassages should say more." in function_question
    [optimizer] = [p for p in script.of_kind("optimizer") if 'The instruction "write_query"' in p]
    assert optimizer.count("query should say more.") == 2  # the passages question's answer, for each sample


def test_no_sibling_asks_a_function_node_once_per_input(rag):
    make, _, script = rag
    path = make(tools=TOOLS.replace("def search(query):", "def search(query, second=None):"))
    text = path.read_text().replace("node passages:", "node second: text { prompt = write_query }\nnode passages:")
    path.write_text(text.replace("question -> query -> passages", "question -> query, second -> passages"))
    with sbp.load(path) as pipeline:
        assert backward_calls(pipeline.graph, "no_sibling") - backward_calls(pipeline.graph, "sibling") == 1
        examples = [{"question": "q", "answer": "Lyon"}]
        pipeline.optimize(examples, iterations=1, gate="none", gradient="no_sibling", runs_dir=path.parent / "runs")
    asked = [p for p in script.of_kind("backward") if "# Output of passages\n" in p]
    assert len(asked) == 2
    assert {p.split("Hint 1 (from ")[1].split(")")[0] for p in asked} == {"query", "second"}
