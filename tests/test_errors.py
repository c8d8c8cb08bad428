"""One exception root: every error sbpc raises for its user is an SbpcError, exported and documented, and the
command line prints a message for an SbpcError and a traceback for anything else (a bug of sbpc's)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest
from conftest import ROOT
from jinja2 import TemplateError

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.cli import commands
from sembp_dsl.errors import SbpcError

# raised and caught inside sbpc, never met by a user: each says what it becomes
INTERNAL = {
    "sembp_dsl.cli.flags.UsageError": "argparse's usage message, exit 2",
    "sembp_dsl.models.faults.BadReply": "a failed attempt: CallFailed or LLMError",
    "sembp_dsl.models.faults.CallError": "a failed attempt: CallFailed or LLMError",
    "sembp_dsl.models.faults.NoConnection": "a failed attempt: LLMError (no answer yet) or CallFailed",
    "sembp_dsl.models.faults.PlainHttp": "a failed attempt: LLMError",
    "sembp_dsl.language.parser.BlockStringError": "a diagnostic of a PipelineError",
    "sembp_dsl.language.yaml_form.BadScalar": "a diagnostic of a PipelineError",
    "sembp_dsl.runtime.evaluate.MetricFailed": "that sample's metric_error: it is not scored, the run goes on",
}


def error_classes() -> dict[str, type[BaseException]]:
    """Every exception class sbpc defines, by its dotted name."""
    found = {}
    for info in pkgutil.walk_packages(sbp.__path__, "sembp_dsl."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{info.name}.{value.__qualname__}"] = value
    return found


def test_every_error_a_user_can_meet_derives_from_sbpc_error():
    classes = error_classes()
    assert set(INTERNAL) <= set(classes), set(INTERNAL) - set(classes)
    strays = [name for name, cls in classes.items() if name not in INTERNAL and not issubclass(cls, SbpcError)]
    assert not strays, strays
    assert len(classes) - len(INTERNAL) >= 18  # the walk found the package's errors, not nothing


def test_errors_keep_the_bases_callers_rely_on():
    from sembp_dsl.language.templates import RenderError
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

    assert sbp.InputError is api.InputError and sbp.PipelineClosed is api.PipelineClosed
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
    from sembp_dsl.language.diagnostics import option

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
