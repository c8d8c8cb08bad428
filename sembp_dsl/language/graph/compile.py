"""File -> diagnostics or Graph: the whole way through the stages, as `sbpc check` and `compile` take it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from .. import ir
from ..blocks.callables import allowed_by, beside, compiled, parse_target
from ..blocks.data import FieldsOf, check_data_fields
from ..check.checker import check
from ..diagnostics import Diagnostic, PipelineError, diagnostic
from ..kinds import kind_of
from ..syntax.source import load, parse_text, read
from .graph import Graph, build, model_specs

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
