"""The front door: load a pipeline, call it, evaluate it, optimize it, save it. The CLI is a thin layer over this.

    triage = sembp_dsl.load("triage.sbp", model="openai/gpt-4o-mini")
    triage(ticket="The app crashes on login").output

A Pipeline owns its model settings, one response cache and one ledger of calls,
tokens and cost. Calls run on an event loop: `acall` on the caller's, the sync
methods on a private one the pipeline keeps (so connections are reused between
calls). Each loop gets its own LLM layer, sharing the ledger and the cache.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from .errors import Option, SbpcError
from .language.demos import DemosError, checked, from_text
from .language.demos import as_text as demos_text
from .language.diagnostics import PipelineError, did_you_mean, url_problem
from .language.graph import MODEL_ROLES, Graph, MetricSpec, ModelSpec
from .language.method import SIZES, Method, SettingError
from .language.metrics import METRICS
from .language.shapes import python_value
from .language.source import compile_file
from .language.trace import Trace
from .language.writeback import WriteBack, rewrite, unified_diff
from .learning.optimize import Optimizer, Outcome
from .learning.plan import Plan, plan
from .models.cache import ResponseCache
from .models.llm import LLM, BudgetExceeded, CallFailed, Ledger, LLMError, check_callable, resolve_model
from .records.record import RunRecord, RunSettings
from .runtime import datasets
from .runtime.code import bind, load_callable
from .runtime.datasets import DataError, Sample, as_text, from_records
from .runtime.evaluate import (
    Evaluation,
    Result,
    Scorer,
    Verdict,
    check_answers,
    evaluate,
    metric_for,
    python_verdict,
    split_to_score,
)
from .runtime.forward import run
from .runtime.judge import judge
from .runtime.tasks import together

__all__ = [
    "BudgetExceeded",
    "CallFailed",
    "Data",
    "DataError",
    "Evaluation",
    "LLMError",
    "Method",
    "Optimized",
    "Pipeline",
    "PipelineError",
    "Prediction",
    "Usage",
    "load",
]


class InputError(SbpcError, ValueError):
    """Inputs a pipeline cannot take (unknown, missing, or not sendable): the caller's to fix."""


class PipelineClosed(SbpcError, RuntimeError):
    """A call on a pipeline after `close()`: a closed pipeline does not quietly open new connections."""


T = TypeVar("T")
Metric = Callable[["Prediction", Mapping[str, Any]], "bool | float | tuple[bool | float, str]"]
Examples = Sequence[Mapping[str, Any] | Sample]


@dataclass(frozen=True)
class Data:
    """A data set to draw examples from: a name ("liar", "gsm8k", "bbh:<task>") or a .jsonl/.csv/.tsv path,
    the folder built-in data sets are looked up in, and a file of its own for the test split."""

    name: str
    data_dir: str | None = None
    test_data: str | None = None


def load(
    path: str | Path,
    *,
    model: str | None = None,
    roles: Mapping[str, str | Mapping[str, Any]] | None = None,
    api_base: str | None = None,
    concurrency: int = 16,
    timeout: float = 120.0,
    cache: bool | str | Path = True,
    max_calls: int | None = None,
    max_cost: float | None = None,
    functions: Mapping[str, Callable[..., Any]] | None = None,
    allow_modules: Iterable[str] = (),
) -> Pipeline:
    """Compile a .sbp or YAML pipeline file; raises PipelineError with every located diagnostic.

    `model` names the litellm model for every call: every role's and every named model's. `roles` overrides
    one model at a time, a role or a named model (`model fast { }`), with a name or a mapping of model
    settings (`{"backward": {"name": "openai/gpt-4o", "temperature": 0}, "fast": "openai/gpt-4o-mini"}`).
    `cache`: True for the shared response cache, a path for another one, False for none.
    The callables of function nodes: `functions` maps a declared function's name to one, imported from nowhere;
    the others are imported from the pipeline's folder, or from the modules `allow_modules` names (anything else
    is refused: a pipeline file is data from strangers; see runtime/code.py). A function metric is imported from
    the same places, once a run scores with it.
    """
    if isinstance(allow_modules, str):
        raise TypeError(f"allow_modules takes a list of module names, e.g. [{allow_modules!r}]")
    allowed = tuple(allow_modules)
    graph = bind(compile_file(str(path)), functions, allowed)
    models = _models(graph, model, roles or {}, api_base, folder=Path(path).parent)
    return Pipeline(
        graph,
        models=models,
        concurrency=concurrency,
        timeout=timeout,
        cache=cache,
        max_calls=max_calls,
        max_cost=max_cost,
        allow_modules=allowed,
    )


def _models(
    graph: Graph,
    model: str | None,
    roles: Mapping[str, str | Mapping[str, Any]],
    api_base: str | None,
    folder: Path = Path(),
) -> dict[str, ModelSpec]:
    """The model of each role and named model: `model` for every one, `roles` for one at a time. A `router` file
    named in the pipeline is found beside the pipeline (one named in `roles` is the caller's, relative to the
    current folder).

    Overriding the forward role when every node names a model of its own would change no call: refused."""
    if not isinstance(roles, Mapping):
        raise TypeError(
            f"roles must map a role ({', '.join(MODEL_ROLES)}) or a named model to a model, got {type(roles).__name__}"
        )
    unknown = sorted(set(roles) - set(graph.models))
    if unknown:
        named = [key for key in graph.models if key not in MODEL_ROLES]
        raise ValueError(
            f"unknown model role {unknown[0]!r}{did_you_mean(unknown[0], graph.models)}; roles are "
            f"{', '.join(MODEL_ROLES)}" + (f", and the pipeline names the models {', '.join(named)}" if named else "")
        )
    if "forward" in roles and all(node.model != "forward" for node in graph.model_nodes):
        chosen = ", ".join(f"{node.name}: {node.model}" for node in graph.model_nodes)
        raise ValueError(
            f"roles['forward'] would change no call: every node of {graph.pipeline.path} names its own model "
            f"({chosen}); override those models by their names"
        )
    problem = url_problem(api_base) if api_base else None
    if problem:
        raise SettingError(Option("api_base", "--api-base"), f" {problem}")
    models = {}
    for role, spec in graph.models.items():
        own = roles.get(role, {})
        if not isinstance(own, (str, Mapping)):
            raise TypeError(f"roles[{role!r}] must be a model name or a mapping of settings, got {own!r}")
        own = {"name": own} if isinstance(own, str) else dict(own)
        name = own.pop("name", None) or model or spec.name
        settings = {**spec.settings, **({"api_base": api_base} if api_base else {}), **own}
        if spec.name and name and provider(name) != provider(spec.name) and not api_base:
            for key in SERVER_SETTINGS:  # the file's server and key answer for its provider, not another's
                if key not in own:
                    settings.pop(key, None)
        if "router" in spec.settings and "router" not in own:
            settings["router"] = os.path.abspath(folder / str(spec.settings["router"]))
        models[role] = ModelSpec(role, name, settings)
    return models


#: A model block's settings that say which server answers and with which key: they belong to its provider.
SERVER_SETTINGS = ("api_base", "api_key_env")


def provider(model: str) -> str:
    """A litellm model string's provider: its prefix (`ollama/llama3`: ollama); a bare name is OpenAI's."""
    return model.split("/", 1)[0] if "/" in model else "openai"


@dataclass(frozen=True)
class Usage:
    """What one prediction cost: calls made (cache hits not counted), tokens and dollars."""

    calls: int
    cache_hits: int
    prompt_tokens: int
    completion_tokens: int
    cost: float


@dataclass(frozen=True)
class Prediction:
    """A pipeline's answer: `output` typed by the output node (str, int/float, JSON value, a record as a dict) or
    by the field of it that is scored (`output judge.verdict`), None when it has none."""

    output: Any
    text: str | None  # the output as the metric sees it
    error: str | None  # why there is no output: an unparsable reply, or a call that failed
    trace: Trace
    usage: Usage

    @property
    def failed(self) -> bool:
        """No answer because a call failed or a prompt did not render, not because the model answered badly."""
        return self.trace.final.lost

    @property
    def record(self) -> dict | None:
        """The output node's whole record, when it answered with one: with `output judge.verdict`, `output` is
        the verdict and this the record it belongs to, so a metric may read its other fields."""
        if self.trace.output_field is not None:
            final = self.trace.final.output
            return json.loads(final) if final is not None else None
        return self.output if isinstance(self.output, dict) else None


@dataclass(frozen=True)
class Optimized:
    """What `Pipeline.optimize` found: the best pipeline, the method's outcome, and the run record."""

    pipeline: Pipeline
    initial: Pipeline
    outcome: Outcome
    record: Path  # the run folder; run.json inside
    written: Path | None  # where accepted steps were written (optimize(write=True)), else None

    @property
    def diff(self) -> str:
        """The change to the source file, as a unified diff ("" when no prompt changed)."""
        before = rewrite(self.initial.graph.pipeline, self.initial.prompts)
        after = rewrite(self.pipeline.graph.pipeline, self.pipeline.prompts)
        return unified_diff(before, after, self.pipeline.path)


class Pipeline:
    """A compiled pipeline, callable like a function. Build one with `load`."""

    def __init__(
        self,
        graph: Graph,
        *,
        models: Mapping[str, ModelSpec],
        concurrency: int = 16,
        timeout: float = 120.0,
        cache: bool | str | Path | ResponseCache = True,
        max_calls: int | None = None,
        max_cost: float | None = None,
        allow_modules: Iterable[str] = (),
    ):
        """`allow_modules`: modules a function metric may be imported from, besides the pipeline's folder."""
        _check_concurrency(concurrency)
        if isinstance(cache, (str, Path)):
            cache = ResponseCache(cache)
        elif cache is True:
            cache = ResponseCache()
        self.graph = graph
        self._allowed = tuple(allow_modules)
        self._session = _Session(
            dict(models),
            cache or None,
            dict(concurrency=concurrency, timeout=timeout, max_calls=max_calls, max_cost=max_cost),
        )

    @property
    def ledger(self) -> Ledger:
        """Calls, tokens and cost of every call this pipeline (and its `with_prompts` twins) made."""
        return self._session.ledger

    # --- what it is ----------------------------------------------------------------

    @property
    def path(self) -> str:
        return self.graph.pipeline.path

    @property
    def prompts(self) -> Mapping[str, str]:
        """The current text of every prompt parameter (of a demos param, its examples as a JSON list)."""
        return self.graph.prompts

    @property
    def demos(self) -> Mapping[str, list[dict[str, str]]]:
        """The current examples of every demos param a node shows, each a dict of the node's inputs and output."""
        return {name: [dict(e) for e in from_text(self.graph.prompts[name])] for name in self.graph.demos}

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.graph.inputs)

    def with_prompts(self, prompts: Mapping[str, str | Sequence[Mapping[str, str]]]) -> Pipeline:
        """The same pipeline (models, cache, ledger) with other prompt texts; a demos param takes a list of
        examples (each a dict of its node's inputs and output) or that list as JSON text. DemosError (a
        ValueError) for examples that are not its node's."""
        texts = {}
        for name, text in prompts.items():
            if name not in self.graph.prompts:
                raise ValueError(
                    f"no param '{name}'{did_you_mean(str(name), self.graph.prompts)} "
                    f"(params: {', '.join(self.graph.prompts)})"
                )
            if name in self.graph.demos:
                texts[name] = self._demos_text(name, text)
            elif not isinstance(text, str):
                raise TypeError(f"param '{name}' must be text, got {type(text).__name__}")
            else:
                texts[name] = text
        return self._sibling(self.graph.with_prompts(texts))

    def _demos_text(self, name: str, value: str | Sequence[Mapping[str, str]]) -> str:
        """A demos param's new value as the graph holds it, once its examples are checked against its node."""
        spec = self.graph.demos[name]
        examples = from_text(value) if isinstance(value, str) else checked(value)
        if len(examples) > spec.max:
            raise DemosError(f"demos '{name}' may hold at most {spec.max} examples, not {len(examples)}")
        keys = [*self.graph.nodes[spec.node].inputs, spec.node]
        for index, example in enumerate(examples, start=1):
            if sorted(example) != sorted(keys):
                raise DemosError(
                    f"example {index} of demos '{name}' must give {', '.join(keys)}, not {', '.join(example) or 'nothing'}"
                )
        return demos_text(examples)

    def _sibling(self, graph: Graph) -> Pipeline:
        twin = Pipeline.__new__(Pipeline)
        twin.graph, twin._session, twin._allowed = graph, self._session, self._allowed
        return twin

    def save(self, path: str | Path | None = None) -> Path:
        """Write the current prompts into the source file (or `path`), exactly as `sbpc optimize` does:
        only the changed literals, proved by re-parsing, atomically; never over a file changed since it was read."""
        if path is not None and not str(path).strip():
            raise ValueError("save(path): an empty path names no file; give a file name, or None for the source")
        writer = WriteBack(self.graph.pipeline, None if path is None else str(path))
        writer(self.prompts)
        return writer.target

    # --- calling it ----------------------------------------------------------------

    def __call__(self, **inputs: Any) -> Prediction:
        """Run the pipeline on one input; raises CallFailed when a call failed for good."""
        return self._sync(self.acall(**inputs))

    async def acall(self, **inputs: Any) -> Prediction:
        """`pipeline(...)` for async code: runs on the caller's event loop."""
        prediction = await self._predict(inputs)
        if prediction.failed:
            raise _Lost(prediction)
        return prediction

    def batch(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        concurrency: int | None = None,
        on_done: Callable[[Prediction], None] | None = None,
    ) -> list[Prediction]:
        """Many inputs, at most `concurrency` rows in flight, predictions in input order.
        A row whose call failed gets a Prediction with `.failed` and the cause in `.error`; the others go on."""
        return self._sync(self.abatch(rows, concurrency=concurrency, on_done=on_done))

    async def abatch(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        concurrency: int | None = None,
        on_done: Callable[[Prediction], None] | None = None,
    ) -> list[Prediction]:
        self._session.check_open()
        if concurrency is not None:
            _check_concurrency(concurrency)
        rows = [self._inputs(row) for row in rows]  # every row is checked before the first call
        bound = asyncio.Semaphore(concurrency or len(rows) or 1)

        async def one(row: Mapping[str, Any]) -> Prediction:
            async with bound:
                prediction = await self._predict(row, checked=True)
            if on_done:
                on_done(prediction)
            return prediction

        return await together(one(row) for row in rows)

    async def _predict(self, inputs: Mapping[str, Any], checked: bool = False) -> Prediction:
        llm = self._llm()
        trace = await run(self.graph, llm, inputs if checked else self._inputs(inputs))
        return self._prediction(trace, llm)

    def _prediction(self, trace: Trace, llm: LLM) -> Prediction:
        models = [trace.nodes[node.name] for node in self.graph.model_nodes]  # no code
        calls = [t for t in models if t.reply and not t.cached]
        prompt_tokens = sum(t.prompt_tokens for t in calls)
        completion_tokens = sum(t.completion_tokens for t in calls)
        usage = Usage(
            len(calls),
            sum(t.cached for t in models),
            prompt_tokens,
            completion_tokens,
            sum(t.cost for t in calls),
        )
        final = trace.final
        return Prediction(_typed(self.graph, trace.output), trace.output, final.error, trace, usage)

    def _inputs(self, given: Mapping[str, Any]) -> dict[str, str]:
        """The pipeline's inputs as text: strings as given, other values as JSON. A row of data is taken as it
        is, as `evaluate` takes it: an input may be named by the data field it reads (`from "field"`), and the
        expected answer's field is left out. Unknown and missing names are one error naming them all, before
        any call."""
        names = self.inputs
        fields = {i.field: i.name for i in self.graph.inputs if i.field and i.field not in names}
        answers = {*datasets.ANSWER_COLUMNS, self.graph.answer_field}  # what a row holds besides its inputs
        values: dict[str, Any] = {}
        problems = []
        for key, value in given.items():
            name = key if key in names else fields.get(key)
            if name is None:
                if key not in answers:
                    problems.append(f"no input '{key}'{did_you_mean(key, [*names, *fields])}")
            elif name in values:
                problems.append(f"input '{name}' is given twice, by its name and by its data field")
            else:
                values[name] = value
        missing = [name for name in names if name not in values]
        if missing:
            problems.append(f"missing input{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        if problems:
            takes = [
                f"{i.name} (or its data field '{i.field}')" if i.name in fields.values() else i.name
                for i in self.graph.inputs
            ]
            raise InputError(f"{'; '.join(problems)} ({self.path} takes: {', '.join(takes)})")
        return {name: _input_text(name, value) for name, value in values.items()}

    # --- scoring it ----------------------------------------------------------------

    def evaluate(
        self,
        examples: Examples | str | Data,
        metric: str | Metric | None = None,
        *,
        split: str = "test",
        limit: int | None = None,
        mapping: Mapping[str, str] | None = None,
        on_done: Callable[[Result], None] | None = None,
        runs_dir: str | Path | None = None,
        **sizes: int,
    ) -> Evaluation:
        """Score the pipeline on examples: a list of dicts (inputs and an `answer`, `label` or `target`), or a
        data set (its name or path, or a Data), of which `split` is scored: the split `optimize` would draw with
        these `sizes` (train_size, val_size, test_size, seed; your own file is scored whole when none is given).
        `metric`: "exact" | "numeric" | "json" or a callable `(prediction, example) -> bool | float`; default: the
        pipeline's `metric`, else the data set's. `on_done` hears of each result as it comes. `runs_dir`: keep a
        run record of the evaluation there (every sample with each node's prompt and reply), named by `.record`."""
        return self._sync(
            self.aevaluate(
                examples, metric, split=split, limit=limit, mapping=mapping, on_done=on_done, runs_dir=runs_dir, **sizes
            )
        )

    async def aevaluate(
        self,
        examples: Examples | str | Data,
        metric: str | Metric | None = None,
        *,
        split: str = "test",
        limit: int | None = None,
        mapping: Mapping[str, str] | None = None,
        on_done: Callable[[Result], None] | None = None,
        runs_dir: str | Path | None = None,
        **sizes: int,
    ) -> Evaluation:
        """`evaluate` for async code: runs on the caller's event loop."""
        self._session.check_open()  # before the data set is read
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, got {limit}")
        if isinstance(examples, (str, Data)):
            given = Data(examples) if isinstance(examples, str) else examples
            dataset, data = datasets.load(given.name, given.data_dir, given.test_data), given
            samples, default_metric = list(split_to_score(self.graph, dataset, split, sizes)[:limit]), dataset.metric
        else:
            data = None  # examples given in Python
            if sizes:
                raise TypeError(f"{next(iter(sizes))} cuts a data set; examples given as a list are scored whole")
            samples, default_metric = from_records(examples, "example")[:limit], "exact"
        chosen = metric if metric is not None else metric_for(self.graph, default_metric)
        models = self._models(learning=False)
        for name in models.values():  # before any call
            check_callable(name)
        llm = self._llm()
        scorer = self._metric(chosen, llm)
        unanswered = [s.id for s in samples if not s.answer and not self.graph.answer_field]
        if data is None and unanswered and isinstance(scorer, str):
            raise DataError(
                f"{unanswered[0]} has no expected output: give each example an "
                f"{', '.join(datasets.ANSWER_COLUMNS[:-1])} or {datasets.ANSWER_COLUMNS[-1]}, "
                "or score with a metric of your own"
            )
        with llm.stops.command():  # one batch: it stops early when its first calls show it cannot work
            evaluation = await evaluate(self.graph, llm, samples, scorer, mapping or {}, on_done)
        if runs_dir is None:
            return evaluation
        settings = RunSettings(
            self.path,
            data.name if data else "examples",
            self.method(None, **sizes),  # the sizes and seed that drew the split
            models,
            data.test_data if data else None,
        )
        scored = {
            "split": split,
            "metric": chosen if isinstance(chosen, str) else str(getattr(chosen, "__name__", chosen)),
            "limit": limit,
        }
        record = RunRecord.of_evaluation(Path(runs_dir), settings, self.prompts, evaluation, scored)
        return replace(evaluation, record=record.folder)

    def _metric(self, metric: str | Metric, llm: LLM) -> str | Scorer:
        """What scores: a built-in's name passes through; a metric the file defines (a judge asks `llm`, a function
        is imported now, from beside the pipeline) and a callable given in Python become a Scorer."""
        if callable(metric):
            return self._scorer(metric, str(getattr(metric, "__name__", metric)))
        if metric in METRICS:
            return metric
        spec = self.graph.metrics.get(metric)
        if spec is None:
            defined = f"; {self.path} defines {', '.join(self.graph.metrics)}" if self.graph.metrics else ""
            raise SettingError(
                Option("metric", "--metric"),
                f": no metric {metric!r}{did_you_mean(metric, [*METRICS, *self.graph.metrics])} (built in: "
                f"{', '.join(METRICS)}{defined})",
            )
        if spec.kind == "judge":
            return judge(self.graph, llm, spec)
        return self._scorer(self._function(spec), spec.name)

    def _scorer(self, metric: Callable, name: str) -> Scorer:
        """A metric written in Python, asked with a Prediction and the example as given: a bool or a number from 0
        to 1, or with a reason, `(score, reason)`. One that raises or returns anything else fails for that sample
        (MetricFailed), not for the run."""
        if inspect.iscoroutinefunction(metric) or inspect.iscoroutinefunction(type(metric).__call__):  # noqa: B004 (an async __call__)
            raise TypeError(
                f"the metric {name!r} is async; a metric is a plain function (prediction, example) -> score"
            )
        no_usage = Usage(0, 0, 0, 0, 0.0)

        async def score(trace: Trace, sample: Sample, expected: str) -> Verdict:
            prediction = Prediction(_typed(self.graph, trace.output), trace.output, trace.final.error, trace, no_usage)
            return await python_verdict(
                metric, name, prediction, sample.given or {**sample.fields, "answer": sample.answer}
            )

        return score

    def _function(self, spec: MetricSpec) -> Callable:
        """A function metric's function, imported only now that a run scores with it (never by check, compile or
        load), and only from where a function node's may be: the pipeline's folder, or a module the caller allowed
        (runtime/code.py; CodeError otherwise)."""
        return load_callable(str(spec.function), os.path.dirname(os.path.abspath(self.path)), self._allowed)

    # --- improving it --------------------------------------------------------------

    @property
    def models(self) -> Mapping[str, str]:
        """The model of each role and named model an optimize run calls, as its record keeps them; LLMError when one
        has none (nor the embedded one)."""
        return self._models(learning=True)

    def _models(self, learning: bool) -> dict[str, str]:
        """The models a run calls: the nodes' and the judges', and with `learning` the backward and optimizer
        roles. A role no call takes (the forward role, when every node names its model) needs no model: asking
        for one would fail a run that never uses it wherever the embedded model is not installed."""
        used = {node.model for node in self.graph.model_nodes}
        used |= {spec.model for spec in self.graph.metrics.values() if spec.kind == "judge"}
        used |= {"backward", "optimizer"} if learning else set()
        return {key: str(resolve_model(spec).name) for key, spec in self._session.models.items() if key in used}

    def method(self, method: Method | None = None, **settings: Any) -> Method:
        """The method a run would take: `method` (default: the pipeline's `optimize` block) with `settings`
        (Method's fields as keyword arguments) changed. Raises ValueError for a setting out of its range and
        for a param `only` cannot optimize, TypeError for a setting that is not one."""
        method = (method or self.graph.optimize).changed(settings)
        for name in method.only:
            if name not in self.graph.prompts:
                raise SettingError(
                    Option("only", "--only"),
                    f": no param '{name}'{did_you_mean(name, self.graph.prompts)} "
                    f"(params: {', '.join(self.graph.prompts)})",
                )
            if name not in self.graph.trainable and name not in self.graph.trainable_demos:
                raise SettingError(Option("only", "--only"), f": param '{name}' is frozen or used by no node")
        return method

    def plan(
        self,
        train: Examples | str | Data,
        val: Examples = (),
        test: Examples = (),
        *,
        method: Method | None = None,
        metric: str | Metric | None = None,
        mapping: Mapping[str, str] | None = None,
        **settings: Any,
    ) -> Plan:
        """The most calls, tokens and cost `optimize` can take with these arguments (a judge's calls too); calls no
        model."""
        run = self._run(train, val, test, method, settings)
        chosen = metric if metric is not None else metric_for(self.graph, run.metric)
        spec = self.graph.metrics.get(chosen) if isinstance(chosen, str) else None
        return plan(
            self.graph,
            LLM(self._session.models),
            run.settings.method,
            *run.splits,
            mapping or {},
            spec if spec is not None and spec.kind == "judge" else None,
        )

    def optimize(
        self,
        train: Examples | str | Data,
        val: Examples = (),
        test: Examples = (),
        *,
        method: Method | None = None,
        metric: str | Metric | None = None,
        mapping: Mapping[str, str] | None = None,
        runs_dir: str | Path = ".sbpc/runs",
        resume: bool = False,
        write: bool | str | Path = False,
        log: Callable[[str], None] | None = None,
        progress: Callable[[str, int], Callable[[object], None]] | None = None,
        **settings: Any,
    ) -> Optimized:
        """Semantic backpropagation, as `sbpc optimize` runs it, with a run record in `runs_dir`.

        `train`, `val`, `test`: lists of examples; or `train` alone a data set (its name or path, or a Data), cut
        into the three splits by the method's sizes and seed. `method` (default: the pipeline's `optimize`
        block) with `settings` (Method's fields as keyword arguments) changed: see `Pipeline.method`. `write`:
        True writes every accepted step into the source file at once (so an interrupted run keeps it), a path
        writes it there; False writes nothing until `.pipeline.save()`. `resume`: continue the last unfinished
        run asked exactly the same. `log` hears a line per iteration, `progress` of each phase and its size."""
        return self._sync(
            self.aoptimize(
                train,
                val,
                test,
                method=method,
                metric=metric,
                mapping=mapping,
                runs_dir=runs_dir,
                resume=resume,
                write=write,
                log=log,
                progress=progress,
                **settings,
            )
        )

    async def aoptimize(
        self,
        train: Examples | str | Data,
        val: Examples = (),
        test: Examples = (),
        *,
        method: Method | None = None,
        metric: str | Metric | None = None,
        mapping: Mapping[str, str] | None = None,
        runs_dir: str | Path = ".sbpc/runs",
        resume: bool = False,
        write: bool | str | Path = False,
        log: Callable[[str], None] | None = None,
        progress: Callable[[str, int], Callable[[object], None]] | None = None,
        **settings: Any,
    ) -> Optimized:
        """`optimize` for async code: runs on the caller's event loop."""
        self._session.check_open()  # before a run record is made
        run = self._run(train, val, test, method, settings)
        for name in run.settings.models.values():  # before a run record is made
            check_callable(name)
        train_, val_, test_ = run.splits
        log = log or (lambda line: None)
        llm = self._llm()
        scorer = self._metric(metric if metric is not None else metric_for(self.graph, run.metric), llm)
        # what could not be scored or written is said now, before a record or a call
        check_answers(self.graph, [*train_, *val_, *test_], scorer)
        out = None if isinstance(write, bool) else str(write)
        writer = WriteBack(self.graph.pipeline, out, write is False)
        source = self.graph.pipeline.text
        if resume:
            record = RunRecord.resume(Path(runs_dir), run.settings, source)
            log(f"resuming {record.folder} after iteration {len(record.data.iterations)}")
        else:
            record = RunRecord.create(Path(runs_dir), run.settings, self.prompts, source)
        initial = self.with_prompts(record.data.initial_prompts)
        writer.report_to(record)

        def accept(graph: Graph) -> None:
            notice = writer(graph.prompts)
            if notice:
                log(notice)

        with llm.stops.command():  # one run: it stops early when its first calls show it cannot work
            outcome = await Optimizer(
                initial.graph,
                llm,
                run.settings.method,
                scorer,
                mapping or {},
                train_,
                val_,
                test_,
                record,
                accept,
                log,
                progress,
            ).run()
        written = writer.target if write is not False else None
        return Optimized(self._sibling(outcome.graph), initial, outcome, record.folder, written)

    def _run(
        self, train: Examples | str | Data, val: Examples, test: Examples, method: Method | None, settings: Mapping
    ) -> _Run:
        """What a run on these examples is asked, its splits, and the metric their data set scores with."""
        resolved = self.method(method, **settings)
        if isinstance(train, (str, Data)):
            data = Data(train) if isinstance(train, str) else train
            if val or test:
                raise TypeError("val and test go with train examples; a data set is cut by the method's sizes")
            dataset = datasets.load(data.name, data.data_dir, data.test_data)
            # val is drawn for the gate, or when asked for (compare tests every row of a seed on the same samples)
            val_size = resolved.val_size if resolved.gate == "val" or "val_size" in settings else 0
            splits = datasets.make_splits(dataset, resolved.train_size, val_size, resolved.test_size, resolved.seed)
            resolved = replace(resolved, val_size=val_size)
            run = _Run(
                RunSettings(self.path, data.name, resolved, self.models, data.test_data),
                (list(splits.train), list(splits.val), list(splits.test)),
                dataset.metric,
            )
            empty = {
                "train": ("the train split is empty: give ", Option("train_size", "--train-size"), " of at least 1"),
                "gate": (
                    "the gate split is empty: give ",
                    Option(*(("val_size", "--val-size") if resolved.gate == "val" else ("train_size", "--train-size"))),
                    " of at least 1, or ",
                    Option("gate='none'", "--no-gate"),
                ),
            }
        else:
            sizes = [size for size in SIZES if size in settings]
            if sizes:
                raise TypeError(f"{sizes[0]} cuts a data set; examples given as lists are their own sizes")
            samples = from_records(train, "train"), from_records(val, "val"), from_records(test, "test")
            resolved = replace(
                resolved, train_size=len(samples[0]), val_size=len(samples[1]), test_size=len(samples[2])
            )
            run = _Run(RunSettings(self.path, "examples", resolved, self.models), samples, "exact")
            empty = {
                "train": ("train is empty: optimizing learns from the training examples' errors",),
                "gate": (
                    f"the gate split ({'train' if resolved.gate == 'train' else 'val'}) is empty: "
                    "give examples for it, or gate='none'",
                ),
            }
        train_, val_, _ = run.splits
        if resolved.iterations and not train_:
            raise SettingError(*empty["train"])
        if resolved.gate != "none" and not (train_ if resolved.gate == "train" else val_):
            raise SettingError(*empty["gate"])
        return run

    # --- the event loops -----------------------------------------------------------

    def _llm(self) -> LLM:
        return self._session.llm()

    def _sync(self, work: Awaitable[T]) -> T:
        return self._session.sync(work)

    def close(self) -> None:
        """Close the connections that sync calls opened (they also close when the pipeline is collected).
        Every later call, here or on a `with_prompts` twin, raises PipelineClosed; closing again does nothing."""
        self._session.close()

    async def aclose(self) -> None:
        """Close the connections this event loop's calls opened."""
        llm = self._session.llms.pop(asyncio.get_running_loop(), None)
        if llm is not None:
            await llm.aclose()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Pipeline {self.graph.pipeline.name} from {self.path}: {', '.join(self.inputs)} -> {self.graph.output}>"
        )


class _Lost(CallFailed):
    """CallFailed for a prediction with no answer: the trace's reason, and the failure of the call behind it
    (None when a prompt did not render)."""

    def __init__(self, prediction: Prediction):
        cause = next((t for t in prediction.trace.nodes.values() if t.failure), None)
        Exception.__init__(self, f"{cause.node}: {cause.error}" if cause else prediction.error)
        self.failure = cause.failure if cause else None
        self.prediction = prediction


class _Session:
    """What a pipeline and its `with_prompts` twins share: models, limits, cache, ledger, and one LLM layer
    per event loop (its semaphore and connections belong to that loop); sync calls run on a private loop,
    one per thread (a loop runs in one thread at a time)."""

    def __init__(self, models: dict[str, ModelSpec], cache: ResponseCache | None, limits: dict):
        self.models, self.cache, self.limits = models, cache, limits
        self.ledger = Ledger()
        self.llms: dict[asyncio.AbstractEventLoop, LLM] = {}
        self.loops: dict[int, asyncio.AbstractEventLoop] = {}  # thread id -> its private loop
        self._finalizers: list[weakref.finalize] = []
        self._lock = threading.Lock()  # threads add and drop loops' LLM layers
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise PipelineClosed(
                "this pipeline is closed (close() was called, or its `with` block ended); "
                "load it again to make more calls"
            )

    def llm(self) -> LLM:
        self.check_open()
        loop = asyncio.get_running_loop()
        with self._lock:
            if loop not in self.llms:
                for gone in [old for old in self.llms if old.is_closed()]:  # asyncio.run's loops, ended
                    del self.llms[gone]
                # long-lived: a call fails alone; each evaluate or optimize is a command that may stop early
                self.llms[loop] = LLM(
                    self.models, cache=self.cache, ledger=self.ledger, whole_session=False, **self.limits
                )
            return self.llms[loop]

    def sync(self, work: Awaitable[T]) -> T:
        try:
            asyncio.get_running_loop()
            inside_a_loop = True
        except RuntimeError:
            inside_a_loop = False
        if self.closed or inside_a_loop:
            getattr(work, "close", lambda: None)()  # never started: no "never awaited" warning
            self.check_open()
            raise RuntimeError(
                "a Pipeline's sync methods cannot run inside an event loop: "
                "use `await pipeline.acall(...)`, `abatch` or `aevaluate`"
            )
        loop = self.loops.get(threading.get_ident())
        if loop is None or loop.is_closed():
            loop = self.loops[threading.get_ident()] = asyncio.new_event_loop()
            self._finalizers.append(weakref.finalize(self, _shut, loop, self.llms))
        try:
            return loop.run_until_complete(work)
        except BaseException:  # Ctrl-C: the rows still in flight must not go on calling at the next use
            _cancel_pending(loop)
            raise

    def close(self) -> None:
        self.closed = True
        for finalizer in self._finalizers:
            finalizer()


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _shut(loop: asyncio.AbstractEventLoop, llms: dict) -> None:
    """Close a private loop's connections, then the loop (not one another thread is running a call on)."""
    if loop.is_closed() or loop.is_running():
        return
    _cancel_pending(loop)
    llm = llms.pop(loop, None)
    if llm is not None:
        loop.run_until_complete(llm.aclose())
    loop.close()


def _check_concurrency(concurrency: Any) -> None:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a whole number of at least 1, got {concurrency!r}")


@dataclass(frozen=True)
class _Run:
    settings: RunSettings
    splits: tuple[list[Sample], list[Sample], list[Sample]]  # train, val, test
    metric: str  # the data set's, for a pipeline that names none


def _input_text(name: str, value: Any) -> str:
    """One input as text; a value JSON cannot hold (bytes, a set, a tuple key, nesting past Python's limit) or
    UTF-8 cannot carry (a lone surrogate) is named."""
    try:
        text = as_text(value)
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"input '{name}' holds a lone surrogate ({exc.object[exc.start]!r}), which no model request can carry"
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        reason = "it nests too deeply" if isinstance(exc, RecursionError) else exc
        raise InputError(f"input '{name}' cannot be sent as text or JSON: {reason}") from None
    return text


def _typed(graph: Graph, text: str | None) -> Any:
    """The answer as Python: a number as int or float, a JSON value or a record (a dict) as read from JSON."""
    return None if text is None else python_value(graph.output_type, text)
