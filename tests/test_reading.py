"""The language server reads files off its request loop (cli/reading.py): the loop answers while a slow file
is read, and a reading made stale by a newer edit is dropped (never published) or never started."""

from __future__ import annotations

import asyncio
import threading

from sembp_dsl.cli.reading import Reader
from sembp_dsl.language.tooling.editor import Document


def test_the_loop_answers_while_a_file_is_read_and_a_stale_reading_is_dropped():
    release = threading.Event()
    read: list[str] = []

    def slow(text: str) -> str:
        read.append(text)
        if text == "v1":
            release.wait(30)  # a template slow to render
        return text.upper()

    async def test():
        reader = Reader(slow)
        first = asyncio.ensure_future(reader("a.sbp", "v1"))
        while not read:  # the worker has started on v1
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(reader("a.sbp", "v2"))  # queued behind v1: stale as soon as v3 comes
        third = asyncio.ensure_future(reader("a.sbp", "v3"))
        await asyncio.sleep(0.05)  # the loop runs on while v1 is being read
        assert not first.done()
        release.set()
        assert await first is None and await second is None and await third == "V3"
        assert read == ["v1", "v3"]  # v2 was never read: a newer edit came before its turn

    asyncio.run(asyncio.wait_for(test(), 60))


def test_a_reading_answers_everything_an_editor_asks_without_more_work():
    document = Document('pipeline p "P"\ninput q: text\nnode a: text {}\nq -> a\noutput a\n', "p.sbp").answered()
    for answer in ("occurrences", "declarations", "analysis", "outline", "formatted"):
        assert answer in vars(document)  # made in the worker thread, not on the request loop
