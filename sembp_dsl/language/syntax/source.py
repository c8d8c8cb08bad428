"""File -> IR, whichever syntax the file is in; unreadable files become located errors, not tracebacks."""

from __future__ import annotations

import os
import stat

from ...files import interrupted_write
from .. import ir
from ..diagnostics import PipelineError, diagnostic, point
from .parser import parse

SUFFIXES = (".sbp", ".yaml", ".yml")
MAX_FILE_BYTES = 64 * 2**20  # far beyond any real pipeline; its prompts could not be sent anyway


def read(path: str) -> str:
    """The file's text; PipelineError for a missing file, a directory, a FIFO or device (which could
    block forever), a file past MAX_FILE_BYTES, a write to it that was killed midway, or bytes that are
    not UTF-8."""
    torn = interrupted_write(path)
    if torn:
        raise PipelineError(
            [
                diagnostic(
                    "E016",
                    None,
                    f"an earlier write to this file was interrupted, so it may hold part new and part old text; "
                    f"{torn} holds the complete text that was being written. Keep the right one "
                    f"(cp {torn} {path} && rm {torn}, which keeps the hard links; or rm {torn}), then run again",
                    file=path,
                )
            ]
        )
    try:
        data = _read_regular(path)
    except IsADirectoryError:
        raise PipelineError([diagnostic("E011", None, "is a directory, not a pipeline file", file=path)])
    except FileNotFoundError:
        broken = " (a broken symbolic link)" if os.path.islink(path) else ""
        raise PipelineError([diagnostic("E010", None, "no such file" + broken, file=path)])
    except OSError as exc:
        raise PipelineError([diagnostic("E013", None, f"cannot read: {exc.strerror or exc}", file=path)])
    try:
        return data.decode("utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8")
    except UnicodeDecodeError as exc:
        text = data[: exc.start].decode("utf-8", errors="replace")
        raise PipelineError(
            [diagnostic("E014", point(path, text, len(text)), f"invalid UTF-8 (byte 0x{data[exc.start]:02x})")], text
        )


def _read_regular(path: str) -> bytes:
    """Open without blocking (a FIFO would wait for a writer), then refuse anything but a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise PipelineError([diagnostic("E011", None, "is a directory, not a pipeline file", file=path)])
        if not stat.S_ISREG(info.st_mode):
            raise PipelineError(
                [
                    diagnostic(
                        "E011",
                        None,
                        "is not a regular file (a FIFO, socket or device?); give a pipeline file",
                        file=path,
                    )
                ]
            )
        if info.st_size > MAX_FILE_BYTES:
            raise PipelineError(
                [
                    diagnostic(
                        "E012",
                        None,
                        f"is {info.st_size / 2**20:.1f} MB; a pipeline file may be at most"
                        f" {MAX_FILE_BYTES // 2**20} MB",
                        file=path,
                    )
                ]
            )
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # it grew while being read
        raise PipelineError([diagnostic("E012", None, f"is larger than {MAX_FILE_BYTES // 2**20} MB", file=path)])
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
        raise PipelineError(
            [diagnostic("E015", None, "unknown kind of file", file=path, help=f"expected one of {', '.join(SUFFIXES)}")]
        )
    return parse(text, path)
