"""The package runs on the oldest Python pyproject.toml allows: it uses nothing newer than 3.10.
(The whole suite was run once on 3.10.13; this keeps the best-known newer APIs out meanwhile.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

import sembp_dsl

NEWER = {  # module -> names added after 3.10
    "asyncio": {"timeout", "timeout_at", "Timeout", "TaskGroup", "Runner"},
    "typing": {"Self", "Never", "LiteralString", "assert_never", "assert_type", "reveal_type", "TypeVarTuple"},
    "datetime": {"UTC"},
    "enum": {"StrEnum", "verify", "ReprEnum"},
    "contextlib": {"chdir"},
    "hashlib": {"file_digest"},
    "operator": {"call"},
}
NEWER_MODULES = {"tomllib", "wsgiref.types"}
NEWER_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}


def newer_uses(text: str, name: str) -> list[str]:
    """Every use of an API newer than Python 3.10 in this source, as `name:line: what`."""
    found = []
    for node in ast.walk(ast.parse(text)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in NEWER.get(node.value.id, ()):
                found.append(f"{where}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in NEWER:
            found += [
                f"{where}: from {node.module} import {a.name}" for a in node.names if a.name in NEWER[node.module]
            ]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            found += [f"{where}: import {m}" for m in modules if m in NEWER_MODULES]
        elif isinstance(node, ast.Name) and node.id in NEWER_BUILTINS:
            found.append(f"{where}: {node.id}")
        elif type(node).__name__ == "TryStar":
            found.append(f"{where}: except*")
    return found


def test_the_floor_is_python_3_10():
    project = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^requires-python = ">=3.10"$', project, re.M)
    assert re.search(r'^target-version = "py310"$', project, re.M)


def test_the_package_uses_nothing_newer_than_python_3_10():
    package = Path(sembp_dsl.__file__).parent
    found = [
        use
        for path in sorted(package.rglob("*.py"))
        for use in newer_uses(path.read_text(encoding="utf-8"), str(path.relative_to(package)))
    ]
    assert not found, found


def test_the_check_finds_what_it_looks_for():
    sample = """\
import asyncio, tomllib
from typing import Self
async def f():
    async with asyncio.timeout(1):
        raise ExceptionGroup("x", [])
"""
    assert [use.split(": ", 1)[1] for use in newer_uses(sample, "sample")] == [
        "import tomllib",
        "from typing import Self",
        "asyncio.timeout",
        "ExceptionGroup",
    ]
