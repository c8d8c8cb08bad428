"""What scores a run, from what the caller named: a built-in metric's name passes through; a judge the file defines
asks a model; a function metric the file names, or a callable given in Python, becomes a Scorer that asks it with
the caller's own view of an answer (a Prediction, which this stage does not know: `view` makes one)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from ..errors import Option
from ..language.blocks.method import SettingError, SettingTypeError
from ..language.diagnostics import did_you_mean
from ..language.graph.graph import Graph
from ..language.nodes.metrics import METRICS
from ..language.nodes.trace import Trace
from ..models.llm import LLM
from .code import load_callable
from .datasets import Sample
from .evaluate import Scorer, Verdict, python_verdict
from .judge import judge

#: What a metric written in Python is asked with: the answer as the caller sees it, from its trace.
View = Callable[[Trace], Any]


def scorer_for(graph: Graph, metric: str | Callable, llm: LLM, allowed: tuple[str, ...], view: View) -> str | Scorer:
    """What scores with `metric`: a built-in's name, or a Scorer (a judge asks `llm`; a function metric is imported
    now, from beside the pipeline or from the `allowed` modules)."""
    if callable(metric):
        return python_scorer(metric, str(getattr(metric, "__name__", metric)), view)
    if metric in METRICS:
        return metric
    spec = graph.metrics.get(metric)
    if spec is None:
        defined = f"; {graph.pipeline.path} defines {', '.join(graph.metrics)}" if graph.metrics else ""
        raise SettingError(
            Option("metric", "--metric"),
            f": no metric {metric!r}{did_you_mean(metric, [*METRICS, *graph.metrics])} (built in: "
            f"{', '.join(METRICS)}{defined})",
        )
    if spec.kind == "judge":
        return judge(graph, llm, spec)
    # imported only now that a run scores with it (never by check, compile or load), and only from where a
    # function node's may be: the pipeline's folder, or a module the caller allowed (runtime/code.py)
    folder = os.path.dirname(os.path.abspath(graph.pipeline.path))
    return python_scorer(load_callable(str(spec.function), folder, allowed), spec.name, view)


def python_scorer(metric: Callable, name: str, view: View) -> Scorer:
    """A metric written in Python, asked with `view(trace)` and the example as given: a bool or a number from 0 to
    1, or with a reason, `(score, reason)`. One that raises, exits, hangs or returns anything else fails for that
    sample (MetricFailed, runtime/evaluate.python_verdict), not for the run."""
    if inspect.iscoroutinefunction(metric) or inspect.iscoroutinefunction(type(metric).__call__):  # noqa: B004 (an async __call__)
        raise SettingTypeError(
            Option("metric", "--metric"),
            f": the metric {name!r} is async; a metric is a plain function (prediction, example) -> score "
            "(to await something inside it, use asyncio.run(...))",
        )

    async def score(trace: Trace, sample: Sample, expected: str) -> Verdict:
        return await python_verdict(
            metric, name, view(trace), sample.given or {**sample.fields, "answer": sample.answer}
        )

    return score
