"""Import the Python callables a pipeline names, only from where the user allowed it.

A pipeline file is data from strangers: naming a module in it is not enough to run that module. Checking and
compiling never import (language/blocks/callables.py reads the names). At run time (`sbpc run`/`eval`/`optimize`,
`sembp_dsl.load`), `"module:name"` is imported only

- from the pipeline's own folder: `tools:search` beside rag.sbp is the tools.py (or package tools/) in rag.sbp's
  folder, loaded from that file under a private module name, so a tools.py there never stands in for an
  installed module nor an installed one for it; the callable must be defined in that module, not imported
  into it (`from os import system` in tools.py does not make `tools:system` runnable); or
- from a module the user named: `--allow-module NAME` (repeatable) on the command line, `allow_modules=[NAME]`
  for `sembp_dsl.load`; NAME and the modules of the package NAME are then imported by Python's usual rules.

Callables handed over directly (`sembp_dsl.load(path, functions={"search": fn})`) need no import at all.
Anything else (`os:system`, `subprocess:run`, a symbolic link out of the folder) is refused with a CodeError
saying why and what to do.

    fn = load_callable("tools:search", folder="pipelines", allowed=("mylib",))  # or CodeError
    found = load_callables({"search": ("tools:search", span)}, folder, allowed, text)  # or PipelineError
    graph = bind(graph, given={"search": fn}, allowed=("mylib",))  # a graph whose function nodes can run
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from types import ModuleType
from typing import Any, NamedTuple

from ..errors import SbpcError
from ..language.blocks.callables import Target, allowed_by, beside, outside, parse_target
from ..language.diagnostics import PipelineError, diagnostic, did_you_mean
from ..language.graph.graph import Graph
from ..language.ir import Span
from ..language.kinds import kind_of
from ..language.kinds.agent.toolbox import declared_tools, timeout
from ..language.mcp_servers import is_server_tool
from ..usercode import user_output

REFUSED, UNLOADABLE = "E083", "E084"  # the module may not be imported; it may, but gives no callable
_IMPORTING = threading.Lock()  # imports change sys.path and sys.modules: one at a time


class CodeError(SbpcError):
    """A callable that may not be imported (`code` REFUSED), or that could not be (UNLOADABLE)."""

    def __init__(self, code: str, message: str, help: str = ""):
        super().__init__(message + (f" ({help})" if help else ""))
        self.code, self.message, self.help = code, message, help


class Source(NamedTuple):
    """Where a callable will be imported from, decided before anything is: a file beside the pipeline, or an
    allowed module by name."""

    target: Target
    path: str | None  # the module's file in the pipeline's folder; None: import `target.module` by name


def locate(text: str, folder: str, allowed: Collection[str] = ()) -> Source:
    """Where `"module:name"` may be imported from, without importing it; CodeError when from nowhere."""
    target = parse_target(text)
    if isinstance(target, str):
        raise CodeError(REFUSED, target)
    place = beside(folder, target.module)
    if place.problem:
        raise CodeError(REFUSED, place.problem, "copy the module into the pipeline's folder, or allow it by name")
    if place.path is None and not allowed_by(target.module, tuple(allowed)):
        where = os.path.join(folder or ".", target.module.split(".")[0])
        raise CodeError(
            REFUSED,
            f"module '{target.module}' is not beside the pipeline (no {where}.py) and was not allowed to run",
            f"if you trust it: --allow-module {target.module} (in Python, load(..., allow_modules="
            f"['{target.module}'])), or pass the callable itself: load(..., functions={{NAME: fn}})",
        )
    return Source(target, place.path)


def load_callable(text: str, folder: str, allowed: Collection[str] = ()) -> Callable[..., Any]:
    """The callable `"module:name"` names, imported from the pipeline's `folder` or from an `allowed` module."""
    return _load(locate(text, folder, allowed), folder)


def _load(source: Source, folder: str) -> Callable[..., Any]:
    target = source.target
    module = _import(target.module) if source.path is None else _from_file(source.path, folder)
    value = getattr(module, target.attr, None)
    if value is None:
        raise CodeError(UNLOADABLE, f"module '{target.module}' has no '{target.attr}'")
    if not callable(value):
        raise CodeError(UNLOADABLE, f"'{target}' is a {type(value).__name__}, not something that can be called")
    origin = getattr(value, "__module__", None)
    if source.path is not None and origin != module.__name__:
        raise _reexported(source, str(origin or ""), module.__name__, folder)
    return value


def _reexported(source: Source, origin: str, private: str, folder: str) -> CodeError:
    """The refusal of a callable a module beside the pipeline imports from elsewhere, with a fix a user can write:
    name the neighbour that defines it, or define one in the module, or allow the module it comes from."""
    target = source.target
    if origin.startswith(private + "."):  # a module of the package beside the pipeline, under its private name
        origin = target.module + origin[len(private) :]
    if origin and "." not in origin and beside(folder, origin).path is not None:
        fix = f'name the module that defines it: "{origin}:{target.attr}"'
    elif origin.startswith(target.module + "."):
        fix = f"define a function in {source.path} that calls it"
    else:
        fix = f"define a function there that calls it, or allow its module: --allow-module {origin or 'NAME'}"
    where = origin or "elsewhere"
    return CodeError(
        REFUSED, f"'{target.attr}' is not defined in {source.path} but imported into it (from {where})", fix
    )


def load_callables(
    wanted: Mapping[str, tuple[str, Span | None]], folder: str, allowed: Collection[str], text: str | None
) -> dict[str, Callable[..., Any]]:
    """Every callable named (name -> its `"module:name"` and where the file says it), or one PipelineError
    locating each that cannot be had (`text`: the file the spans point into). When any is refused, none is
    imported."""
    sources, problems = {}, []
    for name, (target, span) in wanted.items():
        try:
            sources[name] = locate(target, folder, allowed)
        except CodeError as exc:
            problems.append(diagnostic(exc.code, span, exc.message, help=exc.help))
    found = {}
    for name, source in sources.items() if not problems else ():
        try:
            found[name] = _load(source, folder)
        except CodeError as exc:
            problems.append(diagnostic(exc.code, wanted[name][1], exc.message, help=exc.help))
    if problems:
        raise PipelineError(problems, text)
    return found


def bind(graph: Graph, given: Mapping[str, Callable[..., Any]] | None = None, allowed: Collection[str] = ()) -> Graph:
    """The graph with the callable of every function its nodes call: those `given` as they are, the others
    imported by `load_callables` from beside the pipeline or from `allowed` modules. A function no node calls
    is never imported."""
    given = dict(given or {})
    declared = {f.name: f for f in graph.pipeline.functions}
    for name, function in given.items():
        if name not in declared:
            listed = f"it declares {', '.join(declared)}" if declared else "it declares none"
            raise ValueError(
                f"functions[{name!r}]: the pipeline declares no function '{name}'{did_you_mean(name, declared)} ({listed})"
            )
        if not callable(function):
            raise TypeError(f"functions[{name!r}] must be callable, got {type(function).__name__}")
    called = {name for node in graph.pipeline.nodes for name in kind_of(node).functions(node)}
    wanted = {name: (f.target, f.literal) for name, f in declared.items() if name in called and name not in given}
    folder = os.path.dirname(os.path.abspath(graph.pipeline.path))
    found = load_callables(wanted, folder, allowed, graph.pipeline.text) if wanted else {}
    served = {name for name in called if is_server_tool(name) and name not in given}
    if served:  # started before any model call: one that cannot start, or whose tools changed, stops the run here
        from .mcp_client import connect  # the mcp package: only a pipeline with MCP servers imports it

        tools = declared_tools(graph.pipeline)
        found.update(connect(graph.pipeline, served, {name: timeout(tools[name]) for name in served}))
    return graph.with_functions({**given, **found})


def release(graph: Graph) -> None:
    """Stop the MCP servers whose tools the graph was bound to (a later call starts them again)."""
    for function in graph.functions.values():
        close = getattr(function, "close", None)
        if getattr(function, "answer_grace", None) is not None and callable(close):  # a server's tool
            close()


def _import(name: str) -> ModuleType:
    """An allowed module, by Python's rules; what its import raises is the user's to see, not a traceback."""
    with _IMPORTING:
        try:
            with user_output():
                return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise CodeError(UNLOADABLE, f"no module named '{exc.name or name}' can be imported") from None
        except (Exception, SystemExit) as exc:
            raise CodeError(UNLOADABLE, f"importing '{name}' failed: {type(exc).__name__}: {exc}") from None


def _from_file(path: str, folder: str) -> ModuleType:
    """The module in a pipeline's folder, under a name of its own (one per real file, imported once); the folder
    is on sys.path while it is imported, so it may import its neighbours."""
    real = os.path.realpath(path)
    package = os.path.basename(real) == "__init__.py"
    name = "_sbpc_code_" + hashlib.sha1(real.encode()).hexdigest()[:16]
    with _IMPORTING:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(
            name, real, submodule_search_locations=[os.path.dirname(real)] if package else None
        )
        if spec is None or spec.loader is None:
            raise CodeError(UNLOADABLE, f"{path} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        home = os.path.realpath(folder or ".")
        sys.path.insert(0, home)
        held = _HeldToFolder(home)
        sys.meta_path.insert(0, held)
        try:
            with user_output():  # what it prints on import goes to stderr, like what its functions print
                spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:
            del sys.modules[name]
            if held.refused:
                raise CodeError(REFUSED, held.refused, "copy the module into the pipeline's folder") from None
            raise CodeError(UNLOADABLE, f"importing {path} failed: {type(exc).__name__}: {exc}") from None
        finally:
            sys.path.remove(home)
            sys.meta_path.remove(held)
        return module


class _HeldToFolder(importlib.abc.MetaPathFinder):
    """While a pipeline's module loads, every module found in its folder is held to the rule the named one is: a
    file that is a symbolic link out of the folder does not run (an import reading could not see: importlib,
    __import__ with a computed name). Other modules are left to the usual finders."""

    def __init__(self, home: str):
        self.home = home
        self.refused: str | None = None  # why an import was refused (the module may have caught the ImportError)

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = spec.origin if spec is not None else None
        if origin and os.path.commonpath([self.home, os.path.abspath(origin)]) == self.home:
            real = outside(self.home, origin)
            if real is not None:
                self.refused = f"{origin} is a symbolic link to {real}, outside the pipeline's folder"
                raise ImportError(self.refused, name=name)
        return None
