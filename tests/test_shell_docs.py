"""Every shell block of README.md and docs/*.md that runs `sbpc` runs here, and what a doc shows as a
command's output is what the command prints (language.md's Mermaid chart and `check` listing had drifted).

A block is one of:
- run here: a fenced block (no language, `sh`, `text`, ...) or an indented block with an `sbpc` command
  line. Lines starting with `$ ` are commands and the lines after each are its output (stdout and stderr,
  as a terminal shows them); a block without `$ ` is a script that must exit 0. It runs in a folder with
  copies of `pipelines/`, `tests/fake_server.py` and the `liar.sbp` the README's main job makes, with
  `sbpc` (this checkout's code) and `python` on PATH.
- `<!-- output of: COMMAND -->` on the line before (any language): the block is COMMAND's stdout; with
  `<!-- output of the block above -->`, it is the stdout of the shell block before it. A line `...`
  stands for any lines, so an excerpt shows parts of it in order; a table's `wall s` column is not
  compared (times differ from run to run). A `--port N` a block names is replaced by a free port, and
  what a block leaves running in the background is stopped.
- `<!-- sketch: WHY -->`: not run, for the reason given (a real provider, the network, a long run).
- `<!-- run by PATH -->`: run by that file (a test, or `.ci/run`), which names the doc.
- `<!-- fragment -->` and `<!-- fails check: MESSAGE -->`: for ```sbp, ```yaml and ```json blocks, which
  test_doc_blocks.py holds, as it holds every other block these rules do not run. Below a pipeline that
  fails check, `<!-- output of the block above -->` shows what `sbpc check FILE` prints on it (FILE is
  the name the diagnostics start with).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

from sembp_dsl.models import embedded

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"", "sh", "bash", "shell", "console", "text", "indented"}
COMMAND = re.compile(r"(^(\$ )?|&&\s*)(\w+=\S*\s+)*(\S*/)?sbpc\s")
MARKER = re.compile(r"^<!-- (sketch|output of|run by|fragment|fails check)(?::? (.*?))? -->$")
ELLIPSIS = "..."
ABOVE = "the block above"
TIMED = "wall s"


@dataclass(frozen=True)
class Block:
    """A code block: where it starts, its language ("indented" for an indented block), its text without
    the indentation, and the marker comment on the nearest line above it that is not blank."""

    path: Path
    line: int
    language: str
    text: str
    marker: tuple[str, str] | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.language in SHELL and any(COMMAND.search(line) for line in self.text.splitlines())


def marker_above(lines: list[str], start: int) -> tuple[str, str] | None:
    above = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
    found = MARKER.match(above)
    return (found.group(1), (found.group(2) or "").strip()) if found else None


def blocks(path: Path) -> list[Block]:
    """The fenced and indented code blocks of a Markdown file."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            indent = len(fence.group(1))
            body = "\n".join(line[indent:] for line in lines[i + 1 : end])
            found.append(Block(path, i + 1, fence.group(2), body, marker_above(lines, i)))
            i = end + 1
        elif lines[i].startswith("    ") and lines[i].strip() and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            body = "\n".join(line[4:] for line in lines[i:end]).strip("\n")
            found.append(Block(path, i + 1, "indented", body, marker_above(lines, i)))
            i = end
        else:
            i += 1
    return found


ALL = [block for path in DOCS for block in blocks(path)]
SHOWN = {  # a shell block -> the block below it that shows its output
    above: below
    for above, below in zip(ALL, ALL[1:])
    if below.marker == ("output of", ABOVE) and above.path == below.path
}
CHECKED = {below for above, below in SHOWN.items() if above.language in ("sbp", "yaml")}  # test_doc_blocks.py
RUN = [
    b
    for b in ALL
    if (b.shell and b.marker is None and b not in SHOWN)
    or (b.marker and b.marker[0] == "output of" and b not in CHECKED)
]


def untimed(lines: list[str]) -> list[str]:
    """The lines with the cells of a Markdown table's `wall s` column blanked."""
    out, timed = [], set()
    for line in lines:
        if not line.startswith("|"):
            out.append(line)
            timed = set()
            continue
        cells = line.split("|")
        timed = timed or {i for i, cell in enumerate(cells) if cell.strip() == TIMED}
        out.append("|".join("" if i in timed and cell.strip() != TIMED else cell for i, cell in enumerate(cells)))
    return out


def shows(expected: str, actual: str) -> bool:
    """`expected` is `actual`, or, with `...` lines, its parts appear in `actual` in order, each whole."""
    want = untimed([line.rstrip() for line in expected.strip("\n").splitlines()])
    got = untimed([line.rstrip() for line in actual.strip("\n").splitlines()])
    if ELLIPSIS not in want:
        return want == got
    parts, part = [], []
    for line in [*want, ELLIPSIS]:
        if line == ELLIPSIS:
            parts += [part] if part else []
            part = []
        else:
            part.append(line)
    at = 0
    for part in parts:
        at = next((i + len(part) for i in range(at, len(got) - len(part) + 1) if got[i : i + len(part)] == part), -1)
        if at < 0:
            return False
    return True


def transcript(text: str) -> list[tuple[str, str]]:
    """`$ command` lines (a trailing backslash continues one) and the output shown under each."""
    steps: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + lines[i]
            steps.append((command, []))
        elif steps:
            steps[-1][1].append(lines[i])
        i += 1
    return [(command, "\n".join(output)) for command, output in steps]


@pytest.fixture
def folder(tmp_path):
    """A folder as a user of this repository has it: pipelines/, tests/fake_server.py, the main job's
    liar.sbp, and the environment's `python` and `sbpc` (this checkout's code) on PATH."""
    work = tmp_path / "work"
    shutil.copytree(ROOT / "pipelines", work / "pipelines")
    (work / "tests").mkdir()
    shutil.copy(ROOT / "tests/fake_server.py", work / "tests")
    shutil.copy(ROOT / "pipelines/liar.sbp", work / "liar.sbp")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = shlex.quote(sys.executable)
    for name, command in [("sbpc", f"{python} -m sembp_dsl.cli"), ("python", python)]:
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "100",
    }
    return work, env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(script: str, folder: tuple[Path, dict], *, merged: bool) -> subprocess.CompletedProcess:
    """The script in its own process group, stopped with all it left running once bash is done; its output
    goes to files, which a server left in the background does not hold open as it would a pipe."""
    work, env = folder
    for port in set(re.findall(r"--port (\d+)", script)):
        script = script.replace(port, str(free_port()))
    out, err = work.parent / "stdout", work.parent / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=work,
            env=env,
            stdout=stdout,
            stderr=stdout if merged else stderr,
            start_new_session=True,
        )
        try:
            process.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):  # nothing was left running
                os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(process.args, process.returncode, out.read_text(), err.read_text())


@pytest.mark.parametrize("block", RUN, ids=lambda b: b.where)
def test_the_block_runs_and_shows_what_runs(block, folder):
    if block.marker:  # output of: COMMAND, or of the block above
        command = block.marker[1]
        if command == ABOVE:
            command = next(above for above, below in SHOWN.items() if below == block).text
        done = run(command, folder, merged=False)
        assert done.returncode == 0, done.stderr
        assert shows(block.text, done.stdout), f"{block.where} is not what `{command}` prints:\n{done.stdout}"
        return
    steps = transcript(block.text)
    if not steps:
        done = run(block.text, folder, merged=False)
        assert done.returncode == 0 and "Traceback" not in done.stderr, f"{block.where}:\n{done.stderr}"
        return
    for command, expected in steps:
        done = run(command, folder, merged=True)
        assert "Traceback" not in done.stdout, done.stdout
        if "the embedded model is not installed" in done.stdout and not embedded.available():
            pytest.skip("the block's pipeline takes the embedded model for a role, and it is not installed here")
        assert shows(expected, done.stdout), f"{block.where}: `{command}` prints\n{done.stdout}"


def test_every_shell_block_runs_or_says_why_not():
    """A shell block that is not run here says why (a sketch) or which file runs it, and that file names
    the doc; markers name nothing else."""
    for block in ALL:
        if block.marker is None:
            continue
        kind, what = block.marker
        assert bool(what) != (kind == "fragment"), f"{block.where}: <!-- {kind} --> says nothing, or too much"
        if kind == "run by":
            runner = ROOT / what
            assert runner.is_file(), f"{block.where}: {what} does not exist"
            assert block.path.name in runner.read_text(), f"{block.where}: {what} never names {block.path.name}"
        if what == ABOVE:
            assert any(below == block for below in SHOWN.values()), f"{block.where}: no block right above it"
            above = next(a for a, b in SHOWN.items() if b == block)
            assert above.shell or above.marker and above.marker[0] == "fails check", (
                f"{block.where}: the block above runs no sbpc, nor is it a pipeline that fails check"
            )
        if kind == "run by":
            assert block.shell or block.language == "python", (
                f"{block.where}: <!-- run by --> on a block that runs no sbpc"
            )


def test_the_blocks_are_found():
    """The parser finds the blocks this test is for (a parser that found none would pass everything)."""
    assert any(b.path.name == "language.md" and b.text.startswith("$ sbpc check pipelines/") for b in RUN)
    assert any(b.path.name == "editors.md" and b.text.startswith("sbpc fmt pipelines/") for b in RUN)
    assert {b.marker[1] for b in RUN if b.marker} >= {
        f"sbpc compile pipelines/liar.sbp --emit {f}" for f in ("mermaid", "prompts")
    }
    assert sum(b.shell for b in ALL) >= 15
    assert shows("a\n...\nc", "a\nb\nc") and shows("b\n...\nd", "a\nb\nc\nd\ne")
    assert not shows("a\n...\nc", "c\nb\na") and not shows("a\nb", "a\nb\nc")
    table = "| row | calls | wall s |\n|---|---|---|\n| a | {} | {} |"
    assert shows(table.format(3, 1.5), table.format(3, 40.2)) and not shows(table.format(3, 1.5), table.format(4, 1.5))
