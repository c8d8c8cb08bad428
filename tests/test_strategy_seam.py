"""A strategy is one class and one line (docs/architecture.md): a subclass of `Strategy` (learning/strategies.py)
and its name's line in language/method.py's STRATEGIES. This test adds a throwaway one that way, and `sbpc check`,
the editor, the YAML form, `--plan` and `sbpc optimize` take it with nothing else changed."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from conftest import Script
from fake_server import FakeServer
from test_optimize import TOY, data, write

from sembp_dsl import cli
from sembp_dsl.language.blocks.method import STRATEGIES, Method, SettingError
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.syntax.yaml_form import schema_text
from sembp_dsl.language.tooling.editor import Document
from sembp_dsl.learning.descent import Candidate
from sembp_dsl.learning.strategies import Each, Learnt, Proposed, Strategy, check_acting, strategies
from sembp_dsl.models.llm import LLM
from sembp_dsl.records.runs import resolve

ROOT = Path(__file__).resolve().parent.parent


class Emphasis(Strategy):
    """Throwaway: asks no model, and proposes each trainable prompt with a sentence added."""

    name: ClassVar[str] = "emphasis"
    idle: ClassVar[str] = "no prompt to add a sentence to"

    def params(self, graph) -> list[str]:
        return [p for p in graph.trainable if p not in graph.demos]

    async def propose(self, learnt: Learnt, llm: LLM, each: Each) -> Proposed:
        prompts = learnt.graph.prompts
        return Proposed(
            [Candidate(p, f"Improved: {prompts[p]} Be exact.", None, "") for p in self.params(learnt.graph)]
        )


@pytest.fixture
def emphasis(monkeypatch):
    monkeypatch.setitem(STRATEGIES, Emphasis.name, "a sentence added to every prompt")  # its one line


def test_a_strategy_is_a_class_and_one_line_and_runs_end_to_end(emphasis, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with FakeServer(delay=0.0, reply=Script()) as server:
        path = write(tmp_path, "toy.sbp", TOY + "\noptimize { strategies = [emphasis] }\n", server.url)
        assert cli.main(["check", str(path)]) == 0
        text = path.read_text()
        hover = Document(text, str(path)).hover(text.index("strategies"))
        assert hover is not None and "emphasis: a sentence added to every prompt" in hover
        argv = ["optimize", str(path), "--data", data(tmp_path), "--train-size", "3", "--val-size", "0"]
        assert cli.main([*argv, "--iters", "1", "--gate", "none", "--plan"]) == 0
        assert cli.main([*argv, "--iters", "1", "--gate", "none"]) == 0
    run = resolve("-1", ".sbpc/runs")
    assert run.settings.method.strategies == ("emphasis",)
    [iteration] = run.iterations
    assert {c.strategy for c in iteration.candidates} == {"emphasis"} and iteration.accepted
    assert 'param look = "Improved: Look at the claim. Be exact."' in path.read_text()  # written back
    roles = run.record.ledger["roles"]
    assert all(roles.get(role, {"calls": 0})["calls"] == 0 for role in ("backward", "optimizer")), roles


FROZEN = 'pipeline f "F"\ninput q: text\nfrozen param p = "Say."\nnode a: text { prompt = p }\nq -> a\noutput a\n'


def test_without_its_line_the_name_is_unknown_and_with_nothing_to_change_it_says_why(emphasis, tmp_path, monkeypatch):
    (tmp_path / "frozen.sbp").write_text(FROZEN)
    graph = compile_file(str(tmp_path / "frozen.sbp"))
    method = Method(strategies=("emphasis",))
    assert [s.name for s in strategies(method)] == ["emphasis"]
    with pytest.raises(SettingError, match="emphasis: no prompt to add a sentence to"):
        check_acting(graph, method)
    monkeypatch.delitem(STRATEGIES, Emphasis.name)
    with pytest.raises(SettingError, match="'emphasis' is not one of gradients, demos, models"):
        Method(strategies=("emphasis",))


def test_the_yaml_form_takes_it_too(emphasis, tmp_path):
    """The YAML form's JSON Schema reads the names `strategies` takes from STRATEGIES: no second edit."""
    path = tmp_path / "liar.yaml"
    text = (
        (ROOT / "pipelines" / "liar.yaml").read_text().replace("optimize:\n", "optimize:\n  strategies: [emphasis]\n")
    )
    path.write_text(text)
    assert cli.main(["check", str(path)]) == 0
    path.write_text(text.replace("[emphasis]", "[emphasys]"))
    assert cli.main(["check", str(path)]) == 1
    assert "emphasis" in schema_text(STRATEGIES)
