"""File -> IR, whichever syntax the file is in; unreadable files become located errors, not tracebacks."""

from __future__ import annotations

import os
import stat

from . import ir
from .diagnostics import PipelineError, error, point
from .graph import Graph, build
from .parser import parse

SUFFIXES = (".sbp", ".yaml", ".yml")
MAX_FILE_BYTES = 64 * 2**20  # far beyond any real pipeline; its prompts could not be sent anyway


def read(path: str) -> str:
    """The file's text; PipelineError for a missing file, a directory, a FIFO or device (which could
    block forever), a file past MAX_FILE_BYTES, or bytes that are not UTF-8."""
    try:
        data = _read_regular(path)
    except IsADirectoryError:
        raise PipelineError([error(None, "is a directory, not a pipeline file", path)])
    except FileNotFoundError:
        raise PipelineError(
            [error(None, "no such file" + (" (a broken symbolic link)" if os.path.islink(path) else ""), path)]
        )
    except OSError as exc:
        raise PipelineError([error(None, f"cannot read: {exc.strerror or exc}", path)])
    try:
        return data.decode("utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8")
    except UnicodeDecodeError as exc:
        text = data[: exc.start].decode("utf-8", errors="replace")
        raise PipelineError(
            [error(point(path, text, len(text)), f"invalid UTF-8 (byte 0x{data[exc.start]:02x})")], text
        )


def _read_regular(path: str) -> bytes:
    """Open without blocking (a FIFO would wait for a writer), then refuse anything but a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise PipelineError([error(None, "is a directory, not a pipeline file", path)])
        if not stat.S_ISREG(info.st_mode):
            raise PipelineError(
                [error(None, "is not a regular file (a FIFO, socket or device?); give a pipeline file", path)]
            )
        if info.st_size > MAX_FILE_BYTES:
            raise PipelineError(
                [
                    error(
                        None,
                        f"is {info.st_size / 2**20:.1f} MB; a pipeline file may be at most"
                        f" {MAX_FILE_BYTES // 2**20} MB",
                        path,
                    )
                ]
            )
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # it grew while being read
        raise PipelineError([error(None, f"is larger than {MAX_FILE_BYTES // 2**20} MB", path)])
    return data


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
