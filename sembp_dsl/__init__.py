"""sbpc: a compiler and optimizer for LLM agent pipelines (semantic backpropagation).

    import sembp_dsl as sbp
    triage = sbp.load("triage.sbp", model="openai/gpt-4o-mini")
    triage(ticket="The app crashes on login").output

The names below are the public API (see docs/python.md); they load on first use, so
`sbpc check` and other commands that call no model never import the model layer.
Every error sbpc raises derives from `SbpcError`; errors.py shows the whole tree.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .errors import OptionError, SbpcError

__version__ = "0.1.0"

# each public name and the module that defines it (errors: errors.py's tree says when each is raised)
_HOMES = {
    "load": "api",
    "Pipeline": "api",
    "Prediction": "api",
    "Usage": "api",
    "Data": "api",
    "Batch": "models.batch",
    "Method": "language.blocks.method",
    "Optimized": "api",
    "Evaluation": "runtime.evaluate",
    "PipelineError": "language.diagnostics",
    "BlockStringError": "language.syntax.parser",
    "BadScalar": "language.syntax.yaml_form",
    "DemosError": "language.nodes.demos",
    "FormatError": "language.tooling.fmt",
    "RenameError": "language.tooling.editor",
    "RenderError": "language.nodes.templates",
    "TemplateProblem": "language.nodes.templates",
    "SettingError": "language.blocks.method",
    "SettingTypeError": "language.blocks.method",
    "WriteBackError": "files",
    "LLMError": "models.llm",
    "CallFailed": "models.llm",
    "BatchFailed": "models.batch",
    "BudgetExceeded": "models.llm",
    "CallError": "models.faults",
    "NoConnection": "models.faults",
    "PlainHttp": "models.faults",
    "BadReply": "models.faults",
    "CacheError": "models.cache",
    "RouterConfigError": "models.routing",
    "CodeError": "runtime.code",
    "DataError": "runtime.datasets",
    "MetricFailed": "runtime.evaluate",
    "Overran": "usercode",
    "ToolFailed": "usercode",
    "ServerStopped": "usercode",
    "RecordError": "records.record",
    "ResumeError": "records.record",
    "RunsError": "records.runs",
    "InputError": "runtime.inputs",
    "PipelineClosed": "runtime.session",
    "CompareError": "compare",
    "ServeError": "serve",
    "UsageError": "cli.flags",
    "TelemetryError": "telemetry",
}
__all__ = [
    "BadReply",
    "BadScalar",
    "Batch",
    "BatchFailed",
    "BlockStringError",
    "BudgetExceeded",
    "CacheError",
    "CallError",
    "CallFailed",
    "CodeError",
    "CompareError",
    "Data",
    "DataError",
    "DemosError",
    "Evaluation",
    "FormatError",
    "InputError",
    "LLMError",
    "Method",
    "MetricFailed",
    "NoConnection",
    "Optimized",
    "OptionError",
    "Overran",
    "Pipeline",
    "ServerStopped",
    "ToolFailed",
    "PipelineClosed",
    "PipelineError",
    "PlainHttp",
    "Prediction",
    "RecordError",
    "RenameError",
    "RenderError",
    "ResumeError",
    "RouterConfigError",
    "RunsError",
    "SbpcError",
    "ServeError",
    "SettingError",
    "SettingTypeError",
    "TelemetryError",
    "TemplateProblem",
    "Usage",
    "UsageError",
    "WriteBackError",
    "load",
]

if TYPE_CHECKING:
    from .api import Data, Optimized, Pipeline, Prediction, Usage, load
    from .cli.flags import UsageError
    from .compare import CompareError
    from .files import WriteBackError
    from .language.blocks.method import Method, SettingError, SettingTypeError
    from .language.diagnostics import PipelineError
    from .language.nodes.demos import DemosError
    from .language.nodes.templates import RenderError, TemplateProblem
    from .language.syntax.parser import BlockStringError
    from .language.syntax.yaml_form import BadScalar
    from .language.tooling.editor import RenameError
    from .language.tooling.fmt import FormatError
    from .models.batch import Batch, BatchFailed
    from .models.cache import CacheError
    from .models.faults import BadReply, CallError, NoConnection, PlainHttp
    from .models.llm import BudgetExceeded, CallFailed, LLMError
    from .models.routing import RouterConfigError
    from .records.record import RecordError, ResumeError
    from .records.runs import RunsError
    from .runtime.code import CodeError
    from .runtime.datasets import DataError
    from .runtime.evaluate import Evaluation, MetricFailed
    from .runtime.inputs import InputError
    from .runtime.session import PipelineClosed
    from .serve import ServeError
    from .telemetry import TelemetryError
    from .usercode import Overran, ServerStopped, ToolFailed


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module 'sembp_dsl' has no attribute {name!r}")
