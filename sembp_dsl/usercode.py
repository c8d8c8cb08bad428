"""Calling code a pipeline names (a function node's callable, a tool, a Python metric) so that whatever it does
stays that call's failure: it raises (any BaseException, a class of its own too), calls sys.exit, blocks, never
returns, or prints.

    result, raised = await call_function(search, {"query": "q"}, timeout=10)  # raised: an exception, or None

- Each call runs in a worker thread, at most WORKERS at once (more wait their turn; a call's timeout counts from
  when it starts). A call that overruns its timeout is abandoned: its caller hears Overran at once, and its
  thread, which Python cannot stop, runs on uncounted while a new one takes its place, so stuck calls never
  starve later ones (`serve`). Workers are daemon threads, never joined, so the process exits whatever they are
  doing; asyncio.to_thread's threads are joined at exit, which kept `sbpc run` alive behind a stuck function.
- An async function runs on an event loop of its own in its worker thread, so one that blocks (time.sleep) times
  out like a sync one; when it is abandoned its task is cancelled there. It cannot share objects bound to the
  caller's loop (a session opened elsewhere): it opens its own.
- What it prints goes to stderr, so `--json` output stays JSON: sys.stdout is wrapped, once, by a proxy that sends
  the writes of threads running user code to sys.stderr and every other thread's to the real stdout. Swapping
  sys.stdout for the call (contextlib.redirect_stdout) is not thread-safe: sys.stdout is one for the process, so
  sbpc's own output, written meanwhile from another thread, would go to stderr too. Writes that bypass sys.stdout
  (os.write(1, ...), sys.__stdout__) are not caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .errors import SbpcError

WORKERS = 32  # calls of user code running at once; the others wait for a worker


class Overran(SbpcError, TimeoutError):
    """The call took longer than its timeout (not a TimeoutError the code itself raised)."""


class ToolFailed(SbpcError):
    """A tool that is no Python function (an MCP server's) failed one call, saying why in words for the model:
    it hung, its server died during the call, or it answered an error or too much. The run goes on."""


class ServerStopped(SbpcError):
    """A tool's server could not be started again after it hung or died, or died too often: the run stops."""


_USER = threading.local()  # .active: this thread is running user code, and prints to stderr


class _Routed:
    """sys.stdout, except for threads running user code: their writes go to sys.stderr."""

    def __init__(self, stdout: Any):
        self.stdout = stdout

    def _target(self) -> Any:
        return sys.stderr if getattr(_USER, "active", False) else self.stdout

    def write(self, text: str) -> int:
        return self._target().write(text)

    def writelines(self, lines: Any) -> None:
        self._target().writelines(lines)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stdout, name)


def _route_stdout() -> None:
    """Wrap sys.stdout unless it is wrapped already (a test harness may have swapped it since)."""
    if sys.stdout is not None and not isinstance(sys.stdout, _Routed):
        sys.stdout = _Routed(sys.stdout)


@contextlib.contextmanager
def user_output() -> Iterator[None]:
    """While user code runs in this thread (importing a pipeline's module), its prints go to stderr."""
    _route_stdout()
    before = getattr(_USER, "active", False)
    _USER.active = True
    try:
        yield
    finally:
        _USER.active = before


class _Job:
    """One call: what to call, and where to tell its caller that it started and how it ended."""

    def __init__(self, function: Callable[..., Any], arguments: Mapping[str, object], loop: asyncio.AbstractEventLoop):
        self.callable, self.arguments, self.loop = function, dict(arguments), loop
        self.started, self.ended = loop.create_future(), loop.create_future()
        self.running = self.finished = self.dropped = False  # dropped: its caller gave up on it
        self.stop: Callable[[], object] | None = None  # cancels an async call's task on its own loop

    def tell(self, future: asyncio.Future, value: object) -> None:
        """Settle a caller's future from a worker thread (unless the caller is gone)."""
        with contextlib.suppress(RuntimeError):  # its loop has closed
            self.loop.call_soon_threadsafe(_settle, future, value)


def _settle(future: asyncio.Future, value: object) -> None:
    if not future.done():
        future.set_result(value)


class _Pool:
    """At most `size` workers running calls that are still awaited; abandoned ones run on uncounted."""

    def __init__(self, size: int):
        self.size, self.busy = size, 0
        self.waiting: deque[_Job] = deque()
        self.lock = threading.Lock()

    def submit(self, job: _Job) -> None:
        _route_stdout()
        with self.lock:
            self.waiting.append(job)
            if self.busy >= self.size:
                return
            self.busy += 1
        self._start()

    def abandon(self, job: _Job) -> None:
        """Its caller gave up: a waiting call never starts; a running one is no longer counted, its place going to
        a new worker."""
        with self.lock:
            job.dropped = True
            replaced = job.running and not job.finished
        if job.stop is not None:
            job.stop()
        if replaced:
            self._start()

    def _start(self) -> None:
        threading.Thread(target=self._work, daemon=True, name="sbpc-user-code").start()

    def _next(self) -> _Job | None:
        """The next waiting call its caller still wants, marked running; None frees this worker's place (under
        the lock)."""
        while self.waiting:
            job = self.waiting.popleft()
            if not job.dropped:
                job.running = True
                return job
        self.busy -= 1
        return None

    def _work(self) -> None:
        _USER.active = True
        with self.lock:
            job = self._next()
        while job is not None:
            job.tell(job.started, None)
            outcome = _outcome(job)
            with self.lock:
                job.finished = True
                if job.dropped:  # abandoned: its place went to another worker
                    return
                job.tell(job.ended, outcome)
                job = self._next()


def _outcome(job: _Job) -> tuple[object, BaseException | None]:
    try:
        result = job.callable(**job.arguments)
        if inspect.isawaitable(result):
            result = _await_here(job, result)
        return result, None
    except BaseException as exc:  # noqa: BLE001 (any class of its own too: uncaught, it killed the worker)
        return None, exc


def _await_here(job: _Job, awaitable: Any) -> object:
    """An async function's result, on a loop of this thread's own."""

    async def awaited() -> object:
        return await awaitable

    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(awaited())
        job.stop = lambda: loop.call_soon_threadsafe(task.cancel)
        if job.dropped:
            task.cancel()
        return loop.run_until_complete(task)
    finally:
        loop.close()


_POOL = _Pool(WORKERS)


async def call_function(
    function: Callable[..., Any], arguments: Mapping[str, object], timeout: float
) -> tuple[object, BaseException | None]:
    """What `function(**arguments)` returned, or what it raised (sys.exit included); Overran when it ran longer
    than `timeout` seconds, counted from when it started."""
    job = _Job(function, arguments, asyncio.get_running_loop())
    _POOL.submit(job)
    try:
        await job.started
        outcome: tuple[object, BaseException | None] = await asyncio.wait_for(job.ended, timeout)
    except asyncio.TimeoutError:
        _POOL.abandon(job)
        return None, Overran(f"took longer than its timeout of {timeout:g}s")
    except asyncio.CancelledError:
        _POOL.abandon(job)
        raise
    return outcome
