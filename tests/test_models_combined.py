"""Issue 33's rest: prices declared in model blocks, `strategies = [...]` that combine, per-node model lists, and
the plan's bound per strategy. Tried from outside where it can be (sbpc check, optimize, --plan), against fake
OpenAI-compatible servers whose model names litellm's price table does not know."""

from __future__ import annotations

import json

import pytest
from fake_server import FakeServer

from sembp_dsl import cli
from sembp_dsl.language.blocks.method import STRATEGIES, Method, SettingError
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.syntax.source import parse_text
from sembp_dsl.learning.strategies import kind, strategies
from sembp_dsl.models.llm import LLM
from sembp_dsl.records.runs import resolve

# Names litellm does not price: only the declared prices say what a call costs. `cheap` is right, `broken` always
# wrong and cheapest, `dear` right and dearest.
PIPELINE = """\
pipeline relay "Pass the answer along"

input q: text

param a_task = "Read the claim."
param b_task = "Restate it."
param c_task = "Answer Yes or No."

node a: text { prompt = a_task  model = dear }
node b: text { prompt = b_task  model = dear  models = [cheap] }
node c: text { prompt = c_task  model = dear }

q -> a -> b -> c
output c
metric exact

model broken    { name = "openai/house-broken"  api_base = "http://BAD"   max_tokens = 16  input_price = 0.01  output_price = 0.02 }
model cheap     { name = "openai/house-small"   api_base = "http://GOOD"  max_tokens = 16  input_price = 0.1   output_price = 0.4 }
model dear      { name = "openai/house-large"   api_base = "http://GOOD"  max_tokens = 16  input_price = 5     output_price = 15 }
model backward  { name = "openai/house-small"   api_base = "http://GOOD"  max_tokens = 16  input_price = 0.1   output_price = 0.4 }
model optimizer { name = "openai/house-small"   api_base = "http://GOOD"  max_tokens = 16  input_price = 0.1   output_price = 0.4 }

optimize { iterations = 4  models = [broken, cheap, dear]  objective = cost  margin = 0.05 }
"""


def good(messages: list) -> str:
    return "Wrong" if any("Wrong" in str(m.get("content")) for m in messages) else "Yes"


@pytest.fixture
def relay(tmp_path, monkeypatch):
    with FakeServer(reply=good) as right, FakeServer(reply="Wrong") as wrong:
        path = tmp_path / "relay.sbp"
        path.write_text(PIPELINE.replace("http://GOOD", right.url).replace("http://BAD", wrong.url))
        rows = [{"q": f"claim {i}", "answer": "Yes"} for i in range(104)]
        (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        monkeypatch.chdir(tmp_path)
        yield path, right


ARGS = ["--data", "data.jsonl", "--train-size", "4", "--val-size", "100"]


def test_declared_prices_are_charged_planned_and_never_sent(relay, capsys):
    path, server = relay
    graph = compile_file(str(path))
    llm = LLM(graph.models)
    assert llm.price("dear", 1_000_000, 1_000_000) == pytest.approx(20.0)
    assert llm.price("cheap", 1000, 200) == pytest.approx((1000 * 0.1 + 200 * 0.4) / 1e6)
    assert cli.main(["eval", str(path), "--data", "data.jsonl", "--limit", "3", "--json"]) == 0
    ledger = json.loads(capsys.readouterr().out)["ledger"]
    used = ledger["models"]["dear"]
    assert used["cost"] == pytest.approx((used["prompt_tokens"] * 5 + used["completion_tokens"] * 15) / 1e6)
    assert used["cost"] > 0 and "calls without a known price" not in ledger["counters"]
    assert server.bodies and not any("input_price" in b or "output_price" in b for b in server.bodies)
    assert cli.main(["optimize", str(path), *ARGS, "--plan", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"] > 0  # priced by the declared prices alone


def test_a_nodes_own_list_and_the_strategies_setting_decide_what_may_change(relay, capsys):
    """Only `models` may change anything: no backward or optimizer call, the prompts stay. `b` may move only to its
    own list's `cheap`; `a` and `c` take the optimize block's list, and never stay on the always-wrong `broken`."""
    path, server = relay
    before = path.read_text()
    assert cli.main(["optimize", str(path), *ARGS, "--strategies", "models", "--iters", "6"]) == 0
    out, err = capsys.readouterr()
    assert "W008" not in err  # a model a node may move to is used
    after = path.read_text()
    assert "model = cheap  models = [cheap]" in after and after.count("model = cheap") == 3
    assert [a for a, b in zip(before.splitlines(), after.splitlines()) if a != b] == [
        line for line in before.splitlines() if line.startswith("node ")
    ]
    record = resolve("-1", ".sbpc/runs")
    assert record.settings.method.strategies == ("models",)
    roles = record.record.ledger["roles"]
    assert all(roles.get(role, {"calls": 0})["calls"] == 0 for role in ("backward", "optimizer")), roles
    moves = [c for it in record.iterations for c in it.candidates]
    assert moves and all(c.strategy == "models" for c in moves)
    assert not any(c.param == "b.model" and c.new == "broken" for c in moves)  # not in b's own list
    assert "[models]" in out  # the loop's line says which strategy proposed the step


def test_strategies_combine_and_the_plan_bounds_each(relay, capsys):
    """Gradients and models in one run, on data whose every answer the server gets wrong (errors for the gradients
    to learn from; every model is as wrong as another there, so every cheaper move is non-inferior). Each move is
    gated alone, held to non-inferiority, before any prompt is rewritten; then the gradients propose. What each
    strategy spent stays within its own line of the plan."""
    path, _ = relay
    rows = [{"q": f"claim {i}", "answer": "No"} for i in range(104)]
    (path.parent / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["optimize", str(path), *ARGS, "--strategies", "gradients,models", "--iters", "5"]
    assert cli.main([*argv, "--plan", "--json"]) == 0
    bound = json.loads(capsys.readouterr().out)
    assert set(bound["strategies"]) == {"loop", "gradients", "models"}
    assert bound["strategies"]["gradients"]["calls"] > 0 and bound["strategies"]["models"]["calls"] == 0
    assert cli.main(argv) == 0
    run = resolve("-1", ".sbpc/runs")
    by = [{c.strategy for c in it.candidates} for it in run.iterations]
    assert by[:3] == [{"models"}] * 3 and all(it.gate.margin == 0.05 and it.accepted for it in run.iterations[:3])
    assert {"gradients"} in by[3:]  # no move left: the prompts' turn
    spent = run.record.ledger["roles"]
    learning = [spent[role] for role in ("backward", "optimizer") if role in spent]
    assert sum(u["calls"] for u in learning) > 0, "the gradients strategy made no call: nothing was bounded"
    assert sum(u["calls"] for u in learning) <= bound["strategies"]["gradients"]["calls"]
    assert sum(u["cost"] for u in learning) <= bound["strategies"]["gradients"]["cost"]
    assert spent["forward"]["calls"] <= bound["strategies"]["loop"]["calls"]
    assert spent["forward"]["cost"] <= bound["strategies"]["loop"]["cost"]
    capsys.readouterr()
    assert cli.main(["show", "-1"]) == 0 and "[gradients]" in capsys.readouterr().out


def test_strategies_are_named_in_the_order_of_their_kinds_and_checked():
    assert [kind(name).name for name in STRATEGIES] == list(STRATEGIES)  # every name the setting takes has its class
    assert [s.name for s in strategies(Method())] == list(STRATEGIES)
    assert [s.name for s in strategies(Method(strategies=("models", "gradients")))] == ["gradients", "models"]
    with pytest.raises(SettingError, match="did you mean 'models'"):
        Method(strategies=("gradients", "modles"))
    with pytest.raises(SettingError, match="names no strategy"):
        Method(strategies=())


@pytest.mark.parametrize(
    ("line", "code", "where", "hint"),
    [
        ("optimize { models = [cheap, cheep] }", "E071", "1:29", "did you mean 'cheap'?"),
        ("optimize { strategies = [gradient] }", "E136", "1:26", "did you mean 'gradients'?"),
        ('model half { name = "openai/x"  input_price = 1 }', "E137", "1:33", "output_price"),
    ],
)
def test_the_checker_names_every_bad_name_where_it_stands(tmp_path, capsys, line, code, where, hint):
    path = tmp_path / "p.sbp"
    head = 'pipeline t "A test"\ninput q: text\nnode a: text { model = cheap }\nq -> a\noutput a\n'
    path.write_text(head + 'model cheap { name = "openai/x" }\n' + line + "\n")
    assert cli.main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    row = head.count("\n") + 2
    line_no, column = where.split(":")
    assert f"p.sbp:{row}:{column}: error[{code}]" in err and hint in err, err
    assert line_no == "1"


def test_a_node_list_in_yaml_and_prices_keep_their_layout_through_fmt(tmp_path):
    text = PIPELINE.replace("http://GOOD", "http://x").replace("http://BAD", "http://y")
    path = tmp_path / "p.sbp"
    path.write_text(text)
    assert cli.main(["fmt", str(path)]) == 0
    assert compile_file(str(path)).nodes["b"].models == ("cheap",)
    assert compile_file(str(path)).models["dear"].settings["output_price"] == 15
    yaml = (
        "pipeline: t\ninputs: {q: text}\nnodes:\n  a: {type: text, model: strong, models: [fast]}\n"
        'edges: ["q -> a"]\noutput: a\nmodels:\n  fast: {name: openai/x, input_price: 0.1, output_price: 0.2}\n'
        "  strong: {name: openai/y, input_price: 1, output_price: 2}\noptimize: {strategies: [models]}\n"
    )
    (tmp_path / "p.yaml").write_text(yaml)
    graph = compile_file(str(tmp_path / "p.yaml"))
    assert graph.nodes["a"].models == ("fast",) and graph.optimize.strategies == ("models",)
    assert LLM(graph.models).price("strong", 10**6, 0) == 1.0
    assert parse_text(yaml, "p.yaml").nodes[0].setting("models") is not None


def test_a_model_named_anew_drops_the_files_prices(relay):
    """--model (or roles=) names another model than the block's: the block's prices were its own model's, so they
    are not charged for the other one; prices given with the new name are."""
    import sembp_dsl as sbp

    path, _ = relay
    kept = sbp.load(str(path))._session.models["dear"].settings
    assert kept["input_price"] == 5
    other = sbp.load(str(path), model="openai/gpt-4o")._session.models["dear"].settings
    assert "input_price" not in other and "output_price" not in other
    priced = {"name": "openai/house-xl", "input_price": 7, "output_price": 21}
    given = sbp.load(str(path), roles={"dear": priced})._session.models["dear"].settings
    assert (given["input_price"], given["output_price"]) == (7, 21)
