"""Tool modules are read by `check` (language/signatures.py, callables.py): a hostile or odd module gives a
located error or is read as Python reads it, never a traceback; reading is linear in the tools a module
defines."""

from __future__ import annotations

import contextlib
import io
import time

import pytest
from conftest import with_fake_model

from sembp_dsl.cli.commands import main


def pipeline(tmp_path, tools: dict[str, str], module: str = "tools") -> str:
    declared = "".join(f'function {name} = "{module}:{target}"\n' for name, target in tools.items())
    path = tmp_path / "a.sbp"
    path.write_text(
        f'pipeline a\ninput q: text\nparam t = "x"\n{declared}'
        f"node s: text {{ prompt = t  tools = [{', '.join(tools)}] }}\nq -> s\noutput s\n"
    )
    return str(path)


def cli(*argv: str) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, err.getvalue() + out.getvalue()


def test_a_module_with_a_byte_that_is_not_utf8_is_a_located_error(tmp_path):
    (tmp_path / "tools.py").write_bytes(b"def look(q: str) -> str:\n    return '\xff'\n")
    code, output = cli("check", pipeline(tmp_path, {"look": "look"}))
    assert code == 1 and "Traceback" not in output, output
    assert "error[E112]: function 'look' cannot be a tool: the module does not parse" in output, output
    assert "utf-8" in output.lower(), output


def test_a_module_that_declares_its_encoding_is_read_as_python_reads_it(tmp_path):
    (tmp_path / "tools.py").write_bytes(b"# -*- coding: latin-1 -*-\ndef look(q: str) -> str:\n    '''Caf\xe9.'''\n")
    assert cli("check", pipeline(tmp_path, {"look": "look"}))[0] == 0


def test_a_module_that_starts_with_a_utf8_bom_is_read_as_python_imports_it(tmp_path):
    (tmp_path / "tools.py").write_bytes("\ufeffdef look(q: str) -> str:\n    return q\n".encode())
    code, output = cli("check", pipeline(tmp_path, {"look": "look"}))
    assert code == 0, output


@pytest.mark.parametrize(
    "terms, message",
    [
        (3000, "the module is nested too deeply to read"),  # too deep for `ast` itself
        (400, "parameter 'q': the type hint is nested too deeply"),  # parsed, too deep to read as a schema
    ],
)
def test_a_type_alias_of_hundreds_of_terms_is_a_located_error(tmp_path, terms, message):
    alias = " | ".join(["int", "str"] * (terms // 2))
    (tmp_path / "tools.py").write_text(f"Kind = {alias}\ndef look(q: Kind) -> str:\n    return q\n")
    code, output = cli("check", pipeline(tmp_path, {"look": "look"}))
    assert code == 1 and "Traceback" not in output, output
    assert f"error[E112]: function 'look' cannot be a tool: {message}" in output, output


def test_aliases_of_aliases_cannot_multiply_a_hint_without_bound(tmp_path):
    """Each alias names the next fifty times: eight deep, 50**8 names."""
    lines = [f"A{i} = " + " | ".join([f"A{i + 1}"] * 50) for i in range(8)] + ["A8 = int"]
    (tmp_path / "tools.py").write_text("\n".join(lines) + "\ndef look(q: A0) -> str:\n    return q\n")
    start = time.monotonic()
    code, output = cli("check", pipeline(tmp_path, {"look": "look"}))
    assert time.monotonic() - start < 10
    assert code == 1 and "the type hint is too big" in output, output


@pytest.mark.parametrize(
    "module, attr, problem",
    [("math", "sqrt", "module 'math' is compiled (math."), ("sys", "getsizeof", "module 'sys' is built into Python")],
)
def test_a_builtin_allowed_as_a_tool_is_a_check_error(tmp_path, module, attr, problem):
    code, output = cli("check", "--allow-module", module, pipeline(tmp_path, {"root": attr}, module=module))
    assert code == 1 and "Traceback" not in output, output
    assert f"error[E112]: function 'root' cannot be a tool: {problem}" in output, output


def test_an_allowed_module_with_python_source_passes_check_unimported(tmp_path):
    code, output = cli("check", "--allow-module", "json", pipeline(tmp_path, {"dump": "dumps"}, module="json"))
    assert code == 0, output


def test_a_builtin_allowed_as_a_tool_is_a_clear_error_when_run(tmp_path, fake_llm):
    path = pipeline(tmp_path, {"root": "sqrt"}, module="math")
    with open(path) as file:
        text = with_fake_model(file.read(), fake_llm.url)
    with open(path, "w") as file:
        file.write(text)
    code, output = cli("run", "--allow-module", "math", path, "--input", "q=4")
    assert code != 0 and "Traceback" not in output and "bug in sbpc" not in output, output
    assert "tool root: it has no Python source" in output, output


def check_seconds(tmp_path, count: int) -> float:
    folder = tmp_path / str(count)
    folder.mkdir()
    body = "".join(f'def t{i}(q: str, n: int = 3) -> str:\n    """Tool {i}."""\n    return q\n' for i in range(count))
    (folder / "tools.py").write_text(body)
    path = pipeline(folder, {f"t{i}": f"t{i}" for i in range(count)})
    start = time.perf_counter()
    code, output = cli("check", path)
    assert code == 0, output
    return time.perf_counter() - start


def test_check_is_about_linear_in_the_tools_a_module_defines(tmp_path):
    """Each tool parsed the whole module: 150 tools 1-2 s, 300 6 s, 600 31 s."""
    check_seconds(tmp_path, 20)  # warm
    small, big = check_seconds(tmp_path, 150), check_seconds(tmp_path, 600)
    assert big < 6 * small + 0.5, (small, big)  # 4x the tools; quadratic was 16x or more
