"""File -> IR, whichever syntax the file is in; unreadable files become located errors, not tracebacks."""

from __future__ import annotations

from pathlib import Path

from . import ir
from .diagnostics import PipelineError, error, point
from .graph import Graph, build
from .parser import parse

SUFFIXES = (".sbp", ".yaml", ".yml")


def read(path: str) -> str:
    """The file's text; PipelineError for a missing file, a directory, or bytes that are not UTF-8."""
    file = Path(path)
    try:
        data = file.read_bytes()
    except IsADirectoryError:
        raise PipelineError([error(None, "is a directory, not a pipeline file", path)])
    except FileNotFoundError:
        raise PipelineError([error(None, "no such file", path)])
    except OSError as exc:
        raise PipelineError([error(None, f"cannot read: {exc.strerror or exc}", path)])
    try:
        return data.decode("utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8")
    except UnicodeDecodeError as exc:
        text = data[: exc.start].decode("utf-8", errors="replace")
        raise PipelineError([error(point(path, text, len(text)), f"invalid UTF-8 (byte 0x{data[exc.start]:02x})")], text)


def load(path: str) -> ir.Pipeline:
    """Parse a .sbp or YAML pipeline file into IR (not yet checked)."""
    return parse_text(read(path), path)


def parse_text(text: str, path: str) -> ir.Pipeline:
    """Parse text in the syntax its file name says."""
    if path.endswith((".yaml", ".yml")):
        from .yaml_form import parse_yaml  # jsonschema is slow to import; .sbp users never pay for it

        return parse_yaml(text, path)
    if not path.endswith(".sbp"):
        raise PipelineError([error(None, f"unknown kind of file; expected one of {', '.join(SUFFIXES)}", path)])
    return parse(text, path)


def compile_file(path: str) -> Graph:
    """Load, check and compile a pipeline file (warnings ride along on `Graph.warnings`)."""
    return build(load(path))
