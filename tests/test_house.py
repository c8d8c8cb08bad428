"""House rules held over every module of sembp_dsl: no function over cyclomatic complexity 20 or 80 lines (as
radon measures them), no module over 800 lines, no import inside a function without a comment, on its line or
the line above, saying why it is not at the top of the module (a measured startup cost, an optional extra), and a
front door (`Pipeline`) that stays a front door: under 300 lines, its rules (splits, sessions, scoring, records) in
their own homes."""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

PACKAGE = Path(__file__).resolve().parents[1] / "sembp_dsl"
MAX_COMPLEXITY = 20
MAX_LINES = 80
MAX_PIPELINE_LINES = 300
MAX_MODULE_LINES = 800


def modules() -> Iterator[tuple[str, str]]:
    """(dotted name, source) of every module of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path.read_text(encoding="utf-8")


def functions(blocks: list, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method radon sees, nested ones named after the function holding them."""
    for block in blocks:
        if isinstance(block, Function):
            name = f"{prefix}{block.fullname}"
            yield name, block
            yield from functions(block.closures, f"{name}.")


def too_big(source: str) -> list[str]:
    """`name: cc N, M lines` for each function over a limit."""
    return [
        f"{name}: cc {block.complexity}, {block.endline - block.lineno + 1} lines"
        for name, block in functions(cc_visit(source))
        if block.complexity > MAX_COMPLEXITY or block.endline - block.lineno + 1 > MAX_LINES
    ]


def unexplained_imports(source: str) -> list[int]:
    """Lines of imports inside a function with no comment on their lines or the line above; an import right after
    an explained one is explained with it (one comment may say why for a group)."""
    commented = {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    found = set()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            for field in ("body", "orelse", "finalbody"):
                statements = getattr(node, field, None)
                explained = False
                for statement in statements if isinstance(statements, list) else ():
                    if not isinstance(statement, (ast.Import, ast.ImportFrom)):
                        explained = False
                        continue
                    lines = range(statement.lineno - 1, (statement.end_lineno or statement.lineno) + 1)
                    explained = explained or any(line in commented for line in lines)
                    if not explained:
                        found.add(statement.lineno)
    return sorted(found)


def test_no_function_is_too_complex_or_too_long():
    assert sorted(f"{module}:{entry}" for module, source in modules() for entry in too_big(source)) == []


def test_no_module_is_too_long():
    assert [module for module, source in modules() if len(source.splitlines()) > MAX_MODULE_LINES] == []


def test_every_import_inside_a_function_says_why():
    assert {module: lines for module, source in modules() if (lines := unexplained_imports(source))} == {}


def test_the_front_door_is_a_front_door():
    tree = ast.parse((PACKAGE / "api.py").read_text(encoding="utf-8"))
    pipeline = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Pipeline")
    assert (pipeline.end_lineno or 0) - pipeline.lineno + 1 < MAX_PIPELINE_LINES


def test_the_limits_are_measured_as_radon_does():
    def branching(count: int) -> str:
        return "def f(x):\n" + "".join(f"    if x == {i}:\n        x += 1\n" for i in range(count)) + "    return x\n"

    assert too_big(branching(20)) == ["f: cc 21, 42 lines"]
    assert too_big(branching(19)) == []  # cc 20 is allowed
    long = "class C:\n    def m(self):\n" + "        pass\n" * 80
    assert too_big(long) == ["C.m: cc 1, 81 lines"]
    nested = "def outer():\n    def inner(x):\n" + "".join(f"        if x == {i}: x += 1\n" for i in range(20))
    assert too_big(nested) == ["outer.inner: cc 21, 21 lines"]  # a closure counts on its own


def test_an_import_in_a_function_needs_a_comment_on_its_line_or_above_its_group():
    source = """
def bare():
    import json

def trailing():
    import json  # slow to import


def above():
    # slow to import
    import json
    from os import path


def broken_group():
    import json  # slow to import
    x = 1
    import csv


def in_try():
    try:  # an optional extra
        import yaml
        import json
    except ImportError:
        import csv
"""
    assert unexplained_imports(source) == [3, 18, 26]
