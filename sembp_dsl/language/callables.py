"""How a pipeline names Python code, `"module:attr"`, and whether that module sits beside the pipeline, decided
without importing anything: reading, checking and compiling a pipeline never run code. runtime/code.py does the
importing, at run time, from the places this module finds (or those the user allows)."""

from __future__ import annotations

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
    top-level name is looked up there (a dotted one runs only when the user allows it), and a file whose real
    place is outside the folder (a symbolic link out of it) is named with a problem, never a path."""
    if "." in module:
        return Place(None)
    home = os.path.realpath(folder)
    for candidate in (os.path.join(folder, module + ".py"), os.path.join(folder, module, "__init__.py")):
        if not os.path.isfile(candidate):
            continue
        real = os.path.realpath(candidate)
        if os.path.commonpath([home, real]) != home:
            return Place(None, f"{candidate} is a symbolic link to {real}, outside the pipeline's folder")
        return Place(candidate)
    return Place(None)


def allowed_by(module: str, allowed: tuple[str, ...] | list[str] | frozenset[str]) -> str | None:
    """The allowed module name that covers `module` (itself, or a package holding it), or None."""
    return next((name for name in allowed if module == name or module.startswith(name + ".")), None)
