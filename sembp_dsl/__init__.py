"""sbpc: a compiler and optimizer for LLM agent pipelines (semantic backpropagation).

    import sembp_dsl as sbp
    triage = sbp.load("triage.sbp", model="openai/gpt-4o-mini")
    triage(ticket="The app crashes on login").output

The names below are the public API (see docs/python.md); they load on first use, so
`sbpc check` and other commands that call no model never import the model layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = [
    "BudgetExceeded",
    "CallFailed",
    "DataError",
    "Evaluation",
    "LLMError",
    "Optimized",
    "Pipeline",
    "PipelineError",
    "Prediction",
    "Usage",
    "load",
]

if TYPE_CHECKING:
    from .api import (
        BudgetExceeded,
        CallFailed,
        DataError,
        Evaluation,
        LLMError,
        Optimized,
        Pipeline,
        PipelineError,
        Prediction,
        Usage,
        load,
    )


def __getattr__(name: str):
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'sembp_dsl' has no attribute {name!r}")
