"""The model of each node as a param (learning/strategies.py `Models`): tried from outside, through `sbpc optimize`,
on OpenAI-compatible fake servers that answer every model alike except one, whose answers are always wrong. With
`--objective cost` each node moves to the cheapest model whose answers are as good, never to the bad one, each move
passing the non-inferiority gate, and the file's `model =` lines are all that change."""

from __future__ import annotations

import difflib
import json

import pytest
from fake_server import FakeServer

from sembp_dsl import cli
from sembp_dsl.language.blocks.method import Method
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.nodes.node import model_param
from sembp_dsl.language.syntax.source import parse_text
from sembp_dsl.language.tooling.writeback import rewrite
from sembp_dsl.learning.plan import plan
from sembp_dsl.learning.stats import NonInferiority
from sembp_dsl.models.llm import LLM
from sembp_dsl.records.runs import resolve
from sembp_dsl.runtime.datasets import Sample

# litellm's prices: gpt-4o-mini < gpt-3.5-turbo < gpt-4o. The cheapest is the bad one.
PIPELINE = """\
pipeline relay "Pass the answer along"

input q: text

param a_task = "Read the claim."
param b_task = "Restate it."
param c_task = "Answer Yes or No."

# each node names its model on its own line
node a: text { prompt = a_task  model = strong }
node b: text {
  prompt = b_task
  model  = strong   # reviewed by hand
}
node c: text { prompt = c_task  model = strong }

q -> a -> b -> c
output c
metric exact

model bad       { name = "openai/gpt-4o-mini"     api_base = "http://BAD"   max_tokens = 16 }
model fast      { name = "openai/gpt-3.5-turbo"   api_base = "http://GOOD"  max_tokens = 16 }
model strong    { name = "openai/gpt-4o"          api_base = "http://GOOD"  max_tokens = 16 }
model backward  { name = "openai/gpt-3.5-turbo"   api_base = "http://GOOD"  max_tokens = 16 }
model optimizer { name = "openai/gpt-3.5-turbo"   api_base = "http://GOOD"  max_tokens = 16 }

optimize { iterations = 8  models = [bad, fast, strong]  margin = 0.05  objective = accuracy }
"""


def good(messages: list) -> str:
    """Right unless an earlier node's answer in the prompt was wrong: a wrong answer carries down the chain."""
    return "Wrong" if any("Wrong" in str(m.get("content")) for m in messages) else "Yes"


@pytest.fixture
def relay(tmp_path):
    with FakeServer(reply=good) as right, FakeServer(reply="Wrong") as wrong:
        path = tmp_path / "relay.sbp"
        path.write_text(PIPELINE.replace("http://GOOD", right.url).replace("http://BAD", wrong.url))
        rows = [{"q": f"claim {i}", "answer": "Yes"} for i in range(104)]
        (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        yield path, tmp_path


def test_cost_objective_moves_each_node_to_the_cheapest_model_as_good(relay, capsys, monkeypatch):
    path, folder = relay
    monkeypatch.chdir(folder)
    before = path.read_text()
    argv = [
        "optimize", str(path), "--data", "data.jsonl", "--train-size", "4", "--val-size", "100",
        "--objective", "cost", "--gate-alpha", "0.1", "--iters", "6",
    ]  # fmt: skip
    assert cli.main([*argv, "--plan", "--json"]) == 0
    bound = json.loads(capsys.readouterr().out)
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    after = path.read_text()
    changed = [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]
    assert changed == [
        "- node a: text { prompt = a_task  model = strong }",
        "+ node a: text { prompt = a_task  model = fast }",
        "-   model  = strong   # reviewed by hand",
        "+   model  = fast   # reviewed by hand",
        "- node c: text { prompt = c_task  model = strong }",
        "+ node c: text { prompt = c_task  model = fast }",
    ]
    record = resolve("-1", folder / ".sbpc/runs")
    gated = [it for it in record.iterations if it.gate]
    accepted = [it for it in gated if it.accepted]
    assert len(accepted) == 3
    for it in gated:
        (move,) = [c for c in it.candidates if c.fate == "taken" or c.fate.startswith("rejected by the gate")]
        assert move.strategy == "models" and move.param.endswith(".model")
        assert it.gate.margin == 0.05
        assert it.accepted == (move.new == "fast")  # never the bad one, always the good cheaper one
        if it.accepted:  # 100 identical answers of 100: no loss, and the exact test rejects a 5% drop
            assert it.gate.losses == [] and it.gate.samples + len(it.gate.cancelled) <= 100 and it.gate.p <= 0.1
    costs = [record.record.initial_per_1000, *(it.per_1000 for it in accepted)]
    assert all(c is not None for c in costs) and costs == sorted(costs, reverse=True) and costs[-1] < costs[0] / 4
    assert cli.main(["show", "-1"]) == 0
    assert f"the pipeline per 1,000 samples: ${costs[0]:.4f} -> ${costs[-1]:.4f}" in capsys.readouterr().out
    # --plan bounded the run's calls and dollars, in all and for each strategy (the models strategy calls nothing
    # of its own: its moves cost the loop's forward passes)
    spent = record.record.ledger
    assert spent["calls"] <= sum(bound["calls"].values()) and spent["cost"] <= bound["cost"]
    assert bound["strategies"]["models"] == {"calls": 0, "cost": 0.0}
    assert spent["roles"]["forward"]["calls"] <= bound["strategies"]["loop"]["calls"]
    assert spent["roles"]["forward"]["cost"] <= bound["strategies"]["loop"]["cost"]
    learning = [spent["roles"].get(role, {"calls": 0, "cost": 0.0}) for role in ("backward", "optimizer")]
    assert sum(u["calls"] for u in learning) <= bound["strategies"]["gradients"]["calls"]
    assert sum(u["cost"] for u in learning) <= bound["strategies"]["gradients"]["cost"]
    # the report shows the cost per 1,000 samples before and after, and which strategy proposed each step
    assert cli.main(["report", "-1", "--out", str(folder / "report.html")]) == 0
    page = (folder / "report.html").read_text()
    assert f"${costs[0]:.4f} -&gt; ${costs[-1]:.4f}" in page and "[models]" in page
    assert "accuracy and cost per iteration" in page


def test_accuracy_objective_keeps_the_models(relay, capsys, monkeypatch):
    """Today's behaviour by default: a cheaper model is never proposed, and every node already scores all."""
    path, folder = relay
    monkeypatch.chdir(folder)
    before = path.read_text()
    code = cli.main(["optimize", str(path), "--data", "data.jsonl", "--train-size", "4", "--val-size", "100"])
    assert code == 0, capsys.readouterr().err
    assert path.read_text() == before


def test_the_non_inferiority_test_accepts_identical_answers_and_rejects_a_real_drop():
    rule = NonInferiority(alpha=0.1, margin=0.05, samples=100)
    assert rule.passes(0, 0, answered=100)
    assert not rule.passes(0, 5, answered=100)  # 5 losses of 100 are a drop of 5%: not shown to be less
    assert not NonInferiority(alpha=0.1, margin=0.05, samples=20).passes(0, 0, answered=20)  # too few to tell


YAML = """\
pipeline: relay
inputs:
  q: text
params:
  a_task: Read the claim.
nodes:
  a: {type: text, prompt: a_task, model: strong}   # reviewed by hand
  b:
    type: text
    prompt: a_task
    model: "strong"
edges:
  - q -> a -> b
output: b
metric: exact
models:
  fast: {name: openai/gpt-3.5-turbo}
  strong: {name: openai/gpt-4o}
"""


@pytest.mark.parametrize(("name", "text"), [("relay.sbp", PIPELINE), ("relay.yaml", YAML)])
def test_write_back_changes_the_model_lines_only(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    pipeline = parse_text(text, str(path))
    new = rewrite(pipeline, {model_param("a"): "fast", model_param("b"): "fast", "a_task": "Read it."})
    old_lines, new_lines = text.splitlines(), new.splitlines()
    changed = [(old, line) for old, line in zip(old_lines, new_lines) if old != line]
    assert len(old_lines) == len(new_lines) and len(changed) == 3
    assert all(old.replace("strong", "fast") == line for old, line in changed if "model" in old)
    assert compile_file(str(path)).with_prompts({"a.model": "fast"}).nodes["a"].model == "fast"


def test_show_says_which_strategy_proposed_each_step_and_its_gate(relay, capsys, monkeypatch):
    path, folder = relay
    monkeypatch.chdir(folder)
    argv = ["optimize", str(path), "--data", "data.jsonl", "--train-size", "4", "--val-size", "100"]
    assert cli.main([*argv, "--objective", "cost", "--iters", "2"]) == 0
    capsys.readouterr()
    assert cli.main(["show", "-1"]) == 0
    out = capsys.readouterr().out
    assert "candidate for a.model: rejected by the gate" in out and "[models]" in out
    assert "non-inferiority margin 0.05" in out and "reply: strong -> bad" in out


def test_the_plan_prices_a_node_at_the_dearest_model_it_may_move_to(relay):
    """With objective accuracy a node may move up in price: its calls are bounded at the dearest model allowed;
    with objective cost it only moves down, so its own model bounds it."""
    path, _ = relay
    graph = compile_file(str(path)).with_prompts({"a.model": "bad", "b.model": "bad", "c.model": "bad"})
    llm = LLM(graph.models)
    train = [Sample(f"s{i}", {"q": "claim"}, "Yes") for i in range(4)]
    method = Method(iterations=1, models=("bad", "strong"), train_size=4, val_size=0)
    up = plan(graph, llm, method, train, [], [], {})
    down = plan(graph, llm, method.changed({"objective": "cost"}), train, [], [], {})
    assert up.cost is not None and down.cost is not None and up.cost > down.cost
    assert set(up.models) >= {"strong"} and "strong" not in {m for m, u in down.models.items() if u["calls"]}


def test_a_run_whose_strategies_have_nothing_to_change_is_refused_before_a_call(relay, capsys, monkeypatch):
    """--strategies models with no models to move to (no list in the file, none on the command line) would spend its
    forward passes on nothing: the plan and the run refuse it, saying how to name the models; with a list it runs."""
    path, folder = relay
    path.write_text(path.read_text().replace("models = [bad, fast, strong]  ", ""))
    monkeypatch.chdir(folder)
    asked = ["optimize", str(path), "--data", "data.jsonl", "--strategies", "models", "--objective", "cost"]
    for extra in (["--plan"], []):
        with pytest.raises(SystemExit) as exited:
            cli.main([*asked, *extra])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "--strategies: nothing in this pipeline to change" in err and "--models" in err
    assert not (folder / ".sbpc" / "runs").exists()  # no record, no call
    assert cli.main([*asked, "--models", "fast,strong", "--plan"]) == 0
    assert "plan: at most" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("models", "said"),
    [
        ("fsat,strong", "--models: undefined model 'fsat': did you mean 'fast'?"),
        ("strong,nosuch", "--models: undefined model 'nosuch': expected one of backward, bad, fast"),
        ("strong", "--strategies: nothing in this pipeline to change. models: no node may move"),  # their own model
        ("strong,strong", "--strategies: nothing in this pipeline to change. models: no node may move"),
    ],
)
def test_a_models_list_that_cannot_move_a_node_is_refused_before_a_call(relay, capsys, monkeypatch, models, said):
    """The file's lists are checked (E071); a flag's was taken as it came: a misspelt model was never a move, a list
    of the nodes' own model moved nothing, and the run spent its forward passes saying 'no valid candidate'."""
    path, folder = relay
    monkeypatch.chdir(folder)
    asked = ["optimize", str(path), "--data", "data.jsonl", "--strategies", "models", "--models", models]
    for extra in (["--plan"], []):
        with pytest.raises(SystemExit) as exited:
            cli.main([*asked, "--objective", "cost", *extra])
        assert exited.value.code == 2
        assert said in capsys.readouterr().err
    assert not (folder / ".sbpc" / "runs").exists()  # no record, no call


def test_objective_cost_with_no_price_known_is_refused_saying_which_models_to_price(relay, capsys, monkeypatch):
    """Models litellm cannot price (a local server's) were never proposed: the run spent its calls and said 'no
    valid candidate'. Refused, naming them; declared prices make the same run go."""
    path, folder = relay
    unknown = path.read_text().replace("openai/gpt-4o-mini", "openai/mine-a").replace("openai/gpt-4o", "openai/mine-b")
    path.write_text(unknown.replace("openai/gpt-3.5-turbo", "openai/mine-c"))
    monkeypatch.chdir(folder)
    asked = ["optimize", str(path), "--data", "data.jsonl", "--strategies", "models", "--objective", "cost"]
    for extra in (["--plan"], []):
        with pytest.raises(SystemExit) as exited:
            cli.main([*asked, *extra])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "--objective cost: no model has a price to compare" in err
        assert "bad (openai/mine-a), fast (openai/mine-c), strong (openai/mine-b)" in err and "input_price" in err
    assert not (folder / ".sbpc" / "runs").exists()
    priced = path.read_text().replace("max_tokens = 16 }", "max_tokens = 16  input_price = 1  output_price = 1 }")
    strong = next(line for line in priced.splitlines() if line.startswith("model strong"))
    path.write_text(priced.replace(strong, strong.replace("price = 1", "price = 9")))
    assert cli.main([*asked, "--plan"]) == 0


def test_objective_cost_without_the_models_strategy_is_refused_before_a_call(relay, capsys, monkeypatch):
    """Objective cost says which way the models strategy moves; with strategies that move no model it would change
    nothing they do, so the command says so instead of running as if it had been heard."""
    path, folder = relay
    monkeypatch.chdir(folder)
    asked = ["optimize", str(path), "--data", "data.jsonl", "--objective", "cost", "--plan"]
    with pytest.raises(SystemExit) as exited:
        cli.main([*asked, "--strategies", "gradients"])
    assert exited.value.code == 2 and "--objective cost: it moves nodes to cheaper models" in capsys.readouterr().err
    assert cli.main([*asked, "--strategies", "gradients,models"]) == 0
