"""Located messages, rendered the way compilers do: `file:line:col: error[E022]: ...`, source line, caret,
then a `help:` line and `note:`s at related places. The codes and what they mean are in codes/."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import urlsplit

from ..errors import SbpcError
from .codes import CODES
from .ir import Pipeline, Span

SOURCE_CONTEXT = 60  # characters of a long source line shown either side of the error
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # in a prompt: garbage to a model, escapes to a terminal
SURROGATE = re.compile("[\ud800-\udfff]")  # half a UTF-16 pair: no character, and no file or model accepts it


@dataclass(frozen=True)
class Note:
    """A place related to a diagnostic, such as the first declaration of a duplicate."""

    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning"
    message: str
    span: Span | None
    file: str = ""
    code: str = ""  # E0xx / W0xx, see codes/ and `sbpc explain`
    help: str = ""  # what to do: "did you mean 'x'?", the names allowed
    notes: tuple[Note, ...] = ()

    def render(self, text: str | None) -> str:
        """`file:line:col: error[E022]: message`, the source line with a caret under the span, a `help:` line,
        then each note with its own caret. A hostile file must not drive the terminal: control and
        invisible characters are shown escaped, long lines cut."""
        kind = f"{self.severity}[{self.code}]" if self.code else self.severity
        out = [_located(self.span, self.file, kind, self.message, text)]
        if self.help:
            out.append(visible(f"{' ' * 6}= help: {self.help}"))
        out += [_located(note.span, self.file, "note", note.message, text) for note in self.notes]
        return "\n".join(out)


def _located(span: Span | None, file: str, kind: str, message: str, text: str | None) -> str:
    if span is None:
        return visible(f"{file}: {kind}: {message}")
    head = visible(f"{span.file}:{span.line}:{span.column}: {kind}: {message}")
    lines = (text or "").split("\n")
    if not 0 < span.line <= len(lines):
        return head
    raw = lines[span.line - 1].rstrip("\r")
    column = min(span.column - 1, len(raw))
    width = span.end_column - span.column if span.end_line == span.line else len(raw) - column
    first = max(0, column - SOURCE_CONTEXT)
    before = visible(raw[first:column].expandtabs(1))
    marked = visible(raw[column : column + max(1, width)].expandtabs(1))
    after = visible(raw[column + max(1, width) :][:SOURCE_CONTEXT].expandtabs(1))
    cut_before, cut_after = (
        ("..." if first else ""),
        ("..." if len(raw) > column + max(1, width) + SOURCE_CONTEXT else ""),
    )
    gutter = f"{span.line:>5} | "
    caret = " " * (len(cut_before) + len(before)) + "^" + "~" * max(0, min(len(marked), 80) - 1)
    return (
        f"{head}\n{gutter}{cut_before}{before}{marked[:80]}{after if len(marked) <= 80 else ''}{cut_after}\n"
        f"{' ' * (len(gutter) - 2)}| {caret}"
    )


class PipelineError(SbpcError):
    """Raised with every diagnostic found, so callers can report them all at once. `partial` is what did
    parse of a file with broken statements (those left out, every span still true), for an editor."""

    def __init__(self, diagnostics: list[Diagnostic], text: str | None = None, partial: Pipeline | None = None):
        # str() names where, as `sbpc check` would (a log line "no such file" says not which); render() gives all
        super().__init__(diagnostics[0].render(None).splitlines()[0] if diagnostics else "invalid pipeline")
        self.diagnostics = diagnostics
        self.text = text
        self.partial = partial

    def render(self) -> str:
        return "\n".join(d.render(self.text) for d in self.diagnostics)


def visible(text: str) -> str:
    """Text safe to print: escape sequences, bidi overrides and other invisible characters written out."""
    return INVISIBLE.sub(lambda m: ascii(m.group())[1:-1], text)


def for_terminal(text: str, stream: TextIO) -> str:
    """Strangers' text (model replies, data, function outputs) as printed to `stream`: `visible` on a terminal,
    which their escape sequences would drive; exact when piped, for the script that reads it, but for a lone
    surrogate (a reply's `\\ud800`: half a UTF-16 pair, which no UTF-8 stream can write), written as its escape."""
    shown = visible(text) if stream.isatty() else text
    try:
        shown.encode("utf-8")
    except UnicodeEncodeError:
        return shown.encode("utf-8", "backslashreplace").decode("utf-8")
    return shown


def point(file: str, text: str, offset: int, length: int = 1) -> Span:
    """A span from a character offset, for errors that only know where they are in the text."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Span(file, line, column, line, column + length, offset, offset + length)


def diagnostic(
    code: str, span: Span | None, message: str, *, file: str = "", help: str = "", notes: Iterable[Note] = ()
) -> Diagnostic:
    """A diagnostic with its code (codes/); the code says whether it is an error or a warning."""
    return Diagnostic(
        CODES[code].severity, message, span, file or (span.file if span else ""), code, help, tuple(notes)
    )


def suggestion(name: str, candidates: Iterable) -> str:
    """`did you mean 'x'?` for the closest candidate, or nothing when none is close."""
    close = difflib.get_close_matches(name, [str(c) for c in candidates], n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def suggestion_or_list(name: str, candidates) -> str:
    """A help line for an unknown name: the closest candidate, or every one when none is close."""
    return suggestion(name, candidates) or f"expected one of {', '.join(map(str, candidates))}"


def did_you_mean(name: str, candidates: Iterable) -> str:
    """`; did you mean 'x'?` to end an exception's message, or nothing when no candidate is close."""
    hint = suggestion(name, candidates)
    return f"; {hint}" if hint else ""


def one_of(name: str, what: str, candidates, where: str = "") -> str:
    """`unknown model group 'x'; did you mean 'y'?`, or the full list when nothing is close (an exception's
    message; a diagnostic gives the second half as its help)."""
    return f"unknown {what} '{name}'{where}; {suggestion_or_list(name, candidates)}"


def string_problem(text: str) -> tuple[str, str] | None:
    """Why a string from a pipeline file cannot be a prompt, as (code, message): a lone surrogate or a
    control character."""
    if SURROGATE.search(text):
        return "E008", "a \\u escape in this string is half a surrogate pair, not a character"
    control = CONTROL.search(text)
    if control:
        return "E007", f"control character {ascii(control.group())[1:-1]} in a string; pipelines hold text"
    return None


def bad_characters(text: str) -> str | None:
    """string_problem's message alone, for text that is no file's (an optimizer's candidate prompt)."""
    problem = string_problem(text)
    return problem[1] if problem else None


def url_problem(text: str) -> str | None:
    """Why `text` is no address a model request can go to, in words that never quote it (it may hold
    credentials); None for an http(s) URL with a host and a valid port."""
    try:
        parts = urlsplit(text.strip())
        if parts.scheme not in ("http", "https"):
            if "://" in text:
                return "must start with http:// or https://"
            return "has no scheme: add http:// (or https://), e.g. http://127.0.0.1:8000/v1"
        if not parts.hostname:
            return "names no host: write it as http://HOST:PORT/v1"
        parts.port  # noqa: B018 (parsed on access: out of range or not a number raises)
    except ValueError:
        return "has a port that is not a number from 0 to 65535"
    return None


def as_json(d: Diagnostic) -> dict:
    """A diagnostic as `sbpc check --json` prints it: lines and columns 1-based, the end exclusive."""

    def where(span: Span | None) -> dict:
        keys = ("line", "column", "end_line", "end_column")
        return dict(zip(keys, (span.line, span.column, span.end_line, span.end_column) if span else (None,) * 4))

    return {
        "severity": d.severity,
        "code": d.code,
        "message": d.message,
        **where(d.span),
        "help": d.help or None,
        "notes": [{"message": n.message, **where(n.span)} for n in d.notes],
    }


def json_text(value) -> str:
    """JSON for a terminal: text kept as it is, but what would steer the terminal or cannot be printed
    (control characters, bidi overrides, lone surrogates: replies are strangers' data) written as \\u escapes,
    so the JSON stays valid and reads back to the same strings."""
    return INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, indent=2, ensure_ascii=False))
