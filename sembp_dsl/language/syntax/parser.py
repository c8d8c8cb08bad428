""".sbp source -> IR: a Lark LALR parser whose Transformer runs inline, so no parse tree is built."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ...errors import SbpcError
from .. import ir
from ..diagnostics import Diagnostic, PipelineError, diagnostic, point, string_problem, suggestion

MAX_SYNTAX_ERRORS = 20
LONE_CR = re.compile(r"\r(?!\n)")


def span_of(file: str, tok: Token) -> ir.Span:
    # lark types a token's positions Optional, for tokens made by hand; the lexer's always carry them.
    return ir.Span(file, tok.line, tok.column, tok.end_line, tok.end_column, tok.start_pos, tok.end_pos)  # type: ignore[arg-type]


class BlockStringError(SbpcError, ValueError):
    def __init__(self, code: str, message: str, line: int):
        super().__init__(message)
        self.code = code
        self.line = line  # counted from the line of the opening quotes


def decode_block_string(raw: str) -> str:
    """Content of a triple-quoted string, dedented by the indentation of its closing quotes.

    ```
    param p = \"\"\"
      first line
        indented line
      \"\"\"
    ```
    is "first line\\n  indented line": the newline after the opening quotes and the
    line holding the closing quotes are not part of the text. A string that starts on
    the opening line is taken verbatim. Block strings have no escapes.
    """
    body = raw[3:-3]
    if not body.startswith(("\n", "\r\n")):
        return body
    lines = [line.removesuffix("\r") for line in body.split("\n")[1:]]
    indent = lines.pop()
    if indent.strip():
        raise BlockStringError(
            "E005", 'the closing """ of a multi-line string must be on a line of its own', len(lines) + 1
        )
    out = []
    for number, line in enumerate(lines, start=1):
        if line.startswith(indent):
            out.append(line[len(indent) :])
        elif not line.strip():
            out.append("")
        else:
            raise BlockStringError("E006", 'this line is indented less than the closing """ of its string', number)
    return "\n".join(out)


class Builder(Transformer):
    """Turns grammar rules into IR objects; errors found while doing so are collected, not raised."""

    def __init__(self) -> None:
        super().__init__()
        self.file = ""
        self.text = ""
        self.errors: list[Diagnostic] = []

    def span(self, tok: Token) -> ir.Span:
        return span_of(self.file, tok)

    # terminals
    def STRING(self, tok: Token) -> Token:
        try:
            value = json.loads(tok, strict=False)
        except ValueError:
            self.errors.append(diagnostic("E004", self.span(tok), "invalid escape sequence in string"))
            return tok.update(value=tok[1:-1])
        return tok.update(value=self.checked(tok, value))

    def checked(self, tok: Token, value: str) -> str:
        problem = string_problem(value)
        if problem:
            self.errors.append(diagnostic(problem[0], self.span(tok), problem[1]))
        return value

    def BLOCK_STRING(self, tok: Token) -> Token:
        try:
            return tok.update(value=self.checked(tok, decode_block_string(tok)))
        except BlockStringError as exc:
            line_start: int = tok.start_pos  # type: ignore[assignment]  # a lexed token has its position
            for _ in range(exc.line):
                line_start = self.text.index("\n", line_start) + 1
            indent = len(self.text[line_start:]) - len(self.text[line_start:].lstrip(" \t"))
            self.errors.append(diagnostic(exc.code, point(self.file, self.text, line_start + indent), str(exc)))
            return tok.update(value=tok[3:-3])

    # rules
    def names(self, toks):
        return toks

    def type(self, children):
        kind = children[0]
        if kind.type == "LIST_TYPE":  # `list[text]`
            return ir.OutputType("list", item=children[2], span=self.span(kind))
        choices = tuple(str(c) for c in children[1:])
        return ir.OutputType(
            {"TEXT": "text", "NUMBER_TYPE": "number", "JSON_TYPE": "json", "CHOICE": "choice"}[kind.type],
            choices,
            span=self.span(kind),
        )

    def record_field(self, children):
        name, type_ = children
        return ir.Field(str(name), type_, span=self.span(name))

    def record(self, fields):
        first, last = fields[0].span, fields[-1].type.span
        span = ir.Span(self.file, first.line, first.column, last.end_line, last.end_column, first.start, last.end)
        return ir.OutputType("record", (), tuple(fields), span=span)

    def setting(self, children):
        key, *part, value = children  # `search.description = doc`: a server's tool's setting
        key = key.update(value=f"{key}.{part[0]}") if part else key
        if isinstance(value, ir.Setting):  # a list of names, spanned from `[` to `]`
            return ir.Setting(str(key), value.value, span=self.span(key), value_span=value.value_span)
        return ir.Setting(str(key), self.value(value), span=self.span(key), value_span=self.span(value))

    def name_list(self, children):
        """`[a, b]`: its names, and the span of the whole list (a Setting without its key, which `setting` takes)."""
        opened, *names, closed = children
        start, end = self.span(opened), self.span(closed)
        span = ir.Span(self.file, start.line, start.column, end.end_line, end.end_column, start.start, end.end)
        return ir.Setting("", tuple(names), span=span, value_span=span)

    def listed(self, children):
        return ".".join(str(c) for c in children)

    @staticmethod
    def value(tok: Token) -> ir.Value:
        if tok.type == "NUMBER":
            return float(tok) if any(c in tok for c in ".eE") else int(tok)
        if tok.type in ("TRUE", "FALSE"):
            return tok.type == "TRUE"
        return str(tok)

    def pipeline(self, children):
        return ("pipeline", children)

    def input_decl(self, children):
        names, type_ = children[0], children[1]
        field = str(children[2]) if len(children) > 2 else None
        return [("input", ir.Input(str(n), type_, field, span=self.span(n))) for n in names]

    def param_decl(self, children):
        frozen = children[0].type == "FROZEN"
        name, literal = children[-2:]
        return [("param", ir.Param(str(name), str(literal), frozen, span=self.span(name), literal=self.span(literal)))]

    def demos_decl(self, children):
        frozen = children[0].type == "FROZEN"
        name, *rest = children[2:] if frozen else children[1:]  # after `demos`
        limit = None
        if rest[0].type == "MAX":
            keyword, number, *rest = rest
            limit = ir.Setting("max", self.value(number), span=self.span(keyword), value_span=self.span(number))
        opened, *examples, closed = rest
        start, end = self.span(opened), self.span(closed)
        literal = ir.Span(self.file, start.line, start.column, end.end_line, end.end_column, start.start, end.end)
        examples = [e if e.fields else replace(e, span=literal) for e in examples]  # `{}`: located at its list
        param = ir.Param(str(name), "", frozen, tuple(examples), limit, span=self.span(name), literal=literal)
        return [("param", param)]

    def example(self, fields):
        if not fields:
            return ir.Example((), span=ir.Span(self.file, 1, 1, 1, 1, 0, 0))  # demos_decl puts it at its list
        first, last = fields[0].span, fields[-1].value_span
        span = ir.Span(self.file, first.line, first.column, last.end_line, last.end_column, first.start, last.end)
        return ir.Example(tuple(fields), span=span)

    def example_field(self, children):
        key, value = children
        return ir.Setting(str(key), str(value), span=self.span(key), value_span=self.span(value))

    def template_decl(self, children):
        name, literal = children
        return [("template", ir.Template(str(name), str(literal), span=self.span(name), literal=self.span(literal)))]

    def function_decl(self, children):
        name, literal, *settings = children
        function = ir.Function(
            str(name), str(literal), tuple(settings), span=self.span(name), literal=self.span(literal)
        )
        return [("function", function)]

    def node_decl(self, children):
        name, type_, *settings = children
        each = settings.pop(0) if settings and isinstance(settings[0], ir.Each) else None
        return [("node", ir.Node(str(name), type_, tuple(settings), each, span=self.span(name)))]

    def each(self, children):
        item, over = children
        return ir.Each(ir.Ref(str(item), span=self.span(item)), ir.Ref(str(over), span=self.span(over)))

    def edge_chain(self, groups):
        condition = groups.pop() if isinstance(groups[-1], ir.Condition) else None
        refs = [tuple(ir.Ref(str(name), span=self.span(name)) for name in group) for group in groups]
        edges = [ir.Edge(sources, targets) for sources, targets in zip(refs, refs[1:])]
        if condition is not None:  # `a -> b -> c when ...`: the condition is on the step it ends
            edges[-1] = ir.Edge(edges[-1].sources, edges[-1].targets, condition)
        return [("edge", edge) for edge in edges]

    def condition(self, children):
        subject, *part, compare, option = children
        field = ir.Ref(str(part[0]), span=self.span(part[0])) if part else None
        return ir.Condition(
            ir.Ref(str(subject), span=self.span(subject)), field, compare == "!=", str(option), span=self.span(option)
        )

    def output_decl(self, children):
        name, *rest = children
        alternatives = tuple(r for r in rest if isinstance(r, ir.Ref))  # `output easy | hard`
        rest = [r for r in rest if not isinstance(r, ir.Ref)]
        part = rest.pop(0) if rest and rest[0].type == "NAME" else None  # `output judge.verdict`
        field = str(rest[0]) if rest else None
        record_field = ir.Ref(str(part), span=self.span(part)) if part is not None else None
        output = ir.Output(
            ir.Ref(str(name), span=self.span(name)), field, record_field, alternatives, span=self.span(name)
        )
        return [("output", output)]

    def alternative(self, children):
        return ir.Ref(str(children[0]), span=self.span(children[0]))

    def metric_decl(self, children):
        return [("metric", ir.Ref(str(children[0]), span=self.span(children[0])))]

    def metric_def(self, children):
        name, *rest = children
        if rest and not isinstance(rest[0], ir.Setting):  # `metric overlap = "metrics:overlap"`
            literal = rest[0]
            metric = ir.MetricDef(str(name), str(literal), (), span=self.span(name), value_span=self.span(literal))
        else:
            metric = ir.MetricDef(str(name), None, tuple(rest), span=self.span(name))
        return [("metric_def", metric)]

    def block(self, children):
        kind = children[0]
        name = children[1] if len(children) > 1 and isinstance(children[1], Token) else None
        settings = tuple(c for c in children[1:] if isinstance(c, ir.Setting))
        return [("block", ir.Block(str(kind), str(name) if name else None, settings, span=self.span(kind)))]

    def start(self, children):
        (_, header), *statements = children
        groups: dict[str, list] = {
            k: []
            for k in (
                "input",
                "param",
                "template",
                "function",
                "node",
                "edge",
                "output",
                "metric",
                "metric_def",
                "block",
            )
        }
        for statement in statements:
            for kind, item in statement:
                groups[kind].append(item)
        name = header[0]
        return ir.Pipeline(
            name=str(name),
            description=str(header[1]) if len(header) > 1 else "",
            inputs=tuple(groups["input"]),
            params=tuple(groups["param"]),
            templates=tuple(groups["template"]),
            nodes=tuple(groups["node"]),
            edges=tuple(groups["edge"]),
            outputs=tuple(groups["output"]),
            metrics=tuple(groups["metric"]),
            blocks=tuple(groups["block"]),
            metric_defs=tuple(groups["metric_def"]),
            functions=tuple(groups["function"]),
            span=self.span(name),
        )


def grammar() -> str:
    """The grammar of .sbp (grammar/sbp.lark), which syntax.py also parses with."""
    return (Path(__file__).parent / "grammar" / "sbp.lark").read_text(encoding="utf-8")  # as templates.py reads


# Lark fixes its inline transformer when the parser is built, and the Builder holds the parse at hand (file,
# text, errors found): each thread builds its own pair on its first parse (ms, from Lark's cache), so threads
# parse at once with no lock, and never into each other's Builder.
_THREAD = threading.local()


def _parser() -> tuple[Builder, Lark]:
    """This thread's Builder and the Lark parser that calls it."""
    pair = getattr(_THREAD, "pair", None)
    if pair is None:
        builder = Builder()
        pair = _THREAD.pair = (
            builder,
            Lark(grammar(), parser="lalr", lexer="contextual", transformer=builder, cache=True),
        )
    return pair


def _describe(terminal: str) -> str:
    names = {
        "NAME": "a name",
        "STRING": "a string",
        "BLOCK_STRING": "a string",
        "NUMBER": "a number",
        "$END": "end of file",
    }
    if terminal in names:
        return names[terminal]
    for term in _parser()[1].terminals:
        if term.name == terminal:
            return repr(term.pattern.value)
    return terminal


def _expected(exc: UnexpectedToken) -> set[str]:
    """What the parser could take here. LALR's `expected` is the state's after default reductions, which
    can be a state inside an unrelated rule; asking the parser which terminals it accepts is exact."""
    try:
        return set(exc.interactive_parser.accepts()) or set(exc.expected)
    except Exception:  # an interactive parser cannot always be rebuilt; the state's set is then the best there is
        return set(exc.expected)


def _syntax_error(file: str, text: str, exc: UnexpectedInput) -> Diagnostic:
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        expected = sorted({_describe(t) for t in _expected(exc)})
        found = "end of file" if tok.type == "$END" else repr(str(tok))
        where = point(file, text, len(text)) if tok.type == "$END" else span_of(file, tok)
        keywords = [word.strip("'") for word in expected if word.startswith("'") and word[1:-1].isalpha()]
        return diagnostic(
            "E001",
            where,
            f"unexpected {found}; expected {' or '.join(expected) if len(expected) < 3 else 'one of ' + ', '.join(expected)}",
            help=suggestion(str(tok), keywords) if tok.type == "NAME" else "",
        )
    assert isinstance(exc, UnexpectedCharacters)
    offset: int = exc.pos_in_stream  # type: ignore[assignment]  # lark types it Optional; a lexer error has it
    char = text[offset]
    code = "E002"
    if char == '"':
        code, message = "E003", "unterminated string"
        offset = text.rfind('"""', 0, offset + 1) if text[offset - 2 : offset] == '""' else offset
    elif char.isprintable():
        message = f"unexpected character {char!r}"
    else:
        message = f"unexpected character {ascii(char)}"
    return diagnostic(code, point(file, text, offset), message)


# Where statements begin: a keyword outside strings and comments, or a name opening a line (edges, blocks).
_SKIP = r'"""[\s\S]*?"""|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|#[^\n]*'
_STATEMENT_START = re.compile(
    _SKIP + r"|(?<![\w.])(frozen|param|demos|input|template|function|node|output|metric)\b"
    r"|^[ \t]*([A-Za-z_]\w*\s*(?:[,{]|->|\w+\s*\{))",
    re.M,
)


def _statement_starts(text: str) -> list[int]:
    starts = []
    for match in _STATEMENT_START.finditer(text):
        if match.group(1):
            starts.append(match.start(1))
        elif match.group(2):
            starts.append(match.start(2))
    return starts


def _unclosed_brace(text: str, offset: int) -> tuple[int, int] | None:
    """(where a `{` opened, where the statement holding the error starts) when that statement starts
    inside a `{` never closed before it: a missing `}`, which the parser only notices a statement later,
    as a setting named `node` or `q` followed by something other than `=`."""
    starts = [s for s in _statement_starts(text) if 0 < s <= offset]
    if not starts:
        return None
    this, opened = starts[-1], []
    for match in re.finditer(_SKIP + r"|[{}]", text[:this]):
        if match.group() == "{":
            opened.append(match.start())
        elif match.group() == "}" and opened:
            opened.pop()
    return (opened[0], this) if opened else None


def _mask_statement(text: str, offset: int) -> str | None:
    """Blank out (keeping newlines) the statement around a syntax error, so parsing can go on after it.

    In the header (`pipeline name "description"`), only what follows the error is blanked, so a stray
    token there does not hide the rest of the file.
    """
    starts = [s for s in _statement_starts(text) if s > 0]
    before = [s for s in starts if s <= offset]
    after = [s for s in starts if s > offset]
    if not before and not text.lstrip().startswith("pipeline"):
        return None
    begin, end = (before[-1] if before else offset), (after[0] if after else len(text))
    if begin == end:
        return None
    return text[:begin] + re.sub(r"[^\n]", " ", text[begin:end]) + text[end:]


def parse(text: str, file: str = "<string>") -> ir.Pipeline:
    """Parse .sbp text into IR, or raise PipelineError with every syntax error found.

    After a syntax error the broken statement is blanked out and parsing starts
    again, so one run reports every broken statement, not the first alone.
    """
    text = LONE_CR.sub("\n", text)  # old Mac line ends: one character for another, so offsets hold
    syntax: list[Diagnostic] = []
    attempt: str | None = text
    while attempt is not None and len(syntax) < MAX_SYNTAX_ERRORS:
        builder, lark = _parser()
        builder.file, builder.text, builder.errors = file, text, []
        try:
            with ir.gc_paused():
                # The inline transformer makes parse return what Builder.start builds, not lark's Tree.
                pipeline: ir.Pipeline = lark.parse(attempt)  # type: ignore[assignment]
        except UnexpectedInput as exc:
            offset = exc.pos_in_stream if exc.pos_in_stream is not None else len(text)
            unclosed = _unclosed_brace(attempt, offset) if isinstance(exc, UnexpectedToken) else None
            if unclosed:  # one error at the `{`, and parsing goes on from the statement after it
                opened, resume = unclosed
                line = text.count("\n", 0, resume) + 1
                message = f"this '{{' is never closed: add '}}' before line {line}"
                syntax.append(diagnostic("E009", point(file, text, opened), message))
                begin = attempt.rfind("\n", 0, opened) + 1  # the whole unclosed statement goes
                attempt = attempt[:begin] + re.sub(r"[^\n]", " ", attempt[begin:resume]) + attempt[resume:]
                continue
            found = _syntax_error(file, text, exc)
            if syntax and syntax[-1].span == found.span:
                break
            syntax.append(found)
            headerless = isinstance(exc, UnexpectedToken) and "PIPELINE" in _expected(exc)
            attempt = _mask_statement(attempt, offset) if offset < len(text) and not headerless else None
            continue
        pipeline = replace(pipeline, path=file, text=text)
        if syntax or builder.errors:
            raise PipelineError(syntax or builder.errors, text, partial=pipeline)
        return pipeline
    raise PipelineError(syntax, text)
