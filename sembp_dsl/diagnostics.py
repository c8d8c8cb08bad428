"""Located messages, rendered the way compilers do: `file:line:col: error: ...`, source line, caret."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .ir import Span


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning"
    message: str
    span: Span | None
    file: str = ""

    def render(self, text: str | None) -> str:
        if self.span is None:
            return f"{self.file}: {self.severity}: {self.message}"
        span = self.span
        head = f"{span.file}:{span.line}:{span.column}: {self.severity}: {self.message}"
        lines = (text or "").split("\n")
        if not 0 < span.line <= len(lines):
            return head
        source = lines[span.line - 1].rstrip("\r").expandtabs(1)
        width = span.end_column - span.column if span.end_line == span.line else len(source) - span.column + 1
        gutter = f"{span.line:>5} | "
        caret = " " * (span.column - 1) + "^" + "~" * max(0, min(width, 80) - 1)
        return f"{head}\n{gutter}{source}\n{' ' * (len(gutter) - 2)}| {caret}"


class PipelineError(Exception):
    """Raised with every diagnostic found, so callers can report them all at once."""

    def __init__(self, diagnostics: list[Diagnostic], text: str | None = None):
        super().__init__(diagnostics[0].message if diagnostics else "invalid pipeline")
        self.diagnostics = diagnostics
        self.text = text

    def render(self) -> str:
        return "\n".join(d.render(self.text) for d in self.diagnostics)


def point(file: str, text: str, offset: int, length: int = 1) -> Span:
    """A span from a character offset, for errors that only know where they are in the text."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Span(file, line, column, line, column + length, offset, offset + length)


def error(span: Span | None, message: str, file: str = "") -> Diagnostic:
    return Diagnostic("error", message, span, file or (span.file if span else ""))


def warning(span: Span | None, message: str) -> Diagnostic:
    return Diagnostic("warning", message, span, span.file if span else "")


def did_you_mean(name: str, candidates) -> str:
    """`; did you mean 'x'?` for the closest candidate, or nothing when none is close."""
    close = difflib.get_close_matches(name, [str(c) for c in candidates], n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def one_of(name: str, what: str, candidates) -> str:
    """`unknown setting 'x'; did you mean 'y'?`, or the full list when nothing is close."""
    hint = did_you_mean(name, candidates)
    return f"unknown {what} '{name}'" + (hint or f"; expected one of {', '.join(map(str, candidates))}")
