"""Nodes that call tools (language/kinds/agent.py): checked without importing the tools, offered to an
OpenAI-compatible server with the schema of each signature, run concurrently and bounded, kept on the trace,
and shown to the backward model (issue 30)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import time

import pytest
from conftest import ROOT, Script, with_fake_model

import sembp_dsl as sbp
from sembp_dsl.cli.commands import main
from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.kinds.agent import steps_of
from sembp_dsl.language.kinds.agent.toolcalls import RESULT_CHARS
from sembp_dsl.language.syntax.source import parse_text
from sembp_dsl.models import embedded
from sembp_dsl.models.llm import LLM
from sembp_dsl.models.mock import MockTransport
from sembp_dsl.runtime.code import bind
from sembp_dsl.runtime.forward import run

AGENT = ROOT / "pipelines"

TOOLS = '''
import time

def lookup(place: str, fact: str = "population") -> str:
    """Look up one fact about a place.

    Args:
        place: the place's name alone
    """
    return f"{fact} of {place}: 18400"

def nap(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "rested"

def broken(x: int) -> str:
    """Always fails."""
    raise RuntimeError("the database is down")

def huge() -> str:
    """Returns megabytes."""
    return "x" * 5_000_000

def opaque() -> object:
    """Returns what has no text form."""
    return object()
'''

PIPELINE = """pipeline agent "Answer with tools"
input question: text
param task = "Answer the question."
param lookup_doc = "Find one fact about a place."
function lookup = "tools:lookup" { description = lookup_doc }
function nap = "tools:nap" { timeout = 0.5 }
function broken = "tools:broken"
function huge = "tools:huge"
function opaque = "tools:opaque"
node solve: text { prompt = task  tools = [lookup, nap, broken, huge, opaque]  max_steps = MAX }
question -> solve
output solve
"""


def call(name: str, arguments: dict, id: str) -> dict:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def write(tmp_path, url: str, max_steps: int = 4, tools: str = TOOLS):
    (tmp_path / "tools.py").write_text(tools)
    path = tmp_path / "agent.sbp"
    path.write_text(with_fake_model(PIPELINE.replace("MAX", str(max_steps)), url))
    return path


class Agent:
    """A model that calls tools natively: first `calls` (a list of tool calls), then answers `answer`."""

    def __init__(self, calls: list[dict], answer: str = "18400"):
        self.calls, self.answer, self.seen = calls, answer, []

    def __call__(self, messages):
        self.seen.append(messages)
        if messages[-1]["role"] == "tool":
            return self.answer
        return {"content": None, "tool_calls": self.calls}


def test_check_compile_and_fmt_import_no_tool(tmp_path):
    """A tools module that raises at import, or would write a file: check, compile and fmt run none of it."""
    (tmp_path / "tools.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('imported')\nraise SystemExit(3)\n"
        "def lookup(place: str) -> str:\n    return place\n"
    )
    path = tmp_path / "agent.sbp"
    path.write_text(
        'pipeline a\ninput question: text\nparam task = "Answer."\nfunction lookup = "tools:lookup"\n'
        "node solve: text { prompt = task  tools = [lookup] }\nquestion -> solve\noutput solve\n"
    )
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["check", str(path)]) == 0
        assert main(["compile", str(path), "--emit", "prompts"]) == 0
        assert main(["fmt", "--check", str(path)]) == 0
    assert not (tmp_path / "ran").exists()


def test_check_reads_each_signature_and_says_why_one_is_no_tool(tmp_path):
    (tmp_path / "tools.py").write_text("import socket\ndef open_it(conn: socket.socket) -> str:\n    return ''\n")
    source = (
        'pipeline a\ninput q: text\nparam t = "x"\nfunction open_it = "tools:open_it"\n'
        "node s: text { prompt = t  tools = [open_it, lokup]  max_steps = 0 }\nq -> s\noutput s\n"
    )
    path = tmp_path / "a.sbp"
    path.write_text(source)
    with pytest.raises(sbp.PipelineError) as found:
        build(parse_text(source, str(path)))
    codes = {d.code: d.message for d in found.value.diagnostics}
    assert set(codes) == {"E110", "E111", "E112"}
    assert "'socket.socket' has no JSON form" in codes["E112"]


def test_the_request_offers_each_tool_with_its_signatures_schema_and_the_results_go_back_as_tool_messages(tmp_path):
    from fake_server import FakeServer

    agent = Agent([call("lookup", {"place": "Kesh"}, "c1")])
    with FakeServer(reply=agent) as server:
        path = write(tmp_path, server.url)
        with sbp.load(path) as pipeline:
            prediction = pipeline(question="What is the population of Kesh?")
        first, second = server.bodies
    offered = {tool["function"]["name"]: tool["function"] for tool in first["tools"]}
    assert offered["lookup"]["description"] == "Find one fact about a place."  # the param, not the docstring
    assert offered["nap"]["description"] == "Sleep, then say so."  # the docstring
    assert offered["lookup"]["parameters"] == {
        "type": "object",
        "properties": {
            "place": {"type": "string", "description": "the place's name alone"},
            "fact": {"type": "string", "default": "population"},
        },
        "required": ["place"],
        "additionalProperties": False,
    }
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "population of Kesh: 18400"}
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "lookup"
    assert prediction.output == "18400"
    [step, answer] = steps_of(prediction.trace.nodes["solve"])
    assert step.results[0].content == "population of Kesh: 18400" and not answer.calls


def test_the_calls_of_one_reply_run_concurrently(tmp_path):
    from fake_server import FakeServer

    naps = [call("nap", {"seconds": 0.3}, f"n{i}") for i in range(4)]
    with FakeServer(reply=Agent(naps)) as server:
        path = write(tmp_path, server.url)
        with sbp.load(path) as pipeline:
            started = time.monotonic()
            prediction = pipeline(question="Rest four times.")
            took = time.monotonic() - started
    assert [r.content for r in steps_of(prediction.trace.nodes["solve"])[0].results] == ["rested"] * 4
    assert took < 1.0, took  # 4 x 0.3 s one after another would be 1.2 s


def test_what_goes_wrong_with_a_call_is_that_calls_bounded_result_and_the_loop_goes_on(tmp_path):
    from fake_server import FakeServer

    calls = [
        call("nowhere", {}, "a"),
        call("lookup", {"place": 3}, "b"),
        call("broken", {"x": 1}, "c"),
        call("nap", {"seconds": 30}, "d"),
        call("huge", {}, "e"),
        call("opaque", {}, "f"),
    ]
    agent = Agent(calls)
    with FakeServer(reply=agent) as server:
        path = write(tmp_path, server.url)
        with sbp.load(path) as pipeline:
            started = time.monotonic()
            prediction = pipeline(question="Try everything.")
            assert time.monotonic() - started < 5  # the slow tool's timeout is 0.5 s
    results = {r.call.id: r for r in steps_of(prediction.trace.nodes["solve"])[0].results}
    assert "there is no tool 'nowhere'" in results["a"].content
    assert "do not fit lookup's schema at 'place'" in results["b"].content
    assert results["c"].content == "broken raised RuntimeError: the database is down"
    assert results["d"].content == "nap took longer than its timeout of 0.5s"
    assert len(results["e"].content) < RESULT_CHARS + 100 and "more characters not shown" in results["e"].content
    assert "returned a object, which has no text form" in results["f"].content
    assert all(r.error for id, r in results.items() if id != "e")
    sent = agent.seen[-1]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == list("abcdef")
    assert max(len(m["content"] or "") for m in sent) < 10_000
    assert prediction.output == "18400"  # the loop went on to the answer


def test_no_answer_within_max_steps_fails_the_sample_saying_so(tmp_path):
    from fake_server import FakeServer

    with FakeServer(reply=Agent([call("lookup", {"place": "Kesh"}, "c")])) as server:
        server.configure(reply=lambda messages: {"content": None, "tool_calls": [call("lookup", {"place": "K"}, "c")]})
        path = write(tmp_path, server.url, max_steps=2)
        with sbp.load(path) as pipeline:
            prediction = pipeline(question="Loop forever.")
        assert server.requests == 2
    trace = prediction.trace.nodes["solve"]
    assert prediction.output is None and not trace.lost
    assert trace.error.startswith("no answer within max_steps = 2")
    steps = steps_of(trace)
    assert len(steps) == 2 and steps[-1].calls and not steps[-1].results  # the last: not run


def test_run_trace_prints_the_calls_and_their_results(tmp_path, capsys):
    from fake_server import FakeServer

    with FakeServer(reply=Agent([call("lookup", {"place": "Kesh"}, "c1")])) as server:
        path = write(tmp_path, server.url)
        assert main(["run", str(path), "--input", "question=Population of Kesh?", "--trace"]) == 0
    out = capsys.readouterr().out
    assert '--- tool calls ---\n1. lookup(place="Kesh") -> population of Kesh: 18400\nthen answered: 18400' in out


def test_the_text_form_holds_a_model_without_native_calls_to_one_json_object_a_reply(tmp_path):
    """The embedded model's way (a grammar from the reply schema), here through the in-process mock."""
    (tmp_path / "tools.py").write_text(TOOLS)
    source = PIPELINE.replace("MAX", "4")
    graph = bind(build(parse_text(source, str(tmp_path / "agent.sbp"))))
    replies = ['{"tool": "lookup", "arguments": {"place": "Kesh"}}', "not JSON", '{"answer": "18400"}']
    mock = MockTransport(replies, grammar=True)
    llm = LLM(graph.models, transport=mock)
    trace = llm.run(run(graph, llm, {"question": "Population of Kesh?"})).nodes["solve"]
    assert trace.output == "18400" and len(steps_of(trace)) == 3
    schema = mock.requests[0].params["response_format"]["json_schema"]["schema"]
    assert {"tool": {"const": "lookup"}} == {"tool": schema["anyOf"][0]["properties"]["tool"]}
    assert "tools" not in mock.requests[0].params
    assert mock.requests[1].messages[-1].content == "Result of lookup: population of Kesh: 18400"
    assert mock.requests[2].messages[-1].content.startswith("no JSON object in the reply")
    assert llm.ledger.counters["tool steps"] == 1


class Whole(Script):
    """Calls lookup with the whole question, then answers what lookup said."""

    def __call__(self, messages):
        prompt = messages[-1]["content"]
        if messages[-1]["role"] == "tool":
            return prompt.rsplit(": ", 1)[-1]
        if self.kind(prompt) != "forward":
            return super().__call__(messages)
        self.prompts.append(prompt)
        if "Rephrase" in prompt:
            return prompt.rsplit("Question: ", 1)[-1].split("\n")[0]
        question = prompt.rsplit("Question: ", 1)[-1].split("\n")[0]
        return {"content": None, "tool_calls": [call("lookup", {"place": question, "fact": "population"}, "c")]}


def optimize(path, data):
    with sbp.load(path) as pipeline:
        return pipeline.optimize(
            str(data), train_size=4, val_size=4, iterations=1, gate="none", write=True, runs_dir=path.parent / "runs"
        )


WHOLE_QUESTION = r'1\. lookup\(place="What is[^"]*\?", fact="population"\) -> no place called'


def test_in_optimize_the_backward_question_shows_the_trajectory(tmp_path):
    """A tool loop fed by another node: the backward question about it shows its calls."""
    from fake_server import FakeServer

    shutil.copy(AGENT / "agent_tools.py", tmp_path / "agent_tools.py")
    path = tmp_path / "two.sbp"
    script = Whole()
    with FakeServer(reply=script) as server:
        path.write_text(
            with_fake_model(
                'pipeline two\ninput question: text\nparam again = "Rephrase the question."\nparam task = "Answer."\n'
                'function lookup = "agent_tools:lookup"\ntemplate t = "{{ prompt }}\\nQuestion: {{ question }}"\n'
                'template s = "{{ prompt }}\\nQuestion: {{ rephrased }}"\n'
                "node rephrased: text { prompt = again  template = t }\n"
                "node solve: text { prompt = task  template = s  tools = [lookup] }\n"
                "question -> rephrased -> solve\noutput solve\nmetric exact\n",
                server.url,
            )
        )
        optimize(path, AGENT / "agent.jsonl")
    about_solve = [p for p in script.of_kind("backward") if "# Output of solve\n" in p or "solve" in p]
    assert about_solve and all(re.search(WHOLE_QUESTION, p) for p in about_solve), about_solve[:1]


def test_in_optimize_the_tool_description_is_a_param_written_back_to_the_sbp(tmp_path):
    from fake_server import FakeServer

    for name in ("agent.sbp", "agent_tools.py", "agent.jsonl"):
        shutil.copy(AGENT / name, tmp_path / name)
    path = tmp_path / "agent.sbp"
    script = Whole()
    with FakeServer(reply=script) as server:
        path.write_text(with_fake_model(path.read_text(), server.url))
        optimized = optimize(path, tmp_path / "agent.jsonl")
    [iteration] = optimized.outcome.iterations
    assert {c.param for c in iteration.candidates} == {"solve_task", "lookup_doc"}
    [optimizer] = script.of_kind("optimizer")  # one call proposes the instruction and the tool's description
    assert re.search(WHOLE_QUESTION, optimizer)  # the loss the output node received shows its calls
    assert 'param lookup_doc           = "Improved instruction for lookup_doc."' in path.read_text()
    assert 'param solve_task           = "Improved instruction for solve_task."' in path.read_text()
    assert (tmp_path / "agent_tools.py").read_text() == (AGENT / "agent_tools.py").read_text()


def tool_optimizer_prompts(tmp_path, frozen: str | None = None) -> list[str]:
    """The optimizer prompts of one iteration on the shipped agent (with `frozen` param frozen), answered by
    `Whole`, which calls lookup with the whole question: every sample wrong, every call a wrong one."""
    from fake_server import FakeServer

    for name in ("agent.sbp", "agent_tools.py", "agent.jsonl"):
        shutil.copy(AGENT / name, tmp_path / name)
    path = tmp_path / "agent.sbp"
    script = Whole()
    with FakeServer(reply=script) as server:
        text = with_fake_model(path.read_text(), server.url)
        path.write_text(text.replace(f"param {frozen} ", f"frozen param {frozen} ") if frozen else text)
        optimize(path, tmp_path / "agent.jsonl")
    return script.of_kind("optimizer")


def test_a_tools_description_is_proposed_with_its_nodes_instruction_the_tool_and_its_schema_in_view(tmp_path):
    """It read 'The instruction "lookup_doc" is used by the component "solve" ... Write an improved instruction for
    "solve"': never told the text describes the tool lookup, never shown its arguments, rewritten apart from the
    node's instruction, and each example listed its tool calls twice (in its output and again in its loss)."""
    [prompt] = tool_optimizer_prompts(tmp_path)
    assert 'The instruction "solve_task" is used by the component "solve"' in prompt
    assert 'The component may call the tool lookup, described to it by the text "lookup_doc"' in prompt
    assert '"place": {"type": "string", "description": "the place\'s name alone' in prompt  # its argument schema
    assert '"fact": {"enum": ["kind", "population"' in prompt
    assert "inside <prompt>...</prompt>, then an improved description of the tool lookup" in prompt
    assert '<tool name="lookup">...</tool>' in prompt and 'The instruction "lookup_doc"' not in prompt
    examples = prompt.split("## Example ")[1:]
    assert len(examples) == 2
    for example in examples:  # its calls once: in its output, not again in how the output should change
        [call] = re.findall(WHOLE_QUESTION, example)
        assert example.count("Its tool calls, in order:") == 1


@pytest.mark.parametrize("frozen", [None, "solve_task"])
def test_the_plan_bounds_the_optimizer_prompts_that_show_a_tool(tmp_path, capsys, monkeypatch, frozen):
    """The tool's description, schema and calls lengthen the optimizer's prompt: --plan's bound holds them."""
    from fake_server import FakeServer

    for name in ("agent.sbp", "agent_tools.py", "agent.jsonl"):
        shutil.copy(AGENT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "agent.sbp"
    with FakeServer(reply=Whole()) as server:
        text = with_fake_model(path.read_text(), server.url)
        path.write_text(text.replace(f"param {frozen} ", f"frozen param {frozen} ") if frozen else text)
        argv = ["optimize", "agent.sbp", "--data", "agent.jsonl", "--train-size", "4", "--val-size", "0"]
        argv += ["--iters", "1", "--no-gate"]
        assert main([*argv, "--plan", "--json"]) == 0
        bound = json.loads(capsys.readouterr().out)
        assert main(argv) == 0
    [record] = list((tmp_path / ".sbpc" / "runs").glob("*/run.json"))
    used = json.loads(record.read_text())["ledger"]["roles"]["optimizer"]
    assert used["calls"] == 1 and used["calls"] <= bound["calls"]["optimizer"]
    assert 0 < used["prompt_tokens"] <= bound["prompt_tokens"]["optimizer"]


def test_a_tools_description_alone_is_asked_for_as_that_tools_description(tmp_path):
    """The node's instruction frozen: the description is proposed alone, as the description of the tool lookup,
    with its arguments' schema, and how the component called it right (none here) and wrong (under each example)."""
    [prompt] = tool_optimizer_prompts(tmp_path, frozen="solve_task")
    assert prompt.startswith("You are improving the description of a tool")
    assert 'The text "lookup_doc" is the description of the tool lookup, which the component "solve" is shown' in prompt
    assert "The tool's arguments (JSON Schema): {" in prompt and '"required": ["place", "fact"]' in prompt
    assert "How it called lookup on the inputs it answered wrongly is under each example below." in prompt
    assert "Write an improved description of the tool lookup" in prompt and "improved instruction" not in prompt


def test_the_optimizer_is_shown_the_calls_of_samples_answered_right(tmp_path):
    """Right calls come from the trajectories of training samples the pipeline answered right."""
    from fake_server import FakeServer

    for name in ("agent.sbp", "agent_tools.py", "agent.jsonl"):
        shutil.copy(AGENT / name, tmp_path / name)
    path = tmp_path / "agent.sbp"
    script = Whole()
    kesh = "What is the population of Kesh?"
    plain = script.__call__

    def answer(messages):  # Kesh asked as a place, and answered right; every other question wrong
        prompt = messages[-1]["content"]
        if messages[-1]["role"] != "tool" and script.kind(prompt) == "forward" and kesh in prompt:
            script.prompts.append(prompt)
            return {"content": None, "tool_calls": [call("lookup", {"place": "Kesh", "fact": "population"}, "k")]}
        return plain(messages)

    with FakeServer(reply=answer) as server:
        path.write_text(with_fake_model(path.read_text(), server.url))
        optimize(path, tmp_path / "agent.jsonl")
    [prompt] = script.of_kind("optimizer")
    assert 'How the component called lookup on inputs the system answered right:\n- lookup(place="Kesh"' in prompt


@pytest.mark.slow
@pytest.mark.skipif(not embedded.available(), reason="the embedded model is not installed")
def test_the_shipped_agent_runs_on_the_embedded_model_with_well_formed_calls(tmp_path):
    for name in ("agent.sbp", "agent_tools.py"):
        shutil.copy(AGENT / name, tmp_path / name)
    with sbp.load(tmp_path / "agent.sbp") as pipeline:
        prediction = pipeline(question="What is the population of Kesh?")
    steps = steps_of(prediction.trace.nodes["solve"])
    assert steps, prediction.trace.nodes["solve"]
    for step in steps:  # every reply is one JSON object: a call of a known tool with fitting arguments, or the answer
        reply = json.loads(step.reply)
        assert set(reply) in ({"tool", "arguments"}, {"answer"}), step.reply
        assert all(not r.error or "raised" in r.content for r in step.results), step.results


def test_check_warns_of_a_tool_without_types_or_descriptions_and_says_the_fix(tmp_path):
    """The schema a model is sent says what each argument is and what the tool does; check says what it lacks."""
    (tmp_path / "order_tools.py").write_text(
        "def get_order(order_id: str, category) -> str:\n"
        '    """The status of an order.\n\n    Args:\n        order_id: the order\'s number\n    """\n'
        "    return order_id\n\n"
        "def refund(order_id: str) -> str:\n    return order_id\n"
    )
    path = tmp_path / "support.sbp"
    path.write_text(
        'pipeline s\ninput q: text\nparam t = "Help."\nfunction get_order = "order_tools:get_order"\n'
        'function refund = "order_tools:refund"\nnode a: text { prompt = t  tools = [get_order, refund] }\nq -> a\noutput a\n'
    )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["check", str(path)]) == 0  # warnings: it still runs
    said = err.getvalue()
    assert "warning[W035]: function 'get_order': argument category has no type" in said
    assert "annotate it: category: str" in said
    assert "warning[W037]: function 'get_order': argument category is not described" in said
    assert "warning[W036]: function 'refund' has no description: the model is not told what it does" in said
    assert "warning[W037]: function 'refund': argument order_id is not described" in said
    assert "order_id is not described" not in said.split("refund")[0]  # get_order's docstring describes it


def test_e112_suggests_the_nearest_function_with_a_help_that_fits_the_cause(tmp_path):
    (tmp_path / "order_tools.py").write_text(
        'def get_order(order_id: str) -> str:\n    """The status of an order."""\n    return order_id\n'
    )
    source = (
        'pipeline s\ninput q: text\nparam t = "Help."\nfunction get_order = "order_tools:get_ordr"\n'
        "node a: text { prompt = t  tools = [get_order] }\nq -> a\noutput a\n"
    )
    path = tmp_path / "support.sbp"
    path.write_text(source)
    with pytest.raises(sbp.PipelineError) as found:
        build(parse_text(source, str(path)))
    [e112] = [d for d in found.value.diagnostics if d.code == "E112"]
    assert "the module defines no function 'get_ordr'" in e112.message
    assert e112.help == "did you mean 'get_order'? (it defines get_order)"
    assert "type" not in e112.help  # the signature's help is for a signature that has no JSON form


@pytest.mark.parametrize(
    "type_, words, answer, output",
    [
        (
            "{place: text, people: number}",
            'Reply with a JSON object with exactly these fields:\n- "place": text\n- "people": a number',
            '{"place": "Kesh", "people": 18400}',
            {"place": "Kesh", "people": 18400},
        ),
        ("choice(many, few)", "Begin the answer with one of: many, few.", "many: 18400 people", "many"),
        ("number", "End the answer with the number.", "About 18400", 18400),
        ("text", None, "18400", "18400"),
    ],
)
def test_the_answers_type_is_in_words_since_no_schema_holds_a_tool_loops_answer(tmp_path, type_, words, answer, output):
    """A tool loop sends no JSON Schema for its answer (the matrix found a record agent on a schema-taking model told
    nothing of its fields): a typed answer is described in its first prompt, and read as that type."""
    from fake_server import FakeServer

    (tmp_path / "tools.py").write_text(TOOLS)
    path = tmp_path / "agent.sbp"
    with FakeServer(reply=Agent([call("lookup", {"place": "Kesh"}, "c1")], answer=answer)) as server:
        path.write_text(
            'pipeline a\ninput question: text\nparam task = "Answer."\nfunction lookup = "tools:lookup"\n'
            f"node solve: {type_} {{ prompt = task  tools = [lookup] }}\nquestion -> solve\n"
            f'output solve\nmodel forward {{ name = "openai/gpt-4o-mini"  api_base = "{server.url}" }}\n'
        )
        with sbp.load(path) as pipeline:
            prediction = pipeline(question="How many live in Kesh?")
        first = server.bodies[0]
    assert "response_format" not in first
    sent = first["messages"][-1]["content"]
    assert sent.endswith(
        f"Question: How many live in Kesh?\n\n{words}" if words else "Question: How many live in Kesh?"
    )
    assert prediction.output == output
    prompts = io.StringIO()
    with contextlib.redirect_stdout(prompts):
        assert main(["compile", str(path), "--emit", "prompts"]) == 0
    assert words is None or words in prompts.getvalue()


def test_an_evaluations_record_counts_model_calls_as_its_ledger_does(tmp_path, monkeypatch, capsys):
    """Two turns a sample (a tool call, then the answer): four calls for two samples, in the printed ledger and
    in the run record alike; a node's run is not a call."""
    from fake_server import FakeServer

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"question": f"Population of Kesh {i}?", "answer": "18400"}) + "\n" for i in range(2))
    )
    with FakeServer(reply=Agent([call("lookup", {"place": "Kesh"}, "c1")])) as server:
        path = write(tmp_path, server.url)
        assert main(["eval", str(path), "--data", "rows.jsonl", "--no-cache"]) == 0
        sent = server.requests
    printed = capsys.readouterr().err
    assert sent == 4 and re.search(r"^forward +4 ", printed, re.M), printed
    assert main(["runs", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["calls"] == 4


def test_eval_errors_shows_a_wrong_answers_tool_calls_as_show_does(tmp_path, monkeypatch, capsys):
    from fake_server import FakeServer

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text(json.dumps({"question": "Population of Kesh?", "answer": "9"}) + "\n")
    with FakeServer(reply=Agent([call("lookup", {"place": "Kesh"}, "c1")])) as server:
        path = write(tmp_path, server.url)
        assert main(["eval", str(path), "--data", "rows.jsonl", "--errors", "1"]) == 0
        out = capsys.readouterr().out
        assert main(["eval", str(path), "--data", "rows.jsonl", "--errors", "1", "--json"]) == 0
        [error] = json.loads(capsys.readouterr().out)["errors"]
    assert "--- wrong: " in out and '1. lookup(place="Kesh") -> population of Kesh: 18400' in out
    assert error["steps"][0]["calls"][0]["name"] == "lookup"


def test_emit_prompts_shows_an_agents_system_message_as_it_does_a_model_calls(tmp_path):
    """The loop sends the system message first; `compile --emit prompts` showed it for a model call only (the
    matrix found it)."""
    (tmp_path / "tools.py").write_text(TOOLS)
    path = tmp_path / "agent.sbp"
    path.write_text(
        'pipeline a\ninput question: text\nparam task = "Answer."\nparam rules = "Be brief."\n'
        'function lookup = "tools:lookup"\nnode solve: text { prompt = task  tools = [lookup]  system = rules }\n'
        "question -> solve\noutput solve\n"
    )
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        assert main(["compile", str(path), "--emit", "prompts"]) == 0
    assert shown.getvalue().startswith("=== solve: system message ===\nBe brief.\n\n=== solve: forward, calling tools")
