"""Write-back that never fails the user: the file keeps its form and links, and what cannot be written is said first."""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, with_fake_model
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_optimize import TOY

from sembp_dsl import cli
from sembp_dsl.language.diagnostics import bad_characters
from sembp_dsl.language.syntax.source import load, parse_text
from sembp_dsl.language.tooling.writeback import WriteBack, rewrite


def copy_of(tmp_path: Path, name: str, transform=lambda text: text, bom: bool = False) -> Path:
    path = tmp_path / name
    text = transform((ROOT / "pipelines" / name).read_text())
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return path


def toy(tmp_path: Path, url: str, name: str = "toy.sbp") -> Path:
    path = tmp_path / name
    path.write_text(with_fake_model(TOY, url))
    return path


def optimize(path: Path, *flags: str) -> int:
    claims = path.parent / "claims.jsonl"
    claims.write_text("".join(json.dumps({"q": f"claim {i}", "answer": "Yes"}) + "\n" for i in range(4)))
    return cli.main(
        [
            "optimize",
            str(path),
            "--data",
            str(claims),
            "--train-size",
            "2",
            "--val-size",
            "2",
            "--iters",
            "1",
            "--gate-alpha",
            "1",
            "--runs-dir",
            str(path.parent / "runs"),
            *flags,
        ]
    )


# --- the file keeps its form -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["liar.sbp", "liar.yaml"])
@pytest.mark.parametrize("crlf, bom", [(True, False), (False, True), (True, True)])
def test_crlf_and_bom_files_are_written_in_place_and_keep_both(tmp_path, name, crlf, bom):
    path = copy_of(tmp_path, name, (lambda t: t.replace("\n", "\r\n")) if crlf else (lambda t: t), bom=bom)
    writer = WriteBack(load(str(path)))
    assert writer({"verdict_task": "Line one.\nLine two."}) is None  # no "changed on disk" diversion
    assert list(tmp_path.iterdir()) == [path]
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") == bom
    if crlf:
        assert b"\r\n" in raw and b"\n" not in raw.replace(b"\r\n", b"")
    assert load(str(path)).param("verdict_task").text == "Line one.\nLine two."
    assert writer({"verdict_task": "Again."}) is None and load(str(path)).param("verdict_task").text == "Again."


HARD_TEXTS = [
    "a\x85b",
    "a\u2028b\u2029c",
    "tab\there",
    "lone\rcr",
    "x\n\x85y",
    "\ufeffleading mark",
    "c1 \x9f\x80",
    'quote " and \\ backslash',
    "trailing space ",
    "two\nlines",
    "  indented\n\tand tabbed",
    "emoji 😀",
]


@pytest.mark.parametrize("name", ["liar.yaml", "liar.sbp"])
@pytest.mark.parametrize("text", HARD_TEXTS)
def test_hard_characters_are_written_in_a_form_that_parses_back(name, text):
    original = load(str(ROOT / "pipelines" / name))
    written = rewrite(original, {"verdict_task": text, "analyse_party": text + "!"})
    again = parse_text(written, original.path)
    assert again.param("verdict_task").text == text and again.param("analyse_party").text == text + "!"


@functools.cache
def liar_yaml():
    """Loaded once: each example below pays for its own rewrite and reading back only."""
    return load(str(ROOT / "pipelines/liar.yaml"))


@pytest.mark.slow  # 150 rewrites and readings back of a YAML pipeline
@settings(max_examples=150, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=40))
def test_any_text_is_written_back_exactly_in_yaml(text):
    assume(bad_characters(text) is None)  # control characters are refused in pipelines (and in candidates)
    original = liar_yaml()
    assert parse_text(rewrite(original, {"verdict_task": text}), original.path).param("verdict_task").text == text


# --- modes and links -----------------------------------------------------------------------------


def test_out_and_the_beside_file_keep_the_source_mode(tmp_path):
    path = toy(tmp_path, "http://127.0.0.1:9")
    os.chmod(path, 0o640)
    out = tmp_path / "best.sbp"
    WriteBack(load(str(path)), str(out))({"look": "Out."})
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    writer = WriteBack(load(str(path)))
    path.write_text(path.read_text() + "# edited\n")
    assert writer({"look": "Beside."})
    assert stat.S_IMODE((tmp_path / "toy.optimized.sbp").stat().st_mode) == 0o640


def test_a_new_file_with_no_source_to_copy_takes_the_umask_not_0600(tmp_path):
    from sembp_dsl.files import atomic_write

    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "report.html", "<p>for sharing</p>")  # sbpc report --out, a run record
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o644


def test_a_write_never_touches_the_process_umask(tmp_path, monkeypatch):
    """The umask is the whole process's: setting it to read it back would change it under other threads' feet
    (a file another thread creates meanwhile would take the wrong mode). The kernel applies it instead, also
    when a killed write left its temporary copy, with that copy's own mode, behind."""
    from sembp_dsl.files import atomic_write, temporary

    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", lambda mask: pytest.fail("os.umask called"))
        stale = temporary(tmp_path / "new.html")
        stale.write_text("half")
        stale.chmod(0o600)
        atomic_write(tmp_path / "new.html", "<p>new</p>")
        kept = tmp_path / "kept.html"
        kept.write_text("old")
        kept.chmod(0o604)
        atomic_write(kept, "<p>rewritten</p>")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.html").stat().st_mode) == 0o640 and not stale.exists()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o604 and kept.read_text() == "<p>rewritten</p>"


def test_a_symlinked_pipeline_is_written_through_to_its_target(tmp_path):
    target = toy(tmp_path, "http://127.0.0.1:9", "real.sbp")
    link = tmp_path / "link.sbp"
    link.symlink_to(target.name)
    assert WriteBack(load(str(link)))({"look": "Through the link."}) is None
    assert link.is_symlink() and os.readlink(link) == "real.sbp"
    assert 'param look = "Through the link."' in target.read_text()


def test_a_hard_linked_pipeline_is_written_in_place(tmp_path):
    path = toy(tmp_path, "http://127.0.0.1:9")
    other = tmp_path / "other-name.sbp"
    os.link(path, other)
    assert WriteBack(load(str(path)))({"look": "Both names."}) is None
    assert path.stat().st_ino == other.stat().st_ino and 'param look = "Both names."' in other.read_text()


def test_an_existing_optimized_file_is_never_overwritten(tmp_path):
    path = toy(tmp_path, "http://127.0.0.1:9")
    earlier = tmp_path / "toy.optimized.sbp"
    earlier.write_text("an earlier result\n")
    writer = WriteBack(load(str(path)))
    path.write_text(path.read_text() + "# edited\n")
    notice = writer({"look": "New."})
    fresh = tmp_path / "toy.optimized-2.sbp"
    assert notice and str(fresh) in notice
    assert earlier.read_text() == "an earlier result\n" and 'param look = "New."' in fresh.read_text()


# --- what cannot be written is said before the run ----------------------------------------------------


def test_a_read_only_pipeline_is_refused_before_any_call(tmp_path, fake_llm, capsys):
    path = toy(tmp_path, fake_llm.url)
    os.chmod(path, 0o444)
    before = path.read_text()
    assert optimize(path) == 1
    err = capsys.readouterr().err
    assert "is read-only" in err and "--out" in err and fake_llm.requests == 0 and path.read_text() == before
    assert optimize(path, "--dry-run") == 0  # nothing would be written: fine


@pytest.mark.parametrize(
    "out, message",
    [
        ("missing/best.sbp", "does not exist"),
        ("folder", "is a folder"),
        ("best.yaml", "must end in .sbp"),
    ],
)
def test_a_bad_out_fails_before_the_run(tmp_path, fake_llm, capsys, out, message):
    (tmp_path / "folder").mkdir()
    path = toy(tmp_path, fake_llm.url)
    assert optimize(path, "--out", str(tmp_path / out)) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and fake_llm.requests == 0
    assert not (tmp_path / "runs").exists()  # not even a run record


ALIASED = textwrap.dedent("""\
    pipeline: toy
    inputs: {q: text}
    params:
      look: &shared Look at the claim.
      check: *shared
      verdict_task: Say Yes or No.
    templates:
      judge: "{{ prompt }} VERDICT Claim: {{ q }} A: {{ a }} B: {{ b }}"
    nodes:
      a: {type: text, prompt: look}
      b: {type: text, prompt: check}
      verdict: {type: "choice(Yes, No)", prompt: verdict_task, template: judge}
    edges:
      - q -> a, b
      - q, a, b -> verdict
    output: verdict
    """)


def test_a_yaml_alias_param_is_a_clear_error_before_the_run(tmp_path, fake_llm, capsys):
    path = tmp_path / "toy.yaml"
    path.write_text(ALIASED + f'models:\n  default: {{name: openai/fake, api_base: "{fake_llm.url}"}}\n')
    assert optimize(path) == 1
    err = capsys.readouterr().err
    assert "toy.yaml:5:10: error[E061]: YAML alias '*shared'" in err and "write the value out" in err
    assert "Traceback" not in err and fake_llm.requests == 0 and not (tmp_path / "runs").exists()


def test_an_empty_override_of_the_loss_template_reaches_no_prompt(tmp_path, fake_llm, script, capsys):
    path = toy(tmp_path, fake_llm.url)
    path.write_text(path.read_text() + 'template loss = ""\n')
    assert optimize(path, "--dry-run") == 0
    assert not any("The answer should be" in p for p in script.prompts)  # the built-in loss text
    assert not script.of_kind("optimizer")  # an empty loss is no feedback: no prompt is rewritten from it
    assert any("The answer should be" in p for p in _built_in_loss_run(tmp_path, fake_llm, script))


def _built_in_loss_run(tmp_path, fake_llm, script) -> list[str]:
    folder = tmp_path / "builtin"
    folder.mkdir()
    script.prompts.clear()
    optimize(toy(folder, fake_llm.url), "--dry-run")
    return [p for p in script.of_kind("optimizer") if '"verdict_task"' in p]


# --- writes that are killed midway, and paths that are no files ---------------------------------------

KILLED_WRITE = """
import os, signal, sys
from pathlib import Path
from sembp_dsl import files
from sembp_dsl.language.tooling import writeback
from sembp_dsl.language.syntax.source import load

real = files._write_synced
def dying(path, data, *, create=None):
    if path.name == sys.argv[2]:  # the write that dies: half the bytes, then kill -9
        with open(path, "wb" if create is not None else "r+b") as f:
            f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, data, create=create)
files._write_synced = dying
writeback.WriteBack(load(sys.argv[1]))({"look": "New text " * 40})
"""


def killed_write(path: Path, dies_at: str) -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(path), dies_at], capture_output=True)
    assert result.returncode == -9, result.stderr


def test_a_hard_linked_file_torn_by_kill_9_is_reported_with_the_whole_text_beside_it(tmp_path):
    path = toy(tmp_path, "http://127.0.0.1:9")
    os.link(path, tmp_path / "other-name.sbp")
    killed_write(path, dies_at=path.name)  # killed inside the in-place write
    copy = tmp_path / ".toy.sbp.sbpc-tmp"
    assert "New text " * 40 in copy.read_text() and copy.read_text() != path.read_text()  # torn file, whole copy
    code, err = check(path)
    assert code == 1 and "an earlier write to this file was interrupted" in err and f"cp {copy} {path} && rm" in err
    shutil.copyfile(copy, path)  # the way out the message gives: the copy is the whole new file, links kept
    copy.unlink()
    assert {p.name: p.text for p in load(str(tmp_path / "other-name.sbp")).params}["look"] == "New text " * 40


def test_a_write_killed_before_its_rename_leaves_the_file_whole_and_the_stray_is_cleaned(tmp_path):
    path = toy(tmp_path, "http://127.0.0.1:9")
    before = path.read_text()
    killed_write(path, dies_at=".toy.sbp.sbpc-tmp")
    assert path.read_text() == before and (tmp_path / ".toy.sbp.sbpc-tmp").exists()
    assert WriteBack(load(str(path)))({"look": "Whole."}) is None
    assert 'param look = "Whole."' in path.read_text() and not (tmp_path / ".toy.sbp.sbpc-tmp").exists()


def test_a_fifo_or_a_folder_is_never_replaced_by_a_write(tmp_path, capsys):
    from sembp_dsl.files import WriteBackError, atomic_write

    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    with pytest.raises(WriteBackError, match="not a regular file"):
        atomic_write(fifo, "<html>")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert cli.main(["report", "-1", "--runs-dir", str(tmp_path), "--out", str(fifo)]) != 0
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_save_with_an_empty_path_is_refused_and_the_source_kept(tmp_path):
    import sembp_dsl as sbp

    path = toy(tmp_path, "http://127.0.0.1:9")
    before = path.read_text()
    with sbp.load(path) as pipeline:
        with pytest.raises(ValueError, match="an empty path names no file"):
            pipeline.save("")
    assert path.read_text() == before


def check(path: Path) -> tuple[int, str]:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "sembp_dsl.cli", "check", str(path)], capture_output=True, text=True)
    return result.returncode, result.stderr
