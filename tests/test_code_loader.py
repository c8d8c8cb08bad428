"""The one door through which a pipeline's Python code is imported (runtime/code.py): only from the pipeline's own
folder or from modules the user named; anything else refused with a clear message, and checking or compiling a
file never imports anything (issue 18)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.language.blocks.callables import parse_target
from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.runtime.code import REFUSED, UNLOADABLE, CodeError, load_callable

PIPELINE = """\
pipeline rag "Answer from passages"
input question: text
function search = "{target}"
node passages: json {{ function = search }}
question -> passages
output passages
"""


def marker_module(folder: Path, name: str = "tools") -> Path:
    """A module whose import leaves a file behind: proof of whether it was imported."""
    marker = folder / f"{name}.imported"
    (folder / f"{name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('yes')\n\n"
        "def search(question):\n    '''Passages about the question.'''\n    return [question]\n"
    )
    return marker


def pipeline(folder: Path, target: str) -> Path:
    path = folder / "rag.sbp"
    path.write_text(PIPELINE.format(target=target))
    return path


def run_cli(*argv: str, capsys) -> tuple[int, str, str]:
    try:
        status = cli.main(list(argv))
    except SystemExit as exit:
        status = exit.code
    out, err = capsys.readouterr()
    return status, out, err


def test_a_module_beside_the_pipeline_is_imported_from_that_file(tmp_path):
    marker_module(tmp_path)
    search = load_callable("tools:search", str(tmp_path))
    assert search(question="q") == ["q"]
    assert search.__module__.startswith("_sbpc_code_")  # a private name: no installed `tools` is touched
    assert "tools" not in sys.modules or getattr(sys.modules["tools"], "__file__", "") != str(tmp_path / "tools.py")
    assert load_callable("tools:search", str(tmp_path)) is search  # imported once


def test_a_file_named_like_a_standard_module_is_that_file_not_the_standard_one(tmp_path):
    (tmp_path / "json.py").write_text("def dumps(value):\n    return 'mine'\n")
    assert load_callable("json:dumps", str(tmp_path))(1) == "mine"
    assert json.dumps(1) == "1"  # the real one is untouched


def test_a_module_beside_the_pipeline_may_import_its_neighbours(tmp_path):
    (tmp_path / "corpus_h11.py").write_text("DOCS = ['a', 'b']\n")
    (tmp_path / "tools.py").write_text("from corpus_h11 import DOCS\n\ndef search(question):\n    return DOCS\n")
    assert load_callable("tools:search", str(tmp_path))(question="q") == ["a", "b"]
    assert str(tmp_path) not in sys.path  # the folder was on the path only while importing


@pytest.mark.parametrize(
    "target",
    ["os:system", "subprocess:run", "os.path:join", "builtins:exec"],
)
def test_a_module_neither_beside_nor_allowed_is_refused_with_the_way_to_allow_it(tmp_path, target):
    with pytest.raises(CodeError) as caught:
        load_callable(target, str(tmp_path))
    module = target.split(":")[0]
    assert caught.value.code == REFUSED
    assert f"module '{module}' is not beside the pipeline" in str(caught.value)
    assert f"--allow-module {module}" in caught.value.help and "functions=" in caught.value.help


@pytest.mark.parametrize(
    "target, problem",
    [
        ("tools", "names no callable"),
        ("../tools:search", "is not a module name"),
        ("/etc/passwd:x", "is not a module name"),
        (".tools:search", "is not a module name"),
        ("tools:os.system", "is not a public name"),
        ("tools:_private", "is not a public name"),
        ("tools:", "is not a public name"),
    ],
)
def test_a_name_that_is_no_module_and_name_is_refused_before_any_file_is_looked_at(target, problem):
    assert problem in parse_target(target)


def test_an_allowed_module_is_imported_by_name_and_covers_its_package(tmp_path):
    assert load_callable("json:dumps", str(tmp_path), allowed=("json",))([1]) == "[1]"
    assert load_callable("os.path:join", str(tmp_path), allowed=("os",))("a", "b") == os.path.join("a", "b")
    with pytest.raises(CodeError):  # `os` does not allow `ossaudiodev`, nor `json` `json5`
        load_callable("json5:loads", str(tmp_path), allowed=("json",))


def test_a_symbolic_link_out_of_the_folder_is_refused(tmp_path):
    outside, folder = tmp_path / "outside", tmp_path / "pipelines"
    outside.mkdir()
    folder.mkdir()
    marker = marker_module(outside)
    (folder / "tools.py").symlink_to(outside / "tools.py")
    with pytest.raises(CodeError, match="symbolic link .* outside the pipeline's folder"):
        load_callable("tools:search", str(folder))
    assert not marker.exists()


def test_a_callable_imported_into_a_module_beside_the_pipeline_is_not_runnable_through_it(tmp_path):
    (tmp_path / "tools.py").write_text("from os import system\nfrom subprocess import run\n")
    for name in ("system", "run"):
        with pytest.raises(CodeError, match="not defined in .* but imported into it") as caught:
            load_callable(f"tools:{name}", str(tmp_path))
        assert caught.value.code == REFUSED


@pytest.mark.parametrize(
    "source, target, problem",
    [
        ("def search(q):\n    return q\n", "tools:serach", "module 'tools' has no 'serach'"),
        ("search = 3\n", "tools:search", "'tools:search' is a int, not something that can be called"),
        ("raise RuntimeError('no index')\n", "tools:search", "RuntimeError: no index"),
        ("import sys\nsys.exit(3)\n", "tools:search", "SystemExit: 3"),
        ("def search(:\n", "tools:search", "SyntaxError"),
    ],
)
def test_a_module_that_gives_no_callable_says_why(tmp_path, source, target, problem):
    (tmp_path / "tools.py").write_text(source)
    with pytest.raises(CodeError) as caught:
        load_callable(target, str(tmp_path))
    assert caught.value.code == UNLOADABLE
    assert problem in str(caught.value)


def test_check_and_compile_import_nothing(tmp_path, capsys):
    marker = marker_module(tmp_path)
    path = pipeline(tmp_path, "tools:search")
    assert run_cli("check", str(path), capsys=capsys)[0] == 0
    assert run_cli("compile", "--emit", "prompts", str(path), capsys=capsys)[0] == 0
    assert run_cli("compile", "--emit", "ir", str(path), capsys=capsys)[0] == 0
    assert not marker.exists()
    sbp.load(path, functions={"search": lambda question: [question]})  # given: nothing to import
    assert not marker.exists()
    sbp.load(path)
    assert marker.exists()


def test_check_warns_about_os_system_and_a_run_refuses_it_importing_nothing(tmp_path, capsys):
    """The file names os:system beside a module of its own: check imports neither, and the run refuses before
    importing either."""
    marker = marker_module(tmp_path)
    path = tmp_path / "rag.sbp"
    path.write_text(
        PIPELINE.format(target="tools:search")
        + 'function shell = "os:system"\nnode ran: text { function = shell }\nquestion -> ran\n'
    )
    status, out, err = run_cli("check", str(path), capsys=capsys)
    assert status == 0 and "warning[W009]: module 'os' is not beside the pipeline" in err
    assert "--allow-module os" in err
    status, out, err = run_cli("run", str(path), "--input", "question=hi", capsys=capsys)
    assert status == 1
    assert "error[E083]: module 'os' is not beside the pipeline" in err and 'function shell = "os:system"' in err
    assert "Traceback" not in err
    assert not marker.exists()
    with pytest.raises(PipelineError) as caught:
        sbp.load(path)
    assert [d.code for d in caught.value.diagnostics] == ["E083"]
    assert not marker.exists()
    status, out, err = run_cli("check", "--allow-module", "os", str(path), capsys=capsys)
    assert "W009" not in err


def test_a_module_that_cannot_be_loaded_is_a_located_error_at_run_time(tmp_path, capsys):
    (tmp_path / "tools.py").write_text("def search(question):\n    return []\n")
    path = pipeline(tmp_path, "tools:serach")
    assert run_cli("check", str(path), capsys=capsys)[0] == 0  # check cannot know: it imports nothing
    status, out, err = run_cli("run", str(path), "--input", "question=hi", capsys=capsys)
    assert status == 1 and "error[E084]: module 'tools' has no 'serach'" in err and "Traceback" not in err


def test_the_api_takes_callables_by_declared_name_and_refuses_others(tmp_path):
    path = pipeline(tmp_path, "os:system")
    with pytest.raises(ValueError, match="declares no function 'serch'.*did you mean 'search'"):
        sbp.load(path, functions={"serch": print})
    with pytest.raises(TypeError, match=r"functions\['search'\] must be callable"):
        sbp.load(path, functions={"search": "tools:search"})
    with pytest.raises(TypeError, match="allow_modules takes a list"):
        sbp.load(path, allow_modules="os")
    found = sbp.load(path, functions={"search": print})
    assert found.graph.functions["search"] is print
    allowed = sbp.load(path, allow_modules=["os"])
    assert allowed.graph.functions["search"] is os.system  # the user's explicit choice


def test_the_command_line_allows_a_module_by_name_and_runs_it_without_a_model(tmp_path, capsys):
    path = tmp_path / "cap.sbp"
    path.write_text(
        'pipeline cap "Capitalise"\ninput s: text\nfunction capwords = "string:capwords"\n'
        "node title: text { function = capwords }\ns -> title\noutput title\n"
    )
    status, out, err = run_cli("run", str(path), "--input", "s=hello world", capsys=capsys)
    assert status == 1 and "error[E083]: module 'string' is not beside the pipeline" in err and out == ""
    status, out, err = run_cli("run", str(path), "--allow-module", "string", "--input", "s=hello world", capsys=capsys)
    assert (status, out) == (0, "Hello World\n")
    assert re.search(r"^total\s+0\s", err, re.M)  # the ledger: no model call


def _linked_neighbour(tmp_path: Path, tools: str) -> tuple[Path, Path]:
    """A pipeline folder whose tools.py imports helpers, a symbolic link to a file outside the folder."""
    outside, folder = tmp_path / "outside", tmp_path / "pipelines"
    outside.mkdir()
    folder.mkdir()
    marker = marker_module(outside, "helpers")
    (folder / "helpers.py").symlink_to(outside / "helpers.py")
    (folder / "tools.py").write_text(tools)
    return folder, marker


@pytest.mark.parametrize(
    "tools",
    [
        "from helpers import search as found\n\ndef search(question):\n    return found(question)\n",
        "import helpers\n\ndef search(question):\n    return helpers.search(question)\n",
    ],
)
def test_a_neighbour_that_links_out_of_the_folder_is_refused_by_check_and_run(tmp_path, tools, capsys):
    folder, marker = _linked_neighbour(tmp_path, tools)
    with pytest.raises(CodeError, match="helpers.py is a symbolic link to .* outside the pipeline's folder") as caught:
        load_callable("tools:search", str(folder))
    assert caught.value.code == REFUSED and not marker.exists()
    status, out, err = run_cli("check", str(pipeline(folder, "tools:search")), capsys=capsys)
    assert status == 1 and "error[E083]" in out + err and "helpers.py is a symbolic link" in out + err


def test_a_neighbour_imported_by_name_at_load_time_is_held_to_the_folder_too(tmp_path):
    tools = (
        "import importlib\nhelpers = importlib.import_module('help' + 'ers')\n\ndef search(question):\n    return []\n"
    )
    folder, marker = _linked_neighbour(tmp_path, tools)
    with pytest.raises(CodeError, match="helpers.py is a symbolic link to .* outside the pipeline's folder") as caught:
        load_callable("tools:search", str(folder))
    assert caught.value.code == REFUSED and not marker.exists()


def test_a_refused_reexport_suggests_what_a_user_can_write(tmp_path):
    package = tmp_path / "tools"
    package.mkdir()
    (package / "__init__.py").write_text("from .impl import search\n")
    (package / "impl.py").write_text("def search(question):\n    return [question]\n")
    (tmp_path / "helpers_r34.py").write_text("def lookup(question):\n    return [question]\n")
    (tmp_path / "more.py").write_text("from helpers_r34 import lookup\n")
    with pytest.raises(CodeError) as inside_package:
        load_callable("tools:search", str(tmp_path))
    with pytest.raises(CodeError) as from_neighbour:
        load_callable("more:lookup", str(tmp_path))
    for caught in (inside_package, from_neighbour):
        assert "_sbpc_code_" not in str(caught.value), caught.value
    assert "define a function in" in inside_package.value.help and "tools.impl" in inside_package.value.message
    assert 'name the module that defines it: "helpers_r34:lookup"' in from_neighbour.value.help
