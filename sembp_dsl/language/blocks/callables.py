"""How a pipeline names Python code, `"module:attr"`, and whether that module sits beside the pipeline, decided
without importing anything: reading, checking and compiling a pipeline never run code. runtime/code.py does the
importing, at run time, from the places this module finds (or those the user allows)."""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import os
import re
from typing import NamedTuple

MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
ATTR = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")  # one public name: no `os.system` through a module's imports


class Target(NamedTuple):
    """What `"tools:search"` names: the attribute `search` of the module `tools`."""

    module: str
    attr: str

    def __str__(self) -> str:
        return f"{self.module}:{self.attr}"


def parse_target(text: str) -> Target | str:
    """The module and attribute a `"module:attr"` string names, or (a str) why it names none."""
    module, colon, attr = text.partition(":")
    if not colon:
        return f'{text!r} names no callable: write it as "module:name", e.g. "tools:search"'
    if not MODULE.match(module):
        return f"{module!r} is not a module name (dotted Python names only, no path and no leading dot)"
    if not ATTR.match(attr):
        return f"{attr!r} is not a public name in a module (one name, not starting with '_')"
    return Target(module, attr)


class Place(NamedTuple):
    """Where a module would be imported from beside a pipeline: its file, or why that file may not be used."""

    path: str | None  # tools.py or tools/__init__.py in the pipeline's folder; None when not there
    problem: str | None = None  # a file that is there but may not be used (a symbolic link out of the folder)


def beside(folder: str, module: str) -> Place:
    """The file of `module` in a pipeline's folder: `tools` is tools.py, or the package tools/. Only a
    top-level name is looked up there (a dotted one runs only when the user allows it). A file whose real place
    is outside the folder (a symbolic link out of it) is named with a problem, never a path, and so is a module
    whose imports, read (not run), reach such a file beside it: every module loaded from the folder is held to
    the folder (runtime/code.py holds imports that reading cannot see to it as they run)."""
    if "." in module:
        return Place(None)
    home = os.path.realpath(folder)
    place = _module_file(folder, module, home)
    if place.path is None:
        return place
    problem = _linked_out(place.path, folder, home)
    return Place(None, problem) if problem else place


def outside(home: str, path: str) -> str | None:
    """Where `path` really is, when that is outside the folder `home` (a real path): a symbolic link out of it."""
    real = os.path.realpath(path)
    return real if os.path.commonpath([home, real]) != home else None


def _module_file(folder: str, module: str, home: str) -> Place:
    for candidate in (os.path.join(folder, module + ".py"), os.path.join(folder, module, "__init__.py")):
        if not os.path.isfile(candidate):
            continue
        real = outside(home, candidate)
        if real is not None:
            return Place(None, f"{candidate} is a symbolic link to {real}, outside the pipeline's folder")
        return Place(candidate)
    return Place(None)


def _linked_out(path: str, folder: str, home: str) -> str | None:
    """Why a module file beside the pipeline may not run: a module it imports (or they import), in the folder or
    in its own package, is a symbolic link out of the folder. None when none is."""
    seen, todo = {path}, [path]
    while todo:
        current = todo.pop()
        for where, name in _imports(current, folder):
            place = _module_file(where, name, home)
            if place.problem:
                return f"{os.path.basename(current)} imports {name}, and {place.problem}"
            if place.path is not None and place.path not in seen:
                seen.add(place.path)
                todo.append(place.path)
    return None


def _imports(path: str, folder: str) -> set[tuple[str, str]]:
    """The (folder, top-level name) of each module a Python file imports, read without running it: absolute
    imports are looked for in the pipeline's folder, relative ones in the file's package."""
    try:
        with open(path, "rb") as file:  # bytes: read as Python reads a module (a BOM, a `coding:` line)
            imported = _imported(file.read())
    except OSError:  # the import itself will say what is wrong
        return set()
    found = set()
    for level, names in imported:
        package = folder
        if level:
            package = os.path.dirname(path)
            for _ in range(level - 1):
                package = os.path.dirname(package)
        found |= {(package, name) for name in names}
    return found


@functools.lru_cache(maxsize=32)
def _imported(source: bytes) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """Each import statement of a module's source, as (its level, the top-level names it imports), parsed once
    per source: a module of 600 tools was parsed twice for each of them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the import itself will say what is wrong
        return ()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.append((0, tuple(alias.name.split(".")[0] for alias in node.names)))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((0, (node.module.split(".")[0],)))
        elif isinstance(node, ast.ImportFrom):
            names = [node.module.split(".")[0]] if node.module else [alias.name for alias in node.names]
            found.append((node.level, tuple(names)))
    return tuple(found)


def allowed_by(module: str, allowed: tuple[str, ...] | list[str] | frozenset[str]) -> str | None:
    """The allowed module name that covers `module` (itself, or a package holding it), or None."""
    return next((name for name in allowed if module == name or module.startswith(name + ".")), None)


def compiled(module: str) -> str | None:
    """Why an importable module has no Python source to read a tool's signature from (built into Python, or a
    compiled extension), found as an import would find it but without running any of it (a package's
    `__init__` included); None when it has source, or is not found."""
    if "." not in module and importlib.machinery.BuiltinImporter.find_spec(module) is not None:
        return f"module '{module}' is built into Python"
    spec, search = None, None
    for depth in range(module.count(".") + 1):
        name = ".".join(module.split(".")[: depth + 1])
        spec = importlib.machinery.PathFinder.find_spec(name, search)
        if spec is None:
            return None
        search = spec.submodule_search_locations
    if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return f"module '{module}' is compiled ({os.path.basename(spec.origin or '')})"
    return None
