"""One exception root: every error sbpc raises for its user is an SbpcError, exported and documented, and the
command line prints a message for an SbpcError and a traceback for anything else (a bug of sbpc's)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from typing import NamedTuple

import pytest
from conftest import ROOT
from jinja2 import TemplateError

import sembp_dsl as sbp
from sembp_dsl import cli, errors
from sembp_dsl.cli import commands
from sembp_dsl.errors import SbpcError


def error_classes() -> dict[str, type[BaseException]]:
    """Every exception class sbpc defines, by its dotted name: each module imported, as a user's code may."""
    found = {}
    for info in pkgutil.walk_packages(sbp.__path__, "sembp_dsl."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{info.name}.{value.__qualname__}"] = value
    return found


def public_classes() -> dict[str, type[BaseException]]:
    """The exception classes whose names are no module's private ones (`_Lost`), by their names."""
    named = [cls for cls in error_classes().values() if not cls.__name__.startswith("_")]
    assert len({cls.__name__ for cls in named}) == len(named), "two error classes share a name"
    return {cls.__name__: cls for cls in named}


# `  * Name (module) [OtherBase] - when it is raised`, indented under its base
TREE_LINE = re.compile(r"^(?P<indent> *)\* (?P<name>\w+)(?: \((?P<module>[\w.]+)\))?(?: \[(?P<also>[\w, ]+)\])? - ")


class Place(NamedTuple):
    parent: str | None  # the class it is indented under
    module: str
    also: frozenset[str]  # the bases from outside sbpc it names, [ValueError]


def documented_tree() -> dict[str, Place]:
    """errors.py's docstring tree, each class by its name."""
    tree: dict[str, Place] = {}
    above: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        found = TREE_LINE.match(line)
        if not found:
            continue
        depth = len(found["indent"])
        while above and above[-1][0] >= depth:
            above.pop()
        also = frozenset(found["also"].split(", ")) if found["also"] else frozenset()
        tree[found["name"]] = Place(above[-1][1] if above else None, found["module"] or "errors", also)
        above.append((depth, found["name"]))
    return tree


def test_every_exception_class_derives_from_sbpc_error():
    """A `class X(Exception)` anywhere in the package fails here: even an error sbpc catches itself is one of
    the tree's, so `except SbpcError` and the command line's message-or-traceback never guess."""
    classes = error_classes()
    strays = [name for name, cls in classes.items() if not issubclass(cls, SbpcError)]
    assert not strays, strays
    assert len(classes) >= 30  # the walk found the package's errors, not nothing


def test_the_tree_in_errors_py_shows_every_class_under_its_base():
    tree, classes = documented_tree(), public_classes()
    assert sorted(tree) == sorted(classes)  # none missing, none stale
    for name, cls in classes.items():
        place = tree[name]
        assert f"sembp_dsl.{place.module}" == cls.__module__, name
        ours = [base.__name__ for base in cls.__bases__ if base.__module__.startswith("sembp_dsl")]
        assert place.parent in ours if place.parent else cls is SbpcError, name  # only the root has no parent
        theirs = {base.__name__ for base in cls.__bases__ if not base.__module__.startswith("sembp_dsl")}
        assert place.also == theirs - {"Exception"}, name


def test_every_error_class_is_exported():
    for name, cls in public_classes().items():
        assert name in sbp.__all__, name
        assert getattr(sbp, name) is cls, name


def test_errors_keep_the_bases_callers_rely_on():
    from sembp_dsl.language.nodes.templates import RenderError
    from sembp_dsl.records.record import RecordError

    assert issubclass(sbp.InputError, ValueError) and issubclass(sbp.PipelineClosed, RuntimeError)
    assert issubclass(RecordError, ValueError) and issubclass(sbp.WriteBackError, ValueError)
    assert issubclass(RenderError, TemplateError)  # forward.py fails one sample on any TemplateError
    assert issubclass(sbp.ResumeError, sbp.RecordError)


def test_every_error_a_public_method_raises_is_exported_and_documented():
    raised = ["InputError", "PipelineClosed", "CacheError", "RecordError", "ResumeError", "WriteBackError"]
    raised += ["PipelineError", "LLMError", "CallFailed", "BudgetExceeded", "DataError", "SbpcError"]
    raised += ["SettingError", "SettingTypeError", "DemosError"]
    docs = (ROOT / "docs" / "python.md").read_text()
    for name in raised:
        assert name in sbp.__all__, name
        assert issubclass(getattr(sbp, name), SbpcError), name
        assert f"`{name}`" in docs, name


def test_exported_names_are_the_classes_the_package_raises():
    from sembp_dsl import api
    from sembp_dsl.models import llm
    from sembp_dsl.runtime import inputs, session

    assert sbp.InputError is inputs.InputError and sbp.PipelineClosed is session.PipelineClosed
    assert sbp.CallFailed is llm.CallFailed and sbp.Pipeline is api.Pipeline


@pytest.fixture
def schema_raises(monkeypatch):
    """`sbpc schema` made to raise the exception given. The parser binds each command when it is built, once per
    process, so it is built again with the stand-in and after it."""

    def use(exc: Exception) -> None:
        def fails(args):
            raise exc

        monkeypatch.setattr(commands, "cmd_schema", fails)
        commands.build_parser.cache_clear()

    yield use
    commands.build_parser.cache_clear()


def test_the_cli_prints_a_message_for_any_sbpc_error(schema_raises, capsys):
    class NewError(SbpcError):
        """An error the command line has never heard of: the root alone decides."""

    schema_raises(NewError("the data set is not there"))
    assert cli.main(["schema"]) == 1
    assert capsys.readouterr().err == "sbpc: error: the data set is not there\n"


def test_the_cli_reports_a_bug_as_one_with_its_traceback(schema_raises, capsys):
    schema_raises(KeyError("a bug in sbpc"))
    assert cli.main(["schema"]) == 70
    error = capsys.readouterr().err
    assert "Traceback" in error and "KeyError: 'a bug in sbpc'" in error
    assert error.rstrip().splitlines()[-1].startswith("sbpc: this is a bug in sbpc, not in your pipeline or data")


def test_an_option_error_names_flags_on_the_command_line(schema_raises, capsys):
    from sembp_dsl.errors import option

    schema_raises(sbp.BudgetExceeded(option("max_calls", 3), " reached"))
    assert cli.main(["schema"]) == 1
    assert capsys.readouterr().err == "sbpc: error: --max-calls 3 reached\n"


def test_a_failing_check_never_imports_the_model_layer(tmp_path):
    bad = tmp_path / "bad.sbp"
    bad.write_text("pipeline p\ninput q: text\nnode a: text { prompt = nowhere }\nq -> a\noutput a\n")
    probe = "import sys; from sembp_dsl import cli; code = cli.main(sys.argv[1:]); print(code, sorted(m for m in sys.modules if m.startswith(('litellm', 'sembp_dsl.models', 'sembp_dsl.api'))))"
    for args in (["check", str(bad)], ["check", str(tmp_path / "missing.sbp")]):
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert proc.stdout.split("\n")[-2] == "1 []", proc.stdout + proc.stderr
