"""File -> IR, whichever syntax the file is in; unreadable files become located errors, not tracebacks."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import NamedTuple

from ..files import interrupted_write
from . import ir
from .callables import allowed_by, beside, compiled, parse_target
from .checker import check
from .data import FieldsOf, check_data_fields
from .diagnostics import Diagnostic, PipelineError, diagnostic, point
from .graph import Graph, build, model_specs
from .kinds import kind_of
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


#: What makes a router file (the path a model block's `router` names) unusable, None when it is not.
RouterCheck = Callable[[str, tuple[str, ...]], "str | None"]


class Diagnosis(NamedTuple):
    """What `sbpc check` finds in a text: every diagnostic, the text their spans point into (lone carriage
    returns made newlines), and the IR of what parsed (without broken statements; None when nothing did)."""

    diagnostics: list[Diagnostic]
    text: str | None
    pipeline: ir.Pipeline | None


def diagnose(
    text: str,
    path: str,
    router_problem: RouterCheck | None = None,
    allowed: tuple[str, ...] = (),
    fields_of: FieldsOf | None = None,
) -> Diagnosis:
    """What `sbpc check` reports on this text, in the syntax its file name says. With `router_problem`, the
    router files the model blocks name (beside the pipeline) are checked too; with `fields_of`, the data file its
    data block names. The modules of its functions are
    looked for beside it (never imported): one a run would refuse, being neither there nor `allowed`, is named."""
    try:
        pipeline = parse_text(text, path)
    except PipelineError as exc:
        return Diagnosis(exc.diagnostics, exc.text if exc.text is not None else text, exc.partial)
    diagnostics = check(pipeline)[1]
    if router_problem is not None:
        diagnostics.extend(router_places(pipeline, path, router_problem))
    diagnostics.extend(module_places(pipeline, path, allowed))
    if fields_of is not None:
        diagnostics.extend(check_data_fields(pipeline, fields_of))
    return Diagnosis(diagnostics, pipeline.text, pipeline)


def router_places(pipeline: ir.Pipeline, path: str, router_problem: RouterCheck) -> list[Diagnostic]:
    """Each router file a model block names, asked what a run would: that it reads, and that it defines
    the model groups the models routed through it name."""
    specs = model_specs(pipeline).values()
    found = []
    for block in pipeline.blocks:
        for s in block.settings:
            if block.kind == "model" and s.key == "router" and isinstance(s.value, str):
                groups = tuple(sorted({m.name for m in specs if m.name and m.settings.get("router") == s.value}))
                problem = router_problem(os.path.join(os.path.dirname(os.path.abspath(path)), s.value), groups)
                if problem:
                    found.append(diagnostic("E070", s.value_span, problem, file=path))
    return found


def module_places(pipeline: ir.Pipeline, path: str, allowed: tuple[str, ...]) -> list[Diagnostic]:
    """Where the modules of a pipeline's functions would come from, found without importing: a symbolic link out
    of its folder is an error, a module neither beside it nor `allowed` a warning (a run refuses both). A function
    no node calls is never imported, so not looked for."""
    folder = os.path.dirname(os.path.abspath(path))
    called = {name for node in pipeline.nodes for name in kind_of(node).functions(node)}
    found = []
    for function in pipeline.functions:
        target = parse_target(function.target)
        if function.name not in called or isinstance(target, str):
            continue
        if allowed_by(target.module, allowed):
            found.extend(unreadable_tool(pipeline, function, target.module, path))
            continue
        place = beside(folder, target.module)
        if place.problem:
            found.append(diagnostic("E083", function.literal, place.problem, file=path))
        elif place.path is None:
            message = (
                f"module '{target.module}' is not beside the pipeline: run, eval and optimize refuse it unless "
                f"allowed (--allow-module {target.module})"
            )
            found.append(diagnostic("W009", function.literal, message, file=path))
    return found


def unreadable_tool(pipeline: ir.Pipeline, function: ir.Function, module: str, path: str) -> list[Diagnostic]:
    """A tool in an allowed module that has no Python source (`"math:sqrt"`): a tool's schema is read from its
    signature, so a run could offer it to no model."""
    tools = {name for node in pipeline.nodes if kind_of(node).name == "tools" for name in kind_of(node).functions(node)}
    problem = compiled(module) if function.name in tools else None
    if problem is None:
        return []
    message = (
        f"function '{function.name}' cannot be a tool: {problem}, with no Python source to read its signature from"
    )
    return [diagnostic("E112", function.literal, message, file=path)]


def diagnose_file(
    path: str,
    router_problem: RouterCheck | None = None,
    allowed: tuple[str, ...] = (),
    fields_of: FieldsOf | None = None,
) -> Diagnosis:
    """What `sbpc check` reports on a file, unreadable files included."""
    try:
        text = read(path)
    except PipelineError as exc:
        return Diagnosis(exc.diagnostics, exc.text, None)
    return diagnose(text, path, router_problem, allowed, fields_of)


def compile_file(path: str) -> Graph:
    """Load, check and compile a pipeline file (warnings ride along on `Graph.warnings`)."""
    return build(load(path))
