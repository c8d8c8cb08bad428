"""docs/python.md is run, block by block, against the fake model: its examples cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def test_every_python_example_runs(tmp_path, monkeypatch, fake_llm, script, capsys):
    script.verdict = lambda prompt: "Yes" if re.search(r"crash|fail", prompt, re.I) else "No"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.url)  # "openai/gpt-4o-mini" in the docs reaches the fake model
    (pipeline,) = blocks("sbp")
    Path("triage.sbp").write_text(pipeline)
    examples = blocks("python")
    assert len(examples) >= 8
    namespace: dict = {}
    for code in examples:
        exec(compile(code, f"{DOC.name} example", "exec"), namespace)
    out = capsys.readouterr().out
    assert "no input 'priority'" in out and "['Yes', 'No']" in out
    assert namespace["report"].accuracy == 1.0
    assert fake_llm.requests > 0 and "forward" in out  # the ledger was printed
    namespace["triage"].close()


def test_every_python_block_in_the_docs_runs_or_is_marked_a_sketch():
    """README's Python sketch failed as written (`NameError: examples`): a ```python block outside
    docs/python.md (whose blocks all run above) says on the line before that it is a sketch, and why."""
    root = DOC.parents[1]
    unmarked = []
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if path == DOC:
            continue
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip() == "```python" and (number == 0 or not lines[number - 1].startswith("<!-- sketch: ")):
                unmarked.append(f"{path.name}:{number + 1}")
    assert not unmarked, f"```python blocks that neither run nor say they are sketches: {unmarked}"


def test_every_field_of_a_trace_as_json_is_documented():
    """`run --json` and `sbpc serve` give traces to scripts: a key runtime.md's table does not explain is a guess."""
    import dataclasses

    from sembp_dsl.language.nodes.trace import NodeTrace

    text = (Path(__file__).parent.parent / "docs" / "runtime.md").read_text()
    table = text[text.index("| `NodeTrace` | |") :].split("\n\n")[0]
    assert not [f.name for f in dataclasses.fields(NodeTrace) if f"`{f.name}`" not in table]


def test_the_python_examples_leave_nothing_open(tmp_path, fake_llm):
    """Run as a script, the examples end with no "Unclosed client session" or other ResourceWarning: what the API
    opens, it closes (a `with` block, close(), or the end of the process)."""
    import os
    import subprocess
    import sys

    (pipeline,) = blocks("sbp")
    (tmp_path / "triage.sbp").write_text(pipeline)
    script = "\n".join(blocks("python")) + "\n"
    env = {**os.environ, "OPENAI_BASE_URL": fake_llm.url, "PYTHONWARNINGS": "always::ResourceWarning"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Unclosed" not in done.stderr and "ResourceWarning" not in done.stderr, done.stderr[-2000:]
