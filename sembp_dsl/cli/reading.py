"""Files read off the language server's request loop.

Reading a file (checking it, indexing its names, formatting it) can take seconds: a template slow to
render, a file of 100 KB. On the loop that answers requests, that left `sbpc lsp` silent for 20 s. Here
one worker thread reads, newest text first per file: every request is answered at once from the last
reading, and a reading made stale by a newer edit is dropped, never published. No pygls here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


class Reader(Generic[T]):
    """`await reader(key, *args)`: `read(*args)` in the worker thread, or None when a newer call for the same
    `key` (a file) came before it finished, or before it started (then it never runs)."""

    def __init__(self, read: Callable[..., T]) -> None:
        self.read = read
        self.latest: dict[str, object] = {}  # key -> the newest call's stamp
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="sbpc-read")

    async def __call__(self, key: str, *args) -> T | None:
        stamp = self.latest[key] = object()

        def job() -> T | None:
            return self.read(*args) if self.latest.get(key) is stamp else None

        result = await asyncio.get_running_loop().run_in_executor(self.worker, job)
        return result if self.latest.get(key) is stamp else None

    def forget(self, key: str) -> None:
        """The file was closed: a reading of it still under way is dropped."""
        self.latest.pop(key, None)
