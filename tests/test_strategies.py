"""An optimizer step has one definition (learning/strategies.py): the loop asks the strategies for candidates, and
`--plan` sums what the same strategies declare a step costs, plus the loop's own forward passes. Over random
settings, on the fake model, with and without the response cache, every call a run makes is a forward pass or a
call of a role some strategy declared, within what it declared for that iteration."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import pytest
from conftest import Script
from fake_server import FakeServer
from test_demos import QA, Adder
from test_optimize import DEEP, TOY, write

from sembp_dsl.language.blocks.method import Method
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.graph.graph import Graph
from sembp_dsl.learning import optimize as loop
from sembp_dsl.learning import plan as planner
from sembp_dsl.learning.descent import propose
from sembp_dsl.learning.optimize import Optimizer, forward_passes
from sembp_dsl.learning.plan import plan
from sembp_dsl.learning.strategies import Demand, Each, Learnt, Proposed, Scale, strategies
from sembp_dsl.models.cache import ResponseCache
from sembp_dsl.models.llm import LLM
from sembp_dsl.records.record import RunRecord, RunSettings
from sembp_dsl.runtime.datasets import load

PIPELINES = {"toy": (TOY, ["look", "check", "verdict_task"]), "deep": (DEEP, ["p"]), "qa": (QA, ["task", "shots"])}


class Claims(Script):
    """The initial prompts answer every claim wrong (so the first iteration learns from as many errors as it may);
    a rewritten one answers a claim right or not, by a coin seeded with the prompt."""

    def __init__(self):
        super().__init__()
        self.verdict = lambda prompt: random.Random(prompt).choice(["Yes", "No"]) if "Improved" in prompt else "No"


def samples(tmp_path, name: str, n: int) -> list:
    path = tmp_path / "data.jsonl"
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(1, n + 1)]
    if name != "qa":
        rows = [{"q": f"claim {i}", "answer": "Yes"} for i in range(n)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return list(load(str(path)).pools["all"])


def settings(seed: int) -> tuple[str, Method, bool]:
    rng = random.Random(seed)
    name = rng.choice(list(PIPELINES))
    gate = rng.choice(["val", "train", "none"])
    method = Method(
        iterations=rng.randint(1, 3),
        errors_per_gradient=rng.randint(1, 4),
        gradient=rng.choice(["sibling", "no_sibling", "none"]),
        update=rng.choice(["full", "sample"]),
        gate=gate,
        gate_alpha=rng.choice([1.0, 0.5]),
        only=tuple(rng.sample(PIPELINES[name][1], rng.randint(0, len(PIPELINES[name][1])))),
        train_size=rng.randint(2, 6),
        val_size=rng.randint(2, 5) if gate == "val" else 0,
        seed=rng.randint(0, 9),
    )
    return name, method, rng.random() < 0.5


def optimizer(graph: Graph, llm: LLM, method: Method, train, val, folder, log) -> Optimizer:
    record = RunRecord.create(folder, RunSettings("x.sbp", "x", method, {}), graph.prompts)
    return Optimizer(graph, llm, method, "exact", {}, train, val, [], record, lambda g: None, log)


def spent(llm: LLM) -> dict[str, int]:
    """Calls asked of each role so far, answered by the model or the cache."""
    return {role: usage.calls + usage.cache_hits for role, usage in llm.ledger.roles.items()}


@dataclass(frozen=True)
class Snapshots:
    """A run's log: at each iteration's line, what was spent so far."""

    llm: LLM
    after: list[dict[str, int]]

    def __call__(self, line: str) -> None:
        if line.startswith("iteration "):
            self.after.append(spent(self.llm))


@pytest.mark.parametrize("seed", range(12))
def test_each_strategy_spends_what_it_declares_and_the_plan_is_their_sum(tmp_path, seed):
    name, method, cached = settings(seed)
    script = Adder() if name == "qa" else Claims()
    with FakeServer(delay=0.0, reply=script) as server:
        graph = compile_file(str(write(tmp_path, f"{name}.sbp", PIPELINES[name][0], server.url)))
        pool = samples(tmp_path, name, method.train_size + method.val_size)
        train, val = pool[: method.train_size], pool[method.train_size :]
        gate = {"val": len(val), "train": len(train), "none": 0}[method.gate]
        declared: dict[str, int] = {}  # role -> calls one step may make, over every strategy
        for demand in (d for s in strategies(method) for d in s.cost(Scale(graph, len(train), 0))):
            declared[demand.role] = declared.get(demand.role, 0) + demand.calls
        bound = plan(graph, LLM(graph.models), method, train, val, [], {})
        passes = forward_passes(method, len(train), gate, 0)
        assert bound.calls == {"forward": passes * len(graph.model_nodes)} | {
            role: method.iterations * calls for role, calls in declared.items()
        }
        for session in range(2 if cached else 1):  # with the cache, the second run is answered from it
            llm = LLM(graph.models, cache=ResponseCache(tmp_path / "cache.sqlite") if cached else None)
            after: list[dict[str, int]] = []  # what was spent when each iteration was logged
            log = Snapshots(llm, after)
            first = spent(llm)
            outcome = llm.run(optimizer(graph, llm, method, train, val, tmp_path / f"runs{session}", log).run())
            assert len(after) == len(outcome.iterations) == method.iterations
            for before, now, it in zip([first, *after], after, outcome.iterations):
                asked = {role: now[role] - before.get(role, 0) for role in now if role != "forward"}
                assert all(asked[role] <= declared.get(role, 0) for role in asked), (it.index, asked, declared)
                if it.index == 1 and name != "qa":  # every answer wrong: as many errors as it may learn from
                    assert asked == {role: declared.get(role, 0) for role in asked}, (asked, declared)
            assert spent(llm)["forward"] <= bound.calls["forward"]


@dataclass(frozen=True)
class Rewrite:
    """A strategy of the test's own: one optimizer call per step, for the first param, without feedback."""

    name: str = "rewrite"

    def params(self, graph: Graph) -> list[str]:
        return list(graph.trainable)[:1]

    def whole_split(self, graph: Graph) -> bool:
        return False

    def learns_from(self, learnt: Learnt) -> bool:
        return True

    async def propose(self, learnt: Learnt, llm: LLM, each: Each) -> Proposed:
        return Proposed([c for p in self.params(learnt.graph) for c in await propose(learnt.graph, llm, (p,), [])])

    def cost(self, scale: Scale) -> tuple[Demand, ...]:
        return (Demand("optimizer", len(self.params(scale.graph)), 5000),)

    def unforeseen(self, graph) -> tuple[str, ...]:
        return ("a step of the test's own",)

    def margin(self) -> float | None:
        return None

    def dearer(self, graph: Graph) -> dict:
        return {}


def test_the_plan_and_the_loop_ask_the_same_strategies(tmp_path, monkeypatch):
    """A strategy added in one place changes what the loop does and what the plan bounds alike: the plan is
    derived from the strategies, not counted beside them."""
    for module in (loop, planner):
        monkeypatch.setattr(module, "strategies", lambda method: (Rewrite(),))
    method = Method(iterations=2, errors_per_gradient=2, gate="none", train_size=3, val_size=0)
    with FakeServer(delay=0.0, reply=Claims()) as server:
        graph = compile_file(str(write(tmp_path, "toy.sbp", TOY, server.url)))
        train = samples(tmp_path, "toy", 3)
        bound = plan(graph, LLM(graph.models), method, train, [], [], {})
        assert bound.calls == {"forward": 2 * 3 * 3, "optimizer": 2}  # no backward: no strategy declares one
        assert "a step of the test's own" in bound.unforeseen
        llm = LLM(graph.models)
        outcome = llm.run(optimizer(graph, llm, method, train, [], tmp_path / "runs", lambda line: None).run())
    assert spent(llm)["optimizer"] == 2 and spent(llm)["backward"] == 0
    assert [[c.param for c in it.candidates] for it in outcome.iterations] == [["look"], ["look"]]
    assert outcome.iterations[1].prompts["look"] == "Improved instruction for look."


def test_a_runs_iterations_are_kept_in_its_record_alone(tmp_path):
    with FakeServer(delay=0.0, reply=Claims()) as server:
        graph = compile_file(str(write(tmp_path, "toy.sbp", TOY, server.url)))
        method = Method(iterations=2, gate="none", train_size=3, val_size=0)
        llm = LLM(graph.models)
        run = optimizer(graph, llm, method, samples(tmp_path, "toy", 3), [], tmp_path / "runs", lambda line: None)
        outcome = llm.run(run.run())
    assert outcome.iterations is run.record.data.iterations and len(outcome.iterations) == 2
    kept = json.loads((run.record.folder / "run.json").read_text())
    assert [it["index"] for it in kept["iterations"]] == [1, 2] and kept["finished"]
