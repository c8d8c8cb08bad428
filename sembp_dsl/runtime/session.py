"""What a pipeline and its `with_prompts` twins share while they make calls: the models, limits, cache and ledger,
and one LLM layer per event loop. The sync methods of a pipeline run on a private loop per thread, kept here."""

from __future__ import annotations

import asyncio
import sys
import threading
import weakref
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from .. import telemetry
from ..errors import SbpcError
from ..language.graph.graph import Graph, ModelSpec
from ..models.cache import ResponseCache
from ..models.llm import LLM, Ledger, resolve_model

T = TypeVar("T")


class PipelineClosed(SbpcError, RuntimeError):
    """A call on a pipeline after `close()`: a closed pipeline does not quietly open new connections."""


class Session:
    """What a pipeline and its `with_prompts` twins share: models, limits, cache, ledger, and one LLM layer
    per event loop (its semaphore and connections belong to that loop); sync calls run on a private loop,
    one per thread (a loop runs in one thread at a time)."""

    def __init__(
        self,
        models: dict[str, ModelSpec],
        cache: bool | str | Path | ResponseCache,
        limits: dict,
        tracing: telemetry.Tracing | None = None,
    ):
        """`cache`: True for the shared response cache, a path for another one, False for none. `tracing`: where
        the spans of its runs go (telemetry.start), None for none."""
        if isinstance(cache, (str, Path)):
            cache = ResponseCache(cache)
        elif cache is True:
            cache = ResponseCache()
        self.models, self.cache, self.limits, self.tracing = models, cache or None, limits, tracing
        self.ledger = Ledger()
        self.llms: dict[asyncio.AbstractEventLoop, LLM] = {}
        self.loops: dict[int, asyncio.AbstractEventLoop] = {}  # thread id -> its private loop
        self._finalizers: list[weakref.finalize] = []
        self._lock = threading.Lock()  # threads add and drop loops' LLM layers
        self.closed = False

    def model_names(self, graph: Graph, learning: bool) -> dict[str, str]:
        """The models a run of `graph` calls: the nodes' and the judges', and with `learning` the backward and
        optimizer roles. A role no call takes (the forward role, when every node names its model) needs no model:
        asking for one would fail a run that never uses it wherever the embedded model is not installed."""
        used = {node.model for node in graph.model_nodes}
        used |= {spec.model for spec in graph.metrics.values() if spec.kind == "judge"}
        used |= {"backward", "optimizer"} if learning else set()
        return {key: str(resolve_model(spec).name) for key, spec in self.models.items() if key in used}

    def routed(self, key: str) -> bool:
        """Whether the role or named model `key` is a Router's model group (its name is the group's, no model's)."""
        spec = self.models.get(key)
        return bool(spec is not None and spec.settings.get("router"))

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
            loop.set_exception_handler(_quiet_interrupt)
            self._finalizers.append(weakref.finalize(self, _shut, loop, self.llms))
        try:
            return loop.run_until_complete(work)
        except BaseException:  # Ctrl-C: the rows still in flight must not go on calling at the next use
            _cancel_pending(loop)
            raise

    async def aclose(self) -> None:
        """Close the connections the running event loop's calls opened."""
        llm = self.llms.pop(asyncio.get_running_loop(), None)
        if llm is not None:
            await llm.aclose()

    def close(self) -> None:
        self.closed = True
        for finalizer in self._finalizers:
            finalizer()
        if self.tracing is not None:  # its runs' last spans delivered before the caller goes on
            # closed on the way out of a Ctrl-C (a `with` block's exit, a `finally`): the user asked to stop
            stopping = isinstance(sys.exc_info()[1], KeyboardInterrupt)
            telemetry.flush(telemetry.QUICK_SECONDS if stopping else telemetry.FLUSH_SECONDS)


def _quiet_interrupt(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A task that Ctrl-C landed in ends with KeyboardInterrupt, which the caller hears (the command says
    'interrupted'); told again when the task is collected, it was a traceback after the command's last line."""
    if not isinstance(context.get("exception"), KeyboardInterrupt):
        loop.default_exception_handler(context)


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


def check_concurrency(concurrency: Any) -> None:
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ValueError(f"concurrency must be a whole number of at least 1, got {concurrency!r}")
