"""Updated prompts -> source. The last stage: optimized prompts go back into the file they came from.

Only the literal of each changed parameter is replaced, found through the IR's
spans; every other byte stays. Each new literal is proved by parsing the new file
again: it must give the old IR with exactly those prompts changed. Files are
written atomically and never over a file someone changed since we read it.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping

from . import ir
from .diagnostics import PipelineError
from .parser import decode_block_string
from .source import parse_text


class WriteBackError(Exception):
    pass


def _indent_of_line(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    line = text[start:offset]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _newline(source: str) -> str:
    """The file's own line ending, so a rewritten literal does not mix styles."""
    return "\r\n" if "\r\n" in source else "\n"


def sbp_literal(text: str, source: str, param: ir.Param) -> str:
    """A .sbp string literal that decodes to exactly `text`: a block string when it spans lines."""
    if "\n" in text and '"""' not in text and "\r" not in text:
        indent, nl = _indent_of_line(source, param.literal.start) + "  ", _newline(source)
        body = nl.join(indent + line if line else "" for line in text.split("\n"))
        literal = f'"""{nl}{body}{nl}{indent}"""'
        if decode_block_string(literal) == text:
            return literal
    return json.dumps(text, ensure_ascii=False)


def yaml_literal(text: str, source: str, param: ir.Param) -> str:
    """A YAML scalar for `text`: a `|-` block when the value sits in a block mapping, else double-quoted."""
    line_start = source.rfind("\n", 0, param.literal.start) + 1
    before = source[line_start:param.literal.start]
    in_block_mapping = before.rstrip().endswith(":") and before.strip()[:-1].strip() == param.name
    if "\n" in text and in_block_mapping and text == text.strip() and "\r" not in text:
        indent, nl = _indent_of_line(source, param.span.start) + "  ", _newline(source)
        return "|-" + nl + nl.join(indent + line if line else "" for line in text.split("\n"))
    return json.dumps(text, ensure_ascii=False)


def rewrite(pipeline: ir.Pipeline, prompts: Mapping[str, str]) -> str:
    """The pipeline's source with the given prompts replaced, and nothing else changed."""
    source = pipeline.text
    is_yaml = pipeline.path.endswith((".yaml", ".yml"))
    changed = [p for p in pipeline.params if p.name in prompts and prompts[p.name] != p.text]
    expected = replace(pipeline, params=tuple(replace(p, text=prompts.get(p.name, p.text)) for p in pipeline.params))
    for plain in (False, True):  # pretty literals first; quoted one-liners if those do not survive a re-parse
        new = source
        for param in sorted(changed, key=lambda p: p.literal.start, reverse=True):
            text = prompts[param.name]
            if plain:
                literal = json.dumps(text, ensure_ascii=False)
            else:
                literal = (yaml_literal if is_yaml else sbp_literal)(text, source, param)
            region = source[param.literal.start:param.literal.end]
            tail = region[len(region.rstrip()):] if is_yaml else ""  # a YAML block scalar owns its line break
            new = new[:param.literal.start] + literal + tail + new[param.literal.end:]
        try:
            if parse_text(new, pipeline.path) == expected:
                return new
        except PipelineError:
            pass  # this rendering is not exact; try the next
    raise WriteBackError("could not write the new prompts so that the file parses back to them")


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


def atomic_write(path: Path, text: str) -> None:
    """Temporary file, fsync, rename: a reader sees the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def beside(path: Path) -> Path:
    """Where to write when the file changed under us: liar.sbp -> liar.optimized.sbp."""
    return path.with_name(f"{path.stem}.optimized{path.suffix}")


def save(path: Path, text: str, loaded: str) -> Path:
    """Write `text` to `path` unless the file no longer holds `loaded`; then write beside it."""
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = None
    target = path if current == loaded else beside(path)
    atomic_write(target, text)
    return target


class WriteBack:
    """Where a run's accepted prompts go: over the source (guarded), or to --out, or nowhere (--dry-run)."""

    def __init__(self, pipeline: ir.Pipeline, out: str | None = None, dry_run: bool = False,
                 expect_source: Callable[..., None] = lambda *texts: None):
        """`expect_source(*texts)` is told which texts the source file may hold, before and after each write
        into it, so a resumed run can tell its own writes from a user's edit."""
        self.pipeline, self.dry_run, self.expect_source = pipeline, dry_run, expect_source
        self.target = Path(out or pipeline.path)
        self.guarded = out is None  # only the source file can have been edited by someone else
        self.loaded = pipeline.text

    def __call__(self, prompts: Mapping[str, str]) -> str | None:
        """Write; returns a notice for the user when the file had to go elsewhere."""
        if self.dry_run:
            return None
        text = rewrite(self.pipeline, prompts)
        if not self.guarded:
            atomic_write(self.target, text)
            return None
        self.expect_source(self.loaded, text)
        target = save(self.target, text, self.loaded)
        if target == self.target:
            self.expect_source(text)
            self.loaded = text
            return None
        self.target, self.guarded = target, False
        return f"{self.pipeline.path} changed on disk during the run; writing to {target} instead"
