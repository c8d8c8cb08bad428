"""The canonical layout of a .sbp file, as `sbpc fmt` writes it.

- One statement per line, in the order written, at the start of the line; at most one empty line between
  statements (and between settings); the file ends with one newline.
- Comments stay where they are: on their own line before what follows them, or after a statement or a
  setting on its line (two spaces before the `#`).
- A string's text never changes. A block string that starts on a new line is re-indented two spaces under
  the line it starts on (which leaves its text as it was); every other literal is kept as written.
- Tokens are spaced one way: `a, b -> c`, `node a: choice(Yes, No)`, `node j: {verdict: text, why: text}`
  (no trailing comma), `output j.verdict`, `key = value`, `{ a = 1  b = 2 }`, `list[text]`,
  `a -> b when a == "Yes"`, `output easy | hard`, `node n: text for each x in xs { ... }`, `tools = [lookup, calc]`.
- Statements of one kind written one after another line up their `=` or `{`; the settings of one-line
  blocks in such a run line up in columns. A block stays on one line when it was written so and fits in
  WIDTH; one that does not becomes one setting per line, keys lined up. A statement longer than WIDTH
  breaks before each `->`, then after commas.
- A demos list puts each example on a line of its own (`{question: "...", answer: "..."},`), or, when one does
  not fit or holds a block string, each field of it (demos.layout: what write-back writes).
- A statement with a comment inside it anywhere else is kept as written.

What write-back writes (language/tooling/writeback.py) is already in this layout. The result is proved: it must
parse to the same IR as the input, or the file is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import SbpcError
from .. import ir
from ..nodes.demos import layout
from ..syntax.parser import parse
from ..syntax.tokens import STRINGS, Block, Comment, Source, Statement, Tok, is_punct, read

WIDTH = 100
INDENT = "  "
NO_SPACE_BEFORE = (",", ":", ")", ";", "(", "}", ".", "]")
NO_SPACE_AFTER = ("(", "{", ".", "[")  # a `{` joined into a line opens a record type; a block's braces are set apart


def in_list_type(previous: Tok, token: Tok) -> bool:
    """Inside `list[text]`, written without spaces: after `list`, around what its brackets hold."""
    return (previous.value == "list" and is_punct(token, "[")) or is_punct(token, "]") or is_punct(previous, "[")


class FormatError(SbpcError, ValueError):
    """Formatting would have changed what the file means: a bug in the formatter, reported, never written."""


def format_text(
    text: str, path: str = "<string>", parsed: ir.Pipeline | None = None, syntax: Source | None = None
) -> str:
    """`text` (a .sbp file) in the canonical layout; PipelineError when it does not parse. `parsed` and `syntax`:
    parse(text, path) and read() of its text, when the caller has them already (the editor does): not made again."""
    with ir.gc_paused():  # parses of millions of acyclic objects: a full collection walks them all
        return _formatted(text, path, parsed, syntax)


def _formatted(text: str, path: str, parsed: ir.Pipeline | None, syntax: Source | None) -> str:
    pipeline = parsed if parsed is not None else parse(text, path)
    source = pipeline.text  # lone carriage returns made newlines, as the parser counts lines
    first_end = source.find("\n")
    out = Printer(syntax if syntax is not None else read(source)).render()
    if first_end > 0 and source[first_end - 1] == "\r":  # the file's own line ends, as its first line has them
        out = out.replace("\r\n", "\n").replace("\n", "\r\n")
    if out != source and parse(out, path) != pipeline:  # the same text parses to the same IR: no proof to run
        raise FormatError(f"{path}: formatting would change what the file means, so it is left as it is")
    return out


@dataclass
class Shape:
    """What a statement looks like before it is lined up with its neighbours."""

    statement: Statement
    head: str | None  # the text before the `=` or `{` it lines up on (None: it lines up on nothing)
    point: str  # "=" or "{"
    cells: list[str]  # after `=`: the value; after `{` on one line: each setting
    text: str  # the statement's whole text, when it lines up on nothing (or is kept as written)


class Printer:
    def __init__(self, source: Source):
        self.source = source
        self.text = source.text

    def render(self) -> str:
        out: list[str] = []
        for run in self.runs([self.shape(statement) for statement in self.source.statements]):
            out += self.lined_up(run)
        for comment in self.source.closing:
            if comment.blank_before and out:
                out.append("")
            out.append(comment.text)
        return "\n".join(out).strip("\n") + "\n"

    # -- one statement

    def shape(self, statement: Statement) -> Shape:
        if not self.regular(statement):
            return Shape(statement, None, "", [], self.text[statement.start : statement.end])
        if statement.kind == "demos_decl":
            return Shape(statement, None, "", [], self.demos(statement.tokens))
        block = statement.block
        if block is not None:
            head = self.join(statement.head)
            cells = [self.join(setting) for setting in settings(block)]
            if self.one_line(block, head, cells):
                return Shape(statement, head, "{", cells, "")
            return Shape(statement, None, "{", [], self.lines(block, head))
        if statement.equals is not None:  # `param p = "..."`: lines up on its `=`
            at = statement.tokens.index(statement.equals)
            head, value = self.join(statement.tokens[:at]), self.join(statement.tokens[at + 1 :])
            return Shape(statement, head, "=", [value], "")
        return Shape(statement, None, "", [], self.wrapped(statement.tokens))

    def regular(self, statement: Statement) -> bool:
        """No comment inside the statement but where the layout keeps one: before it, after it, after its
        `{`, before or after a setting, before its `}`."""
        tokens = statement.tokens
        leading, trailing = {tokens[0].start}, {tokens[-1].start}
        if statement.block is not None:
            trailing.add(statement.block.open.start)
            leading.add(statement.block.close.start)
            for setting in statement.block.settings:
                leading.add(setting[0].start)
                trailing.add(setting[-1].start)
        return all(
            (t.start not in self.source.leading or t.start in leading)
            and (t.start not in self.source.trailing or t.start in trailing)
            for t in tokens
        )

    def one_line(self, block: Block, head: str, cells: list[str]) -> bool:
        inside = [t for s in block.settings for t in s] + [block.close]
        if any(t.start in self.source.leading for t in inside):
            return False
        if any(t.start in self.source.trailing for t in [block.open, *(s[-1] for s in block.settings)]):
            return False
        if any("\n" in cell for cell in cells):
            return False
        if cells and "\n" in self.text[block.open.end : block.settings[0][0].start]:
            return False  # written as a block of lines: kept so
        return len(one_line_block(head, cells)) <= WIDTH

    def lines(self, block: Block, head: str) -> str:
        """`head {`, one setting per line with keys lined up (runs broken by empty lines), `}`."""
        lines = [head + " {" + self.after(block.open)]
        written = settings(block)
        keys = [self.join(s[: equals(s)]) for s in written]
        runs: list[list[int]] = []
        for index, setting in enumerate(written):
            if not runs or self.blank_before(setting[0]):
                runs.append([])
            runs[-1].append(index)
        for run in runs:
            width = max(len(keys[i]) for i in run)
            for i in run:
                setting = written[i]
                lines += self.before(setting[0], INDENT, first=i == 0)
                value = self.join(setting[equals(setting) + 1 :], INDENT)
                lines.append(f"{INDENT}{keys[i].ljust(width)} = {value}" + self.after(block.settings[i][-1]))
        lines += self.before(block.close, INDENT, first=not written)
        lines.append("}")
        return "\n".join(lines)

    def demos(self, tokens: tuple[Tok, ...]) -> str:
        """`demos NAME max N =`, then its list as write-back writes one (demos.layout)."""
        at = next(i for i, token in enumerate(tokens) if token.type == "LIST_OPEN")
        rows: list[list] = []
        key = ""
        for token in tokens[at + 1 : -1]:
            if is_punct(token, "{"):
                rows.append([])
            elif token.type == "NAME":
                key = token.value
            elif token.type in STRINGS:
                rows[-1].append((key, lambda indent, raw=token: self.join([raw], indent)))
        return f"{self.join(tokens[:at])} {layout(rows)}"

    def wrapped(self, tokens: tuple[Tok, ...]) -> str:
        """On one line when it fits; else broken before each `->`, and a part still too long after commas."""
        whole = self.join(tokens)
        if len(whole) <= WIDTH or "\n" in whole:
            return whole
        parts: list[list[Tok]] = [[]]
        for token in tokens:
            if is_punct(token, "->") and parts[-1]:
                parts.append([])
            parts[-1].append(token)
        lines: list[str] = []
        for index, part in enumerate(parts):
            lines += self.filled(part, INDENT if index else "", INDENT * 2 if index == 0 else INDENT + "   ")
        return "\n".join(lines)

    def filled(self, tokens: list[Tok], indent: str, continuation: str) -> list[str]:
        pieces: list[list[Tok]] = [[]]
        for token in tokens:
            pieces[-1].append(token)
            if is_punct(token, ","):
                pieces.append([])
        lines = [indent + self.join(pieces[0])]
        for piece in filter(None, pieces[1:]):
            text = self.join(piece)
            if len(lines[-1]) + 1 + len(text) <= WIDTH:
                lines[-1] += " " + text
            else:
                lines.append(continuation + text)
        return lines

    def join(self, tokens, indent: str = "") -> str:
        """Tokens on one line, spaced the one way; a block string re-indented under `indent`."""
        out = ""
        previous = None
        tokens = list(tokens)
        for index, token in enumerate(tokens):
            if is_punct(token, ",") and index + 1 < len(tokens) and is_punct(tokens[index + 1], "}"):
                continue  # a record's trailing comma, on one line
            if previous is not None and not (
                is_punct(token, *NO_SPACE_BEFORE)
                or is_punct(previous, *NO_SPACE_AFTER)
                or in_list_type(previous, token)
            ):
                out += " "
            out += block_string(token.value, indent + INDENT) if token.type == "BLOCK_STRING" else token.value
            previous = token
        return out

    # -- comments and empty lines around tokens

    def before(self, token: Tok, indent: str = "", first: bool = False) -> list[str]:
        """The empty line and own-line comments before a token, as lines (no empty line before the first)."""
        lines: list[str] = []
        for comment in self.source.leading.get(token.start, ()):
            if comment.blank_before and not first:
                lines.append("")
            lines.append(indent + comment.text)
            first = False
        if token.start in self.source.blank_before and not first:
            lines.append("")
        return lines

    def blank_before(self, token: Tok) -> bool:
        """An empty line before the token or before one of its own-line comments."""
        comments = self.source.leading.get(token.start, ())
        return token.start in self.source.blank_before or any(c.blank_before for c in comments)

    def after(self, token: Tok) -> str:
        comment: Comment | None = self.source.trailing.get(token.start)
        return f"  {comment.text}" if comment else ""

    # -- runs of statements that line up

    def runs(self, shapes: list[Shape]) -> list[list[Shape]]:
        """Statements of one kind, one after another with nothing between them, that line up."""
        runs: list[list[Shape]] = []
        for shape in shapes:
            first = shape.statement.tokens[0]
            separate = first.start in self.source.leading or first.start in self.source.blank_before
            previous = runs[-1][-1] if runs else None
            if (
                previous is not None
                and not separate
                and shape.head is not None
                and previous.head is not None
                and previous.statement.kind == shape.statement.kind
            ):
                runs[-1].append(shape)
            else:
                runs.append([shape])
        return runs

    def lined_up(self, run: list[Shape]) -> list[str]:
        lines: list[str] = []
        heads = max((len(s.head) for s in run if s.head is not None), default=0)
        blocks = [s.cells for s in run if s.point == "{"]
        columns = max(map(len, blocks), default=0)
        widths = [max((len(c[i]) for c in blocks if len(c) > i + 1), default=0) for i in range(columns)]
        for shape in run:
            first = shape.statement.tokens[0]
            lines += self.before(first, first=first is self.source.statements[0].tokens[0])
            if shape.head is None:
                text = shape.text
            elif shape.point == "=":
                text = f"{shape.head.ljust(heads)} = {shape.cells[0]}"
            else:
                last = len(shape.cells) - 1
                cells = [cell.ljust(widths[i]) if i < last else cell for i, cell in enumerate(shape.cells)]
                text = one_line_block(shape.head.ljust(heads), cells)
            lines += (text + self.after(shape.statement.tokens[-1])).split("\n")
        return lines


def settings(block: Block) -> list[tuple[Tok, ...]]:
    """Each setting's tokens, less the optional `;` that may end it."""
    return [s[:-1] if is_punct(s[-1], ";") else s for s in block.settings]


def equals(setting: tuple[Tok, ...]) -> int:
    return next(i for i, token in enumerate(setting) if is_punct(token, "="))


def one_line_block(head: str, cells: list[str]) -> str:
    return f"{head} {{ {'  '.join(cells)} }}" if cells else f"{head} {{}}"


def block_string(raw: str, indent: str) -> str:
    """A block string re-indented: its lines under `indent`, its closing quotes on a line of their own at
    `indent`; its text unchanged. One that starts on its opening line is verbatim, and kept as written."""
    body = raw[3:-3]
    if not body.startswith(("\n", "\r\n")):
        return raw
    lines = [line.removesuffix("\r") for line in body.split("\n")[1:]]
    old = lines.pop()
    text = [line[len(old) :] if line.startswith(old) else "" for line in lines]
    return '"""\n' + "".join(f"{indent}{line}\n" if line else "\n" for line in text) + indent + '"""'
