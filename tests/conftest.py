"""Shared fixtures: the real data folder, a private cache, and a scripted fake LLM over real HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sembp_dsl.runtime.datasets import anchor_data_dir

ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("SBPC_DATA_DIR", str(ROOT.parent / "shared" / "datasets"))
anchor_data_dir()  # the README runs pytest with a relative folder; tests run `sbpc` in temporary folders


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first: xdist deals the first tests out to its workers in turn, so the long ones run side by
    side from the start and the short ones fill in the end, instead of one long test running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test gets an empty response cache and a fake key; nothing leaks between tests."""
    monkeypatch.setenv("SBPC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


class Script:
    """A fake LLM that answers by what the prompt asks, and remembers every prompt.

    forward: a node's reply is `answers[node]` (a function of the prompt) or "analysis";
    backward: one "Hint k: ..." line per hint shown; optimizer: `<prompt>` + `improve(param)`.
    """

    def __init__(self):
        self.prompts: list[str] = []
        self.verdict = lambda prompt: "No"
        self.improve = lambda param, prompt: f"Improved instruction for {param}."
        self.backward_reply = None

    def kind(self, prompt: str) -> str:
        if re.search(r"Reply with only the new (instruction|description) inside <prompt>", prompt):
            return "optimizer"
        if "# Feedback on the output" in prompt:
            return "backward"
        return "forward"

    def __call__(self, messages) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        kind = self.kind(prompt)
        if kind == "optimizer":  # a tool's description alone, or an instruction and the tools it proposes with it
            param = re.search(r'The (?:instruction|text) "(\w+)"', prompt).group(1)
            tools = re.findall(r'The component may call the tool (\w+), described to it by the text "(\w+)"', prompt)
            along = "".join(f'\n<tool name="{t}">{self.improve(p, prompt)}</tool>' for t, p in tools)
            return f"Sure.\n<prompt>{self.improve(param, prompt)}</prompt>{along}"
        if kind == "backward":
            if self.backward_reply is not None:
                return self.backward_reply
            hints = re.findall(r"^Hint (\d+) \(from (\w+)\)", prompt, re.M)
            return "\n".join(f"Hint {k}: {name} should say more." for k, name in hints)
        if "Answer Yes or No" in prompt or "VERDICT" in prompt:
            return self.verdict(prompt)
        return "An analysis."

    def of_kind(self, kind: str) -> list[str]:
        return [p for p in self.prompts if self.kind(p) == kind]


@pytest.fixture
def script():
    return Script()


@pytest.fixture
def fake_llm(script):
    from fake_server import FakeServer

    with FakeServer(delay=0.0, reply=script) as server:
        yield server


def with_fake_model(source: str, url: str) -> str:
    """Point every model block of a pipeline at the fake server."""
    source = re.sub(r"\nmodel[^{]*\{[^}]*\}", "", source)
    return source + f'\nmodel {{ name = "openai/fake"  api_base = "{url}"  temperature = 0 }}\n'


def shortened_for_the_embedded_model(folder: Path, pipeline: str, model: str, tokens: int = 32) -> Path:
    """A copy of pipelines/`pipeline` in `folder` whose `model` replies stop at `tokens`: the tests that run it on
    the embedded model prove the path, not the prose, and the prose is most of their time."""
    text = (ROOT / "pipelines" / pipeline).read_text()
    short, found = re.subn(rf"(model {model} +\{{[^}}]*max_tokens\s*=\s*)\d+\b", rf"\g<1>{tokens}", text)
    assert found == 1, f"pipelines/{pipeline} no longer sets its {model} model's max_tokens"
    path = folder / pipeline
    path.write_text(short)
    return path


# Two small pipelines the API, serve and output tests share.
TRIAGE = """\
pipeline triage "Decide whether a support ticket is urgent"

input ticket: text

param look = "Note what the ticket is about."
param decide = "Is the ticket urgent? Answer Yes or No."

node notes: text { prompt = look }
node urgent: choice(Yes, No) { prompt = decide }

ticket -> notes
ticket, notes -> urgent
output urgent
"""

ECHO = """\
pipeline echo "Say something about the topic"

input topic: text
param say = "Say one thing about it."
node said: text { prompt = say }
topic -> said
output said
"""


def wait_until(condition, within: float) -> float:
    """Seconds until `condition()` held; fails past `within`. Tests wait on a condition, never a clock."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < within, "timed out"
        time.sleep(0.01)
    return time.monotonic() - start


def sbpc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`sbpc ARGS` as a user runs it, in its own process (the embedded model's runs take minutes: 20 at most)."""
    return subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=1200
    )


def eval_samples(run_json: Path) -> list[dict]:
    """An evaluation record's samples in the split's order, by their ids' numbers (its samples file, beside run.json,
    holds them in the order they finished)."""
    evaluation = json.loads(Path(run_json).read_text())["evaluation"]
    lines = (Path(run_json).parent / evaluation["samples_file"]).read_text().splitlines()
    return sorted(
        (json.loads(line) for line in lines),
        key=lambda s: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s["id"])],
    )


def write_eval_samples(run_json: Path, samples: list[dict]) -> None:
    """An evaluation record's samples file, written anew (a test's edit of what a run recorded)."""
    evaluation = json.loads(Path(run_json).read_text())["evaluation"]
    text = "".join(json.dumps(sample) + "\n" for sample in samples)
    (Path(run_json).parent / evaluation["samples_file"]).write_text(text)
