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
import contextlib
import functools
import json
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from . import telemetry
from .errors import Option, OptionError
from .language.blocks.method import Method, SettingError
from .language.diagnostics import PipelineError, did_you_mean, url_problem
from .language.graph.compile import compile_file
from .language.graph.graph import MODEL_ROLES, Graph, ModelSpec
from .language.nodes.demos import from_text
from .language.nodes.outputs import python_value
from .language.nodes.trace import Trace
from .models.batch import JOURNAL, Batch, Batches, Journal, refusal, refuse
from .models.cache import ResponseCache
from .models.llm import LLM, BudgetExceeded, CallFailed, Ledger, LLMError, check_callable
from .models.prices import DECLARED
from .models.request import LIMITS
from .runtime import splits
from .runtime.code import bind, release
from .runtime.datasets import DataError, Sample
from .runtime.evaluate import (
    Evaluation,
    Result,
    Scorer,
    Tally,
    check_answers,
    check_fields,
    evaluate,
    first_needed,
    metric_for,
    split_to_score,
)
from .runtime.forward import run
from .runtime.inputs import input_texts, prompt_texts
from .runtime.scoring import scorer_for
from .runtime.session import Session, check_concurrency
from .runtime.splits import Data
from .runtime.tasks import together

if TYPE_CHECKING:
    from .learning.optimize import Outcome
    from .learning.plan import Plan
    from .models.ledger import RoleUsage
    from .records.evaluation import EvalRecord
    from .records.record import RunRecord, RunSettings

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


T = TypeVar("T")
P = ParamSpec("P")
Metric = Callable[["Prediction", Mapping[str, Any]], "bool | float | tuple[bool | float, str]"]
Examples = Sequence[Mapping[str, Any] | Sample]
BATCHED = 1 << 30  # calls in flight at once when they wait in a batch: every one a round has


def load(
    path: str | Path,
    *,
    model: str | None = None,
    roles: Mapping[str, str | Mapping[str, Any]] | None = None,
    api_base: str | None = None,
    concurrency: int | None = None,
    timeout: float = 120.0,
    cache: bool | str | Path = True,
    max_calls: int | None = None,
    max_cost: float | None = None,
    functions: Mapping[str, Callable[..., Any]] | None = None,
    allow_modules: Iterable[str] = (),
    code: bool = True,
    resume: bool | str | Path = False,
    otel: bool = False,
    otel_content: bool | None = None,
) -> Pipeline:
    """Compile a .sbp or YAML pipeline file; raises PipelineError with every located diagnostic.

    `model` names the litellm model for every call: every role's and every named model's. `roles` overrides
    one model at a time, a role or a named model (`model fast { }`), with a name or a mapping of model
    settings (`{"backward": {"name": "openai/gpt-4o", "temperature": 0}, "fast": "openai/gpt-4o-mini"}`).
    `cache`: True for the shared response cache, a path for another one, False for none.
    The callables of function nodes: `functions` maps a declared function's name to one, imported from nowhere;
    the others are imported from the pipeline's folder, or from the modules `allow_modules` names (anything else
    is refused: a pipeline file is data from strangers; see runtime/code.py). A function metric is imported from
    the same places, once a run scores with it. `code=False` imports nothing, for what runs no code (a plan):
    its function nodes cannot run. `otel=True` exports OpenTelemetry spans of every run, call and step
    (docs/telemetry.md); `otel_content=True` puts prompt and reply text in them (None: as
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says).
    `resume`: an optimize run killed while it wrote into the file left it torn (E016) and the whole text beside
    it; when that text is what the file's newest unfinished run (in `.sbpc/runs`, or the runs folder `resume`
    names) was writing, the write is finished first, as `sbpc optimize --resume` does, so that
    `optimize(resume=True)` continues the run on the file it meant to leave; `.finished_write` then says so.
    """
    if isinstance(allow_modules, str):
        raise TypeError(f"allow_modules takes a list of module names, e.g. [{allow_modules!r}]")
    allowed = tuple(allow_modules)
    finished = None
    if resume is not False:  # before the file is read, which refuses a torn one
        from .records.record import RunRecord  # ~40 ms to import (measured): a resumed load alone pays it

        finished = RunRecord.finish_interrupted_write(Path(".sbpc/runs" if resume is True else resume), str(path))
    graph = compile_file(str(path))
    graph = bind(graph, functions, allowed) if code else graph
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
        otel=otel,
        otel_content=otel_content,
        finished_write=finished,
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
    _check_roles(graph, roles, api_base)
    return {role: _model(spec, roles.get(role, {}), model, api_base, folder) for role, spec in graph.models.items()}


def _check_roles(graph: Graph, roles: Mapping[str, str | Mapping[str, Any]], api_base: str | None) -> None:
    """Roles that name no role or model of the pipeline, a forward role no call takes, and a bad --api-base."""
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


def _model(
    spec: ModelSpec, own: str | Mapping[str, Any], model: str | None, api_base: str | None, folder: Path
) -> ModelSpec:
    """One role's model: the caller's settings (`own`, or `model` for every role) over the file's."""
    role = spec.role
    if not isinstance(own, (str, Mapping)):
        raise TypeError(f"roles[{role!r}] must be a model name or a mapping of settings, got {own!r}")
    own = {"name": own} if isinstance(own, str) else dict(own)
    name = own.pop("name", None) or model or spec.name
    settings = {**spec.settings, **({"api_base": api_base} if api_base else {}), **own}
    if spec.name and name and provider(name) != provider(spec.name) and not api_base:
        for key in SERVER_SETTINGS:  # the file's server and key answer for its provider, not another's
            if key not in own:
                settings.pop(key, None)
    if spec.name and name != spec.name:  # the file's prices are its model's, not another's
        for key in DECLARED:
            if key not in own:
                settings.pop(key, None)
    if "router" in spec.settings and "router" not in own:
        settings["router"] = os.path.abspath(folder / str(spec.settings["router"]))
    return ModelSpec(role, name, settings)


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

    @classmethod
    def of(cls, graph: Graph, trace: Trace) -> Usage:
        """What the calls of a trace cost: its model nodes' (a function node costs nothing); a cache hit is free."""
        models = [trace.nodes[node.name] for node in graph.model_nodes]
        calls = [t for t in models if t.reply and not t.cached]
        return cls(
            len(calls),
            sum(t.cached for t in models),
            sum(t.prompt_tokens for t in calls),
            sum(t.completion_tokens for t in calls),
            sum(t.cost for t in calls),
        )


NO_USAGE = Usage(0, 0, 0, 0, 0.0)  # a prediction a metric is shown: scoring it costs the answer nothing


@dataclass(frozen=True)
class Prediction:
    """A pipeline's answer: `output` typed by the output node (str, int/float, JSON value, a record as a dict) or
    by the field of it that is scored (`output judge.verdict`), None when it has none."""

    output: Any
    text: str | None  # the output as the metric sees it
    error: str | None  # why there is no output: an unparsable reply, or a call that failed
    trace: Trace
    usage: Usage

    @classmethod
    def of(cls, graph: Graph, trace: Trace, usage: Usage = NO_USAGE) -> Prediction:
        """A trace's answer, typed as Python: a number as int or float, a JSON value or a record as read from JSON."""
        typed = None if trace.output is None else python_value(graph.output_type, trace.output)
        return cls(typed, trace.output, trace.final.error, trace, usage)

    def __repr__(self) -> str:  # the trace holds every prompt and reply: too long to read
        said = f"error {self.error!r}" if self.output is None else f"output {self.output!r}"
        return f"<Prediction {said}; {self.usage.calls} calls, ${self.usage.cost:.4f}>"

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

    def __repr__(self) -> str:  # the pipelines and the outcome run long
        changed = [name for name, text in self.pipeline.prompts.items() if self.initial.prompts.get(name) != text]
        what = f"{len(changed)} prompt(s) changed ({', '.join(changed)})" if changed else "no prompt changed"
        return f"<Optimized {self.pipeline.graph.pipeline.name}: {what}; run record {self.record}>"

    @property
    def diff(self) -> str:
        """The change to the source file, as a unified diff ("" when no prompt changed)."""
        from .language.tooling.writeback import (  # ~4 ms to import (measured): run and eval never pay it
            rewrite,
            unified_diff,
        )

        before = rewrite(self.initial.graph.pipeline, self.initial.prompts)
        after = rewrite(self.pipeline.graph.pipeline, self.pipeline.prompts)
        return unified_diff(before, after, self.pipeline.path)


def _blocking(
    coroutine: Callable[Concatenate[Pipeline, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Pipeline, P], T]:
    """The sync form of an async method of Pipeline, its one definition: the same signature and doc, run on the
    pipeline's private event loop."""

    @functools.wraps(coroutine)
    def method(self: Pipeline, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._session.sync(coroutine(self, *args, **kwargs))

    method.__name__ = coroutine.__name__.removeprefix("a")
    method.__qualname__ = f"Pipeline.{method.__name__}"
    method.__doc__ = (
        f"{coroutine.__doc__}\n\nRuns on the pipeline's own event loop; `{coroutine.__name__}` runs on the caller's."
    )
    return method


class Pipeline:
    """A compiled pipeline, callable like a function. Build one with `load`."""

    def __init__(
        self,
        graph: Graph,
        *,
        models: Mapping[str, ModelSpec],
        concurrency: int | None = None,
        timeout: float = 120.0,
        cache: bool | str | Path | ResponseCache = True,
        max_calls: int | None = None,
        max_cost: float | None = None,
        allow_modules: Iterable[str] = (),
        otel: bool = False,
        otel_content: bool | None = None,
        finished_write: str | None = None,
    ):
        """`allow_modules`: modules a function metric may be imported from, besides the pipeline's folder. `otel`:
        export spans (TelemetryError when OpenTelemetry is not installed). `finished_write`: what `load(resume=...)`
        said of an interrupted write into the file it finished before reading it (None: it finished none)."""
        check_concurrency(concurrency)
        self.graph, self._allowed, self.finished_write = graph, tuple(allow_modules), finished_write
        limits = dict(concurrency=concurrency, timeout=timeout, max_calls=max_calls, max_cost=max_cost)
        tracing = telemetry.start(telemetry.content_asked(otel_content)) if otel else None
        self._session = Session(dict(models), cache, limits, tracing)

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
        return self._sibling(self.graph.with_prompts(prompt_texts(self.graph, prompts)))

    def _sibling(self, graph: Graph) -> Pipeline:
        twin = Pipeline.__new__(Pipeline)
        twin.graph, twin._session, twin._allowed = graph, self._session, self._allowed
        return twin

    def save(self, path: str | Path | None = None) -> Path:
        """Write the current prompts into the source file (or `path`), exactly as `sbpc optimize` does:
        only the changed literals, proved by re-parsing, atomically; never over a file changed since it was read."""
        if path is not None and not str(path).strip():
            raise ValueError("save(path): an empty path names no file; give a file name, or None for the source")
        from .language.tooling.writeback import WriteBack  # ~4 ms to import (measured): run and eval never pay it

        writer = WriteBack(self.graph.pipeline, None if path is None else str(path))
        writer(self.prompts)
        return writer.target

    # --- calling it ----------------------------------------------------------------

    def __call__(self, **inputs: Any) -> Prediction:
        """Run the pipeline on one input; raises CallFailed when a call failed for good."""
        return self._session.sync(self.acall(**inputs))

    async def acall(self, **inputs: Any) -> Prediction:
        """`pipeline(...)` for async code: runs on the caller's event loop."""
        prediction = await self._predict(inputs)
        if prediction.failed:
            raise _Lost(prediction)
        return prediction

    async def abatch(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        concurrency: int | None = None,
        on_done: Callable[[Prediction], None] | None = None,
    ) -> list[Prediction]:
        """Many inputs, at most `concurrency` rows in flight, predictions in input order.
        A row whose call failed gets a Prediction with `.failed` and the cause in `.error`; the others go on."""
        self._session.check_open()
        if concurrency is not None:
            check_concurrency(concurrency)
        rows = [input_texts(self.graph, row) for row in rows]  # every row is checked before the first call
        bound = asyncio.Semaphore(concurrency or len(rows) or 1)

        async def one(row: Mapping[str, Any]) -> Prediction:
            async with bound:
                prediction = await self._predict(row, checked=True)
            if on_done:
                on_done(prediction)
            return prediction

        return await together((one(row) for row in rows), apart=True)

    batch = _blocking(abatch)

    async def _predict(self, inputs: Mapping[str, Any], checked: bool = False) -> Prediction:
        llm = self._session.llm()
        with telemetry.exporting(self._session.tracing):
            trace = await run(self.graph, llm, inputs if checked else input_texts(self.graph, inputs))
        return Prediction.of(self.graph, trace, Usage.of(self.graph, trace))

    # --- scoring it ----------------------------------------------------------------

    async def aevaluate(
        self,
        examples: Examples | str | Data | None = None,
        metric: str | Metric | None = None,
        *,
        split: str = "test",
        limit: int | None = None,
        mapping: Mapping[str, str] | None = None,
        on_done: Callable[[Result], None] | None = None,
        runs_dir: str | Path | None = None,
        batch: bool | Batch = False,
        keep: int | None = None,
        resume: bool = False,
        **sizes: int,
    ) -> Evaluation:
        """Score the pipeline on examples: a list of dicts (inputs and an `answer`, `label` or `target`), or a
        data set (its name or path, or a Data; default: the file's data block), of which `split` is scored: the split `optimize` would draw with
        these `sizes` (train_size, val_size, test_size, seed; your own file is scored whole when none is given).
        `metric`: "exact" | "numeric" | "json" or a callable `(prediction, example) -> bool | float`; default: the
        pipeline's `metric`, else the data set's. `on_done` hears of each result as it comes. `runs_dir`: keep a
        run record of the evaluation there (every sample with each node's prompt and reply, a line as it finishes),
        named by `.record`; `resume`: go on with its newest unfinished one asked the same (and the batches it had
        sent). `keep`: hold only the running sums and the first `keep` samples not answered right (`.wrong`), for
        data too long to hold. `batch`: send the model calls through the provider's batch API at its batch price
        (True, or a `Batch` that hears progress)."""
        self._session.check_open()  # before the data set is read
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, got {limit}")
        data = splits.named(self.graph, examples)  # a Data, or examples given in Python
        if isinstance(data, Data):
            dataset = data.load(first_needed(self.graph, split, sizes, limit))
            samples, default_metric = list(split_to_score(self.graph, dataset, split, sizes)[:limit]), dataset.metric
        else:
            samples, default_metric = splits.examples_to_score(data, sizes)[:limit], "exact"
        chosen = metric if metric is not None else metric_for(self.graph, default_metric)
        models = self._session.model_names(self.graph, learning=False)
        _batchable(self._session, batch, models)  # before any call, and before what a model needs installed
        for key, name in models.items():  # before any call
            check_callable(name, routed=self._session.routed(key))
        scored = {"split": split, "metric": chosen if isinstance(chosen, str) else _name(chosen), "limit": limit}
        if resume and runs_dir is None:
            raise ValueError("resume=True goes on with an evaluation's run record: give the runs_dir it was kept in")
        kept = runs_dir and _Recording(self, Path(runs_dir), resume, splits.source_of(data), sizes, models, scored)
        asked, samples = len(samples), [s for s in samples if not kept or s.id not in kept.done]
        async with _calls(self._session, batch, kept or None) as llm:
            scorer = self._scorer(chosen, llm)
            if not isinstance(data, Data) and isinstance(scorer, str):  # a built-in metric needs answers
                splits.require_answers(self.graph, samples)
            # one batch: it stops early when its first calls show it cannot work
            with llm.stops.command(), telemetry.exporting(self._session.tracing), llm.ledger.account() as spent:
                heard = kept.heard(on_done) if kept else on_done
                evaluation = await evaluate(self.graph, llm, samples, scorer, mapping or {}, heard, keep=keep)
        return kept.finish(evaluation, asked, spent) if kept else evaluation

    evaluate = _blocking(aevaluate)

    # --- improving it --------------------------------------------------------------

    @property
    def models(self) -> Mapping[str, str]:
        """The model of each role and named model an optimize run calls, as its record keeps them; LLMError when one
        has none (nor the embedded one)."""
        return self._session.model_names(self.graph, learning=True)

    def _scorer(self, metric: str | Metric, llm: LLM) -> str | Scorer:
        return scorer_for(self.graph, metric, llm, self._allowed, functools.partial(Prediction.of, self.graph))

    def method(self, method: Method | None = None, **settings: Any) -> Method:
        """The method a run would take: `method` (default: the pipeline's `optimize` block) with `settings`
        (Method's fields as keyword arguments) changed. Raises ValueError for a setting out of its range and
        for a param `only` cannot optimize, TypeError for a setting that is not one."""
        return splits.method_for(self.graph, method or self.graph.optimize, settings)

    def plan(
        self,
        train: Examples | str | Data | None = None,
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
        # the optimize loop and what it needs, ~40 ms to import (measured): run and eval never pay it
        from .learning.plan import plan

        run = splits.for_run(self.graph, train, val, test, self.method(method, **settings), settings)
        chosen = metric if metric is not None else metric_for(self.graph, run.cut.metric)
        spec = self.graph.metrics.get(chosen) if isinstance(chosen, str) else None
        judged = spec if spec is not None and spec.kind == "judge" else None
        check_fields(self.graph, [sample for split in run.cut.splits for sample in split], mapping or {})
        found = plan(self.graph, LLM(self._session.models), run.cut.method, *run.cut.splits, mapping or {}, judged)
        return replace(found, data=run.cut.note)

    async def aoptimize(
        self,
        train: Examples | str | Data | None = None,
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

        `train`, `val`, `test`: lists of examples; or `train` alone a data set (its name or path, or a Data;
        default: the file's data block), cut into the three splits by the method's sizes and seed. `method` (default: the pipeline's `optimize`
        block) with `settings` (Method's fields as keyword arguments) changed: see `Pipeline.method`. `write`:
        True writes every accepted step into the source file at once (so an interrupted run keeps it), a path
        writes it there; False writes nothing until `.pipeline.save()`. `resume`: continue the last unfinished
        run asked exactly the same. `log` hears a line per iteration, `progress` of each phase and its size."""
        # the optimize loop and the run record, ~40 ms to import (measured): run and eval never pay it
        from .language.tooling.writeback import WriteBack
        from .learning.optimize import Optimizer
        from .learning.strategies import check_acting, check_priced
        from .records.record import RunSettings
        from .records.step_writer import StepWriter

        self._session.check_open()  # before a run record is made
        run = splits.for_run(self.graph, train, val, test, self.method(method, **settings), settings)
        check_acting(self.graph, run.cut.method)
        # a model for every role, which a plan does not need
        asked = RunSettings(self.path, method=run.cut.method, models=self.models, **run.source)
        for key, name in asked.models.items():  # before a run record is made
            check_callable(name, routed=self._session.routed(key))
        every = [sample for split in run.cut.splits for sample in split]
        log = log or (lambda line: None)
        llm = self._session.llm()
        check_priced(self.graph, run.cut.method, llm)
        scorer = self._scorer(metric if metric is not None else metric_for(self.graph, run.cut.metric), llm)
        # what could not be scored or written is said now, before a record or a call
        check_fields(self.graph, every, mapping or {})
        check_answers(self.graph, every, scorer)
        writer = WriteBack(self.graph.pipeline, None if isinstance(write, bool) else str(write), write is False)
        record = _run_record(Path(runs_dir), asked, self, resume, log)
        initial = self.with_prompts(record.data.initial_prompts)
        # one run: it stops early when its first calls show it cannot work
        with llm.stops.command(), telemetry.exporting(self._session.tracing):
            steps = StepWriter(writer, record, log)
            outcome = await Optimizer(
                initial.graph, llm, run.cut.method, scorer, mapping or {}, *run.cut.splits, record, steps, log, progress
            ).run()
        written = writer.target if write is not False else None
        return Optimized(self._sibling(outcome.graph), initial, outcome, record.folder, written)

    optimize = _blocking(aoptimize)

    # --- the event loops -----------------------------------------------------------

    def close(self) -> None:
        """Close what sync calls opened, and its tools' MCP servers; later calls (a twin's too) raise PipelineClosed."""
        self._session.close()
        release(self.graph)

    async def aclose(self) -> None:
        """Close the connections this event loop's calls opened, and stop its tools' MCP servers."""
        await asyncio.gather(self._session.aclose(), asyncio.to_thread(release, self.graph))

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Pipeline {self.graph.pipeline.name} from {self.path}: {', '.join(self.inputs)} -> {self.graph.output}>"
        )


class _Recording:
    """An evaluation's run record: made when its first sample finishes, so the first call waits on no import of the
    record (~10 ms, measured); a resumed one at once, since the samples it holds decide which are asked."""

    def __init__(
        self,
        pipeline: Pipeline,
        runs_dir: Path,
        resume: bool,
        source: Mapping[str, Any],
        sizes: Mapping[str, int],
        models: Mapping[str, str],
        scored: Mapping[str, object],
    ):
        self.pipeline, self.runs_dir, self.resume, self.scored = pipeline, runs_dir, resume, scored
        self.source, self.sizes, self.models = source, sizes, models
        self.before = Tally()  # the running sums of the samples a resumed record had finished
        self.record = self._made() if resume else None
        self.batches: Journal | None = None  # a batch evaluation's batches, kept beside its record

    def _made(self) -> EvalRecord:
        # ~10 ms to import (measured): only an evaluation that keeps a record pays it, after its first call
        from .records.evaluation import EvalRecord
        from .records.record import RunSettings

        method = self.pipeline.method(None, **self.sizes)
        settings = RunSettings(self.pipeline.path, method=method, models=self.models, **self.source)
        if self.resume:
            return EvalRecord.resume(self.runs_dir, settings, self.pipeline.prompts, self.scored, self.before)
        return EvalRecord.start(self.runs_dir, settings, self.pipeline.prompts, self.scored)

    @property
    def done(self) -> set[str]:
        return self.record.done if self.record else set()

    def journal(self) -> Journal:
        """Where a batch evaluation keeps its batches' ids the moment each is made: in its record's folder (made now,
        before any call), so a killed run resumed finds them again and sends none twice."""
        self.record = self.record or self._made()
        self.batches = Journal(self.record.opened().folder / JOURNAL)
        return self.batches

    def heard(self, on_done: Callable[[Result], None] | None) -> Callable[[Result], None]:
        """What hears of each sample as it finishes: the record, then `on_done`."""

        def done(result: Result) -> None:
            self.record = self.record or self._made()
            self.record.add(result)
            if on_done is not None:
                on_done(result)

        return done

    def finish(self, evaluation: Evaluation, asked: int, spent: RoleUsage) -> Evaluation:
        """The evaluation with the samples a resumed record had finished counted in, and its record's end written."""
        record = self.record = self.record or self._made()
        evaluation = replace(evaluation, requested=asked, tally=self.before + evaluation.tally, notes=record.notes)
        batch = {"batch": self.batches.summary()} if self.batches is not None else {}
        return replace(evaluation, record=record.finish(evaluation, spent, batch).folder)


class _Lost(CallFailed):
    """CallFailed for a prediction with no answer: the trace's reason, and the failure of the call behind it
    (None when a prompt did not render)."""

    def __init__(self, prediction: Prediction):
        cause = next((t for t in prediction.trace.nodes.values() if t.failure), None)
        Exception.__init__(self, f"{cause.node}: {cause.error}" if cause else prediction.error)
        self.failure = cause.failure if cause else None
        self.prediction = prediction


def _name(metric: Callable) -> str:
    return str(getattr(metric, "__name__", metric))


def _batchable(session: Session, batch: bool | Batch, models: Mapping[str, str]) -> None:
    """With `batch`, LLMError naming every model (a role's or a named one) that has no batch API sbpc sends; an
    OptionError for a budget, which stops at a call a batch sends along with the rest of its round."""
    if not batch:
        return
    refused = [r for key, name in models.items() if (r := refusal(key, name, session.models[key].settings))]
    if refused:
        raise refuse(refused)
    budgets = [
        Option(name, f"--{name.replace('_', '-')}") for name in ("max_calls", "max_cost") if session.limits.get(name)
    ]
    if budgets:
        raise OptionError(
            *budgets[:1],
            " stops an evaluation at the call that reaches it, but a batch evaluation sends a round's calls "
            "together and answers a sample only at its last round: a budget would stop it with nothing scored. "
            "Bound it by the samples it scores (",
            Option("limit=", "--limit"),
            ")",
        )


@contextlib.asynccontextmanager
async def _calls(session: Session, batch: bool | Batch, kept: _Recording | None) -> AsyncIterator[LLM]:
    """The LLM layer an evaluation calls: the session's, or with `batch` one that sends every call through the
    provider's batch API (models/batch.py), refused before any call when a model has none. No retries there: a
    failed request is its sample's, with the cause (another try would be another day's wait)."""
    if not batch:
        yield session.llm()
        return
    asked = batch if isinstance(batch, Batch) else Batch()
    journal = kept.journal() if kept is not None else Journal(None)
    # a model block's rpm, tpm and concurrency pace calls sent at once; a batch is one upload, paced by its provider
    models = {
        key: replace(spec, settings={k: v for k, v in spec.settings.items() if k not in LIMITS})
        for key, spec in session.models.items()
    }
    limits = {**session.limits, "concurrency": BATCHED}
    ledger = session.ledger
    transport = Batches(journal, asked, ledger.count)
    llm = LLM(models, cache=session.cache, ledger=ledger, whole_session=False, retries=0, transport=transport, **limits)
    try:
        yield llm
    finally:
        await llm.aclose()


def _run_record(
    runs_dir: Path, asked: RunSettings, pipeline: Pipeline, resume: bool, log: Callable[[str], None]
) -> RunRecord:
    """The run's record: the last unfinished one asked exactly the same (`resume`, said in the log), else a new
    one."""
    from .records.record import RunRecord  # imported by aoptimize already: free here

    source = pipeline.graph.pipeline.text
    if not resume:
        return RunRecord.create(runs_dir, asked, pipeline.prompts, source)
    record = RunRecord.resume(runs_dir, asked, source)
    log(f"resuming {record.folder} after iteration {len(record.data.iterations)}")
    return record
