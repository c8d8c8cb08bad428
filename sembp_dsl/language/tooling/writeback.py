"""Updated prompts -> source. The last stage: optimized prompts go back into the file they came from.

Only the literal of each changed parameter is replaced, found through the IR's
spans; every other byte stays. Each new literal is proved by parsing the new file
again: it must give the old IR with exactly those prompts changed. Files are
written atomically and never over a file someone changed since we read it; they
keep their line endings, byte order mark, mode, symbolic and hard links. What can
surely not be written (a read-only file, a bad --out) is said before
a run starts.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ...errors import Option
from ...files import WriteBackError, atomic_write, read_current
from .. import ir
from ..diagnostics import PipelineError
from ..nodes.demos import DemosError, as_text, examples, from_text, layout
from ..nodes.node import model_param
from ..syntax.parser import decode_block_string
from ..syntax.source import parse_text

_YAML_KINDS = (".yaml", ".yml")


def _indent_of_line(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    line = text[start:offset]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _newline(source: str) -> str:
    """The file's own line ending, so a rewritten literal does not mix styles."""
    return "\r\n" if "\r\n" in source else "\n"


def sbp_literal(text: str, source: str, param: ir.Param) -> str:
    """A .sbp string literal that decodes to exactly `text`: a block string when it spans lines."""
    return sbp_string(text, _indent_of_line(source, param.literal.start), _newline(source))


def sbp_string(text: str, indent: str, nl: str = "\n") -> str:
    """A .sbp string literal that decodes to exactly `text`, on a line indented `indent`: a block string, its
    lines indented under that line, when it spans lines."""
    if "\n" in text and '"""' not in text and "\r" not in text:
        inner = indent + "  "
        body = nl.join(inner + line if line else "" for line in text.split("\n"))
        literal = f'"""{nl}{body}{nl}{inner}"""'
        if decode_block_string(literal) == text:
            return literal
    return json.dumps(text, ensure_ascii=False)


def sbp_demos(value: Sequence[Mapping[str, str]], source: str, param: ir.Param) -> str:
    """A demos list for a .sbp file, laid out as `sbpc fmt` lays it out (demos.layout)."""
    indent, nl = _indent_of_line(source, param.literal.start), _newline(source)
    rows = [[(key, lambda at, text=text: sbp_string(text, at)) for key, text in example.items()] for example in value]
    return nl.join(indent + line if line and n else line for n, line in enumerate(layout(rows).split("\n")))


def yaml_demos(value: Sequence[Mapping[str, str]], source: str, param: ir.Param) -> tuple[int, str]:
    """Where a demos list starts in a YAML file and the list to write there: a block list under its `demos:`
    key, one example an item, a `|-` block for a value of several lines; a flow list (`[{...}]`) inside a
    flow mapping."""
    colon = source.rfind(":", 0, param.literal.start)
    line_start = source.rfind("\n", 0, colon) + 1
    if source[line_start:colon].strip() != "demos" or source[colon + 1 : param.literal.start].strip():
        return param.literal.start, yaml_flow(value)
    if not value:
        return colon + 1, " []"
    indent, nl = _indent_of_line(source, colon) + "  ", _newline(source)
    lines = []
    for example in value:
        for n, (key, text) in enumerate(example.items()):
            if "\n" in text and text == text.strip() and "\r" not in text:
                body = [indent + "    " + line if line else "" for line in text.split("\n")]
                scalar = nl.join(["|-", *body])
            else:
                scalar = yaml_quoted(text)
            lines.append(f"{indent}{'- ' if n == 0 else '  '}{key}: {scalar}")
    return colon + 1, nl + nl.join(lines)


def yaml_flow(value: Sequence[Mapping[str, str]]) -> str:
    return "[" + ", ".join("{" + ", ".join(f"{k}: {yaml_quoted(v)}" for k, v in e.items()) + "}" for e in value) + "]"


def yaml_literal(text: str, source: str, param: ir.Param) -> str:
    """A YAML scalar for `text`: a `|-` block when the value sits in a block mapping, else double-quoted."""
    line_start = source.rfind("\n", 0, param.literal.start) + 1
    before = source[line_start : param.literal.start]
    in_block_mapping = before.rstrip().endswith(":") and before.strip()[:-1].strip() == param.name
    if "\n" in text and in_block_mapping and text == text.strip() and "\r" not in text:
        indent, nl = _indent_of_line(source, param.span.start) + "  ", _newline(source)
        return "|-" + nl + nl.join(indent + line if line else "" for line in text.split("\n"))
    return yaml_quoted(text)


def yaml_quoted(text: str) -> str:
    """A double-quoted YAML scalar that parses back to exactly `text`.

    Every character YAML would fold or refuse is escaped: line breaks (including
    \\x85, \\u2028 and \\u2029), tabs, carriage returns, control and other
    non-printable characters, and the byte order mark.
    """
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif char in _YAML_SHORT_ESCAPES:
            out.append(_YAML_SHORT_ESCAPES[char])
        elif (
            0x20 <= code <= 0x7E or 0xA0 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or code >= 0x10000
        ) and char not in "\u2028\u2029\ufeff":
            out.append(char)
        else:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


_YAML_SHORT_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def value_of(param: ir.Param) -> str:
    """A param's value as the graph holds it: its text, or its examples as JSON text."""
    return as_text(examples(param)) if param.is_demos else param.text


def updated(param: ir.Param, value: str) -> ir.Param:
    """The param holding `value` (for a demos param, the examples in that JSON text), as a re-parse gives it."""
    if not param.is_demos:
        return replace(param, text=value)
    where = param.span  # spans take no part in equality
    shots = tuple(
        ir.Example(tuple(ir.Setting(k, v, span=where, value_span=where) for k, v in e.items()), span=where)
        for e in from_text(value)
    )
    return replace(param, demos=shots)


def _literal(param: ir.Param, value: str, source: str, is_yaml: bool, plain: bool) -> tuple[int, str]:
    """Where the new literal of a param starts (its old one's start, or before it), and the literal: a pretty one,
    or (`plain`) a quoted one-liner."""
    start = param.literal.start
    if param.is_demos:
        shots = from_text(value)
        if is_yaml:
            return (start, yaml_flow(shots)) if plain else yaml_demos(shots, source, param)
        if plain:
            return start, "[" + ", ".join(
                "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in e.items()) + "}" for e in shots
            ) + "]"
        return start, sbp_demos(shots, source, param)
    if plain:
        return start, yaml_quoted(value) if is_yaml else json.dumps(value, ensure_ascii=False)
    return start, (yaml_literal if is_yaml else sbp_literal)(value, source, param)


def moved(node: ir.Node, prompts: Mapping[str, str]) -> str | None:
    """The named model a node's model param moves it to, when it does: only a node with a `model` line of its own."""
    setting, new = node.setting("model"), prompts.get(model_param(node.name))
    return new if setting is not None and new is not None and new != setting.value else None


def with_model(node: ir.Node, model: str | None) -> ir.Node:
    """The node with its `model` setting naming `model`, as a re-parse gives it (None: as it is)."""
    if model is None:
        return node
    return replace(node, settings=tuple(replace(s, value=model) if s.key == "model" else s for s in node.settings))


def quoted(name: str, old: str) -> str:
    """A model's name written as the old one was: in the same quotes, or bare."""
    quote = old[0] if old[:1] in ('"', "'") else ""
    return f"{quote}{name}{quote}"


def rewrite(pipeline: ir.Pipeline, prompts: Mapping[str, str]) -> str:
    """The pipeline's source with the given prompts (and demos) replaced, and nodes' `model` lines moved to the
    models their model params name (`draft.model`), and nothing else changed."""
    source = pipeline.text
    is_yaml = pipeline.path.endswith(_YAML_KINDS)
    try:
        changed = [p for p in pipeline.params if p.name in prompts and prompts[p.name] != value_of(p)]
        names = {p.name for p in changed}
        expected = replace(
            pipeline,
            params=tuple(updated(p, prompts[p.name]) if p.name in names else p for p in pipeline.params),
            nodes=tuple(with_model(n, moved(n, prompts)) for n in pipeline.nodes),
        )
    except DemosError as exc:
        raise WriteBackError(f"could not write the new demos: {exc}") from None
    models = [
        (s.value_span, model) for n in pipeline.nodes if (model := moved(n, prompts)) and (s := n.setting("model"))
    ]
    for plain in (False, True):  # pretty literals first; quoted one-liners if those do not survive a re-parse
        edits = [(span.start, span.end, quoted(model, source[span.start : span.end])) for span, model in models]
        for param in changed:
            start, literal = _literal(param, prompts[param.name], source, is_yaml, plain)
            region = source[start : param.literal.end]
            tail = region[len(region.rstrip()) :] if is_yaml else ""  # a YAML block scalar owns its line break
            edits.append((start, param.literal.end, literal + tail))
        new = source
        for start, end, text in sorted(edits, reverse=True):
            new = new[:start] + text + new[end:]
        try:
            if parse_text(new, pipeline.path) == expected:
                return new
        except PipelineError:
            pass  # this rendering is not exact; try the next
    raise WriteBackError("could not write the new prompts so that the file parses back to them")


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


def beside(path: Path) -> Path:
    """Where to write when the file changed under us: liar.sbp -> liar.optimized.sbp, or, when that
    exists already, liar.optimized-2.sbp and so on (an earlier result is never overwritten)."""
    candidate, n = path.with_name(f"{path.stem}.optimized{path.suffix}"), 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.stem}.optimized-{n}{path.suffix}")
    return candidate


def save(path: Path, text: str, loaded: str) -> Path:
    """Write `text` to `path` unless the file no longer holds `loaded`; then write beside it."""
    current, bom = read_current(path)
    target = path if current == loaded else beside(path)
    atomic_write(target, text, bom=bom, mode_from=path)
    return target


def check_writable(pipeline: ir.Pipeline, out: str | None = None) -> None:
    """Raise WriteBackError, before any run, for what would surely fail when a step is written back:
    a read-only source, or an --out that is a folder, in a missing folder, read-only or of another
    kind than the source. (YAML aliases, which would tie two params together, the parser refuses.)"""
    source = Path(pipeline.path)
    if out is None:
        if _read_only(source):
            raise WriteBackError(
                f"{source} is read-only, so the optimized prompts could not be written into it: "
                "make it writable (chmod u+w), or ",
                Option("write them to another file", "give --out FILE, or use --dry-run"),
            )
    else:
        target, named = Path(out), Option(repr(str(out)), f"--out {out}")  # out= to optimize, path to save
        if target.is_dir():
            raise WriteBackError(named, " is a folder; give the name of a file to write")
        if not target.parent.is_dir():
            raise WriteBackError(named, f": the folder {target.parent} does not exist")
        if _read_only(target):
            raise WriteBackError(named, " is read-only")
        kind = _kind(source)
        if _kind(target) != kind:
            raise WriteBackError(
                named,
                f": the optimized pipeline is written in the syntax of {source}, so "
                f"its name must end in {' or '.join(_YAML_KINDS) if kind == 'YAML' else '.sbp'}",
            )


def _read_only(path: Path) -> bool:
    """An existing file we may not write (checked by its mode bits too: root may write anything)."""
    if not path.exists():
        return False
    return not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222


def _kind(path: Path) -> str:
    return "YAML" if path.suffix.lower() in _YAML_KINDS else path.suffix.lower()


class WriteBack:
    """Where a run's accepted prompts go: over the source (guarded), or to --out, or nowhere (--dry-run)."""

    def __init__(self, pipeline: ir.Pipeline, out: str | None = None, dry_run: bool = False):
        """Raises WriteBackError now for what could not be written later (see check_writable)."""
        if not dry_run:
            check_writable(pipeline, out)
        self.pipeline, self.dry_run = pipeline, dry_run
        self.target = Path(out or pipeline.path)
        self.guarded = out is None  # only the source file can have been edited by someone else
        self.loaded = pipeline.text
        self.bom = read_current(Path(pipeline.path))[1]  # kept in whatever file the result goes to
        self.expect_source: Callable[..., None] | None = None

    def report_to(self, expect_source: Callable[..., None]) -> None:
        """Call `expect_source(*texts)` (a run record's) with the texts the source file may hold, before and after
        each write into it, so a resumed run can tell its own writes from a user's edit."""
        self.expect_source = expect_source

    def _expect(self, *texts: str) -> None:
        if self.expect_source is not None:
            self.expect_source(*texts)

    def __call__(self, prompts: Mapping[str, str]) -> str | None:
        """Write; returns a notice for the user when the file had to go elsewhere."""
        if self.dry_run:
            return None
        text = rewrite(self.pipeline, prompts)
        if not self.guarded:
            atomic_write(self.target, text, bom=self.bom, mode_from=Path(self.pipeline.path))
            return None
        self._expect(self.loaded, text)
        target = save(self.target, text, self.loaded)
        if target == self.target:
            self._expect(text)
            self.loaded = text
            return None
        self.target, self.guarded = target, False
        return f"{self.pipeline.path} changed on disk during the run; writing to {target} instead"
