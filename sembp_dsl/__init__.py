"""sbpc: a compiler and optimizer for LLM agent pipelines (semantic backpropagation).

    import sembp_dsl as sbp
    triage = sbp.load("triage.sbp", model="openai/gpt-4o-mini")
    triage(ticket="The app crashes on login").output

The names below are the public API (see docs/python.md); they load on first use, so
`sbpc check` and other commands that call no model never import the model layer.
Every error sbpc raises for its user derives from `SbpcError`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .errors import SbpcError

__version__ = "0.1.0"

# each public name and the module that defines it
_HOMES = {
    "load": "api",
    "Pipeline": "api",
    "Prediction": "api",
    "Usage": "api",
    "Data": "api",
    "Method": "language.method",
    "Optimized": "api",
    "Evaluation": "runtime.evaluate",
    "PipelineError": "language.diagnostics",
    "InputError": "api",
    "PipelineClosed": "api",
    "LLMError": "models.llm",
    "CallFailed": "models.llm",
    "BudgetExceeded": "models.llm",
    "CacheError": "models.cache",
    "DataError": "runtime.datasets",
    "RecordError": "records.record",
    "ResumeError": "records.record",
    "WriteBackError": "language.writeback",
    "DemosError": "language.demos",
    "SettingError": "language.method",
    "SettingTypeError": "language.method",
}
__all__ = [
    "BudgetExceeded",
    "CacheError",
    "CallFailed",
    "Data",
    "DataError",
    "DemosError",
    "Evaluation",
    "InputError",
    "LLMError",
    "Method",
    "Optimized",
    "Pipeline",
    "PipelineClosed",
    "PipelineError",
    "Prediction",
    "RecordError",
    "ResumeError",
    "SbpcError",
    "SettingError",
    "SettingTypeError",
    "Usage",
    "WriteBackError",
    "load",
]

if TYPE_CHECKING:
    from .api import Data, InputError, Optimized, Pipeline, PipelineClosed, Prediction, Usage, load
    from .language.demos import DemosError
    from .language.diagnostics import PipelineError
    from .language.method import Method, SettingError, SettingTypeError
    from .language.writeback import WriteBackError
    from .models.cache import CacheError
    from .models.llm import BudgetExceeded, CallFailed, LLMError
    from .records.record import RecordError, ResumeError
    from .runtime.datasets import DataError
    from .runtime.evaluate import Evaluation


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module 'sembp_dsl' has no attribute {name!r}")
