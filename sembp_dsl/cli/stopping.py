"""How a command ends on Ctrl-C (SIGINT) and on SIGTERM (a container's stop, a CI timeout, `kill`): both as
KeyboardInterrupt, which every command already ends on in order (a run's record marked interrupted and resumable,
an in-place write finished or left for --resume to finish, the last spans sent within telemetry.QUICK_SECONDS).
Only the word said and the exit code differ: 128 + the signal, as shells give it. A second signal ends the
process at once (the default action), for when the orderly end itself is what hangs."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

SAID = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
_received: list[int] = []  # the signal that is stopping this command, once one came
_said: list[str] = []  # how the command said it stopped, once it did


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM stop the command inside as KeyboardInterrupt; the handlers before are put back after
    (cli.main also runs inside tests and other programs). A signal ignored when sbpc started stays ignored
    (a shell's background job ignores Ctrl-C), and off the main thread no handler can be set."""
    _received.clear()
    _said.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {each: signal.getsignal(each) for each in SAID}
    for each, handler in before.items():
        if handler is not signal.SIG_IGN:
            signal.signal(each, _stop)
    try:
        yield
    finally:
        for each, handler in before.items():
            signal.signal(each, handler)


def _stop(signum: int, frame: object) -> None:
    for each in SAID:  # the second signal takes the default action: the end at once
        signal.signal(each, signal.SIG_DFL)
    _received.append(signum)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise KeyboardInterrupt from None
    # raised between two of the loop's callbacks, never halfway through a coroutine: a request aiohttp had made
    # but not yet begun was left unawaited, and its "coroutine ... was never awaited" warning followed the line
    # that said the command was interrupted
    loop.call_soon_threadsafe(_interrupt)


def _interrupt() -> None:
    raise KeyboardInterrupt


def say(message: str) -> NoReturn:
    """Say how the command stopped and what it kept, and go on stopping: the command line adds no word of its own."""
    print(message, file=sys.stderr)
    _said.append(message)
    raise KeyboardInterrupt from None


def unsaid() -> str | None:
    """The word the command line ends on, unless the command said how it stopped already."""
    return None if _said else word()


def word() -> str:
    """What the command says it was: 'terminated' after SIGTERM, else 'interrupted'."""
    return SAID[signal.Signals(_received[0])] if _received else SAID[signal.SIGINT]


def exit_code() -> int:
    """128 + the signal that stopped the command: 143 after SIGTERM, else 130 (Ctrl-C, or KeyboardInterrupt)."""
    return 128 + (_received[0] if _received else signal.SIGINT)
