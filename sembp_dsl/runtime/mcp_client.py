"""Speaking to the MCP servers a pipeline names (language/mcp_servers.py): `sbpc tools sync` lists their tools
into the lock, and a run calls them.

Every server of a bound pipeline is spoken to from one thread with an event loop of its own (`Servers`), so
its connection outlives the event loops a run's callers come and go with, and a server that blocks blocks no
one else. Each server is held open by a task of that loop (the `mcp` package's transports must be closed by
the task that opened them). A run starts its servers before any model call and compares each tool it uses
with the lock: a difference stops it (E176), as does a server that cannot start (E177).

A call is a tool call like a Python function's (usercode.call_function runs `ServerTool.__call__`), within
the tool's timeout. A server that hangs past it, dies during a call or sends more than MAX_RESULT_BYTES makes
that call's error (ToolFailed, said to the model); a server that hung or died is started again for the next
call, and one that cannot be (or has been restarted MAX_RESTARTS times) stops the run (ServerStopped).

The `mcp` package is imported here only, when a pipeline has servers: `check` never imports this module.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SbpcError
from ..files import atomic_write
from ..language import ir
from ..language.diagnostics import PipelineError, diagnostic
from ..language.kinds.agent.toolcalls import bounded
from ..language.mcp_servers import (
    LOCK,
    LOCK_VERSION,
    VARIABLE,
    Server,
    is_server_tool,
    lock_entry,
    lock_path,
    locked_tools,
    read_lock,
    servers,
    split,
)
from ..usercode import ServerStopped, ToolFailed

START_TIMEOUT = 30.0  # seconds a server has to start and answer `initialize` and `tools/list`
MAX_RESULT_BYTES = 1 << 20  # a tool result past this is that call's error: megabytes would only be cut anyway
MAX_LINE_BYTES = 4 << 20  # one message from a stdio server, read no further (a result comes twice: text, structure)
CONNECTION_CLOSED = -32000  # JSON-RPC's code for a connection that closed: the server died, not refused
MAX_RESTARTS = 3  # a server that keeps dying stops the run after this many restarts
ANSWER_GRACE = 2.0  # seconds a server's tool is given past its timeout to say why it failed (call_function's)
INSTALL = "MCP servers need the mcp package: pip install 'sbpc[mcp]'"


def _mcp() -> Any:
    try:
        import mcp  # noqa: F401  (the SDK: ~300 ms to import, only for a pipeline that has servers)
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client
    except ImportError:
        raise SbpcError(INSTALL) from None
    return ClientSession, streamable_http_client, create_mcp_http_client


def expand(text: str, what: str) -> str:
    """`${NAME}` replaced by the variable's value; a variable that is not set is said (never its value)."""

    def value(match: Any) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise SbpcError(f"the variable {name} that its {what} names is not set")
        return os.environ[name]

    return VARIABLE.sub(value, text)


def server_log() -> Any:
    """Where a stdio server's stderr goes: sbpc's own, when it is a file (a test harness's may be a buffer)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            stream.fileno()  # type: ignore[union-attr]  # None is caught as AttributeError
            return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # noqa: SIM115 (kept for the process's life)


def locked_form(tool: Any) -> dict:
    """A listed tool as the lock keeps it."""
    schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {}
    return {"description": tool.description or "", "input_schema": dict(schema)}


def result_text(result: Any, name: str) -> str:
    """What a tool call returned, as the model is shown it: its text, else its structured content as JSON."""
    parts = [getattr(block, "text", None) for block in result.content or ()]
    text = "\n".join(p for p in parts if p is not None)
    structured = getattr(result, "structured_content", None)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    size = len(text.encode("utf-8", "replace"))
    if size > MAX_RESULT_BYTES:
        raise ToolFailed(
            f"{name} returned {size / 1e6:.1f} MB, more than the {MAX_RESULT_BYTES // (1 << 20)} MB a tool's result may be"
        )
    if getattr(result, "is_error", False):
        raise ToolFailed(bounded(f"{name} answered an error: {text}"))
    return text


@contextlib.asynccontextmanager
async def http_streams(http: Any, client: Any, url: str):
    """A streamable HTTP server's messages, over a client of our own (its headers) closed with them."""
    async with client, http(url, http_client=client) as streams:
        yield streams


@contextlib.asynccontextmanager
async def bounded_stdio(command: tuple[str, ...], env: Mapping[str, str], folder: str, overflowed: Any):
    """A stdio server's messages, as the `mcp` package's stdio_client gives them, but none read past
    MAX_LINE_BYTES (its reader joins a long line's chunks over and over: minutes for 50 MB): a longer one closes
    the connection, after `overflowed()`. The process runs in a session of its own, ended with its group."""
    import anyio  # the mcp package's own dependency, imported with it
    import mcp_types as types
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    program, *args = command
    process = await asyncio.create_subprocess_exec(
        program,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=server_log(),
        env={**get_default_environment(), **env},
        cwd=folder,
        limit=MAX_LINE_BYTES,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None  # both piped
    stdin, stdout = process.stdin, process.stdout
    send_in, incoming = anyio.create_memory_object_stream[Any](16)
    outgoing, receive_out = anyio.create_memory_object_stream[Any](16)

    async def read() -> None:
        async with send_in:  # closed when the server's output ends: the session sees the connection close
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # past the limit
                    overflowed()
                    return
                if not line:
                    return
                try:
                    message: Any = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
                except ValueError as exc:
                    message = exc
                await send_in.send(message)

    async def write() -> None:
        async with receive_out:
            async for message in receive_out:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                stdin.write(text.encode() + b"\n")
                await stdin.drain()

    tasks = [asyncio.ensure_future(read()), asyncio.ensure_future(write())]
    try:
        yield incoming, outgoing
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.shield(ended(process))


async def ended(process: asyncio.subprocess.Process) -> None:
    """Its stdin closed, a moment to leave, then its group terminated, then killed."""
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    for stop in (None, signal.SIGTERM, signal.SIGKILL):
        if stop is not None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, stop)
        try:
            await asyncio.wait_for(process.wait(), 2)
            return
        except asyncio.TimeoutError:
            continue


class Link:
    """One server's connection, held open by a task of the servers' loop until it is closed or dies."""

    def __init__(self, server: Server, folder: str):
        self.server, self.folder = server, folder
        self.session: Any = None  # None: not started, or stopped after it hung or died (started at the next call)
        self.holder: asyncio.Task | None = None
        self.stop: asyncio.Event | None = None
        self.closing: set[asyncio.Task] = set()  # holders told to stop, still ending their server's process
        self.overflow = False  # the server sent a line past MAX_LINE_BYTES: its connection was closed
        self.restarts = 0

    def transport(self) -> Any:
        http, client = _mcp()[1:]
        if self.server.command:
            env = {name: expand("${" + name + "}", "env") for name in self.server.env}
            return bounded_stdio(self.server.command, env, self.folder, self.overflowed)
        headers = {name: expand(value, "headers") for name, value in self.server.headers}
        return http_streams(http, client(headers=headers), expand(self.server.url, "url"))

    def overflowed(self) -> None:
        self.overflow = True

    async def open(self) -> dict[str, dict]:
        """Start the server (or connect to it) and list its tools, in the lock's form."""
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.holder = asyncio.ensure_future(self.hold(ready, self.stop))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT)
        except asyncio.TimeoutError:
            self.drop()
            raise SbpcError(f"it did not answer within {START_TIMEOUT:g}s of starting") from None

    async def hold(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        session_class = _mcp()[0]
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self.transport())
                session = await stack.enter_async_context(session_class(streams[0], streams[1]))
                await session.initialize()
                listed = await session.list_tools()
                self.session = session
                ready.set_result({tool.name: locked_form(tool) for tool in listed.tools})
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 (what stopped the server is said where `ready` is awaited)
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else SbpcError("it was stopped"))
        finally:
            if self.holder is asyncio.current_task():
                self.session = None

    def drop(self) -> None:
        """Stop the server (its transport ends the process), without waiting: the next call starts a new one."""
        holder, stop = self.holder, self.stop
        self.holder, self.stop, self.session = None, None, None
        if stop is not None:
            stop.set()
        if holder is not None:
            self.closing.add(holder)
            holder.add_done_callback(self.closing.discard)
            asyncio.get_running_loop().call_later(8, holder.cancel)  # one whose transport will not close

    async def close(self) -> None:
        """Stop the server, and wait (a few seconds at most) for every process this link started to end."""
        self.drop()
        self.restarts = 0  # closed on purpose: a later call starts it afresh
        if self.closing:
            await asyncio.wait(set(self.closing), timeout=9)

    async def call(self, tool: str, arguments: Mapping, timeout: float, name: str) -> str:
        """One call within `timeout`; a server that hung or died is stopped here and started again next call."""
        if self.session is None:
            await self.restart(name)
        try:
            result = await asyncio.wait_for(self.session.call_tool(tool, dict(arguments)), timeout)
        except asyncio.TimeoutError:
            self.drop()
            raise ToolFailed(
                f"{name} did not answer within its timeout of {timeout:g}s; the MCP server '{self.server.name}' "
                "was stopped and is started again for the next call"
            ) from None
        except Exception as exc:  # noqa: BLE001 (the transport's own errors: a closed stream, a dead process)
            code = getattr(getattr(exc, "error", None), "code", None)
            if code is not None and code != CONNECTION_CLOSED:  # the server refused the call, and lives on
                raise ToolFailed(bounded(f"{name} failed: {exc}")) from None
            self.drop()
            if self.overflow:
                self.overflow = False
                raise ToolFailed(
                    f"{name} returned more than {MAX_LINE_BYTES >> 20} MB (a tool's result may be "
                    f"{MAX_RESULT_BYTES >> 20} MB); the MCP server '{self.server.name}' is started again for the next call"
                ) from None
            raise ToolFailed(
                f"the MCP server '{self.server.name}' stopped during the call of {name} ({exc}); it is started "
                "again for the next call"
            ) from None
        return result_text(result, name)

    async def restart(self, name: str) -> None:
        if self.restarts >= MAX_RESTARTS:
            raise ServerStopped(
                f"the MCP server '{self.server.name}' ({self.server.where()}) stopped or hung {self.restarts + 1} "
                "times: the run stops"
            )
        self.restarts += 1
        try:
            await self.open()
        except Exception as exc:  # noqa: BLE001
            raise ServerStopped(
                f"the MCP server '{self.server.name}' ({self.server.where()}) stopped, and could not be started "
                f"again for {name}: {type(exc).__name__}: {exc}. The run stops"
            ) from None


class Servers:
    """The servers a bound pipeline's nodes call, spoken to from a thread of their own."""

    def __init__(self, servers: Mapping[str, Server], folder: str):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="sbpc-mcp").start()
        self.links = {name: Link(server, folder) for name, server in servers.items()}
        atexit.register(self.close)  # a server left running (one that hung) would outlive sbpc

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def open(self, name: str) -> dict[str, dict]:
        return self.run(self.links[name].open())

    def call(self, server: str, tool: str, arguments: Mapping, timeout: float) -> str:
        return self.run(self.links[server].call(tool, arguments, timeout, f"{server}.{tool}"))

    def close(self) -> None:
        """Stop every server (a stdio server's process ends); a later call starts its server again."""
        if not any(link.holder or link.closing for link in self.links.values()):
            return
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(self._close_all(), self.loop).result(10)  # waits out a hung one

    async def _close_all(self) -> None:
        await asyncio.gather(*(link.close() for link in self.links.values()), return_exceptions=True)


class ServerTool:
    """A server's tool as a callable: what a tool loop runs (through usercode.call_function, like a Python tool)."""

    def __init__(self, servers: Servers, name: str, timeout: float):
        self.servers, self.name, self.timeout = servers, name, timeout
        self.answer_grace = ANSWER_GRACE  # it keeps to its timeout itself, and says why it failed

    def __call__(self, **arguments: Any) -> str:
        server, tool = split(self.name)
        return self.servers.call(server, tool, arguments, self.timeout)

    def close(self) -> None:
        self.servers.close()


def used_servers(pipeline: ir.Pipeline, called: set[str]) -> dict[str, ir.Block]:
    declared = servers(pipeline)
    wanted = {split(name)[0] for name in called if is_server_tool(name)}
    return {name: block for name, block in declared.items() if name in wanted}


def connect(pipeline: ir.Pipeline, called: set[str], timeouts: Mapping[str, float]) -> dict[str, ServerTool]:
    """Start each server whose tools `called` names, check its tools against the lock, and give each tool's
    callable; a PipelineError (E177: a server that cannot start; E176: tools that changed) before any call."""
    blocks = used_servers(pipeline, called)
    if not blocks:
        return {}
    folder = os.path.dirname(os.path.abspath(pipeline.path))
    lock = read_lock(lock_path(pipeline.path))
    pool = Servers({name: Server.of(block) for name, block in blocks.items()}, folder)
    problems = []
    for name, block in blocks.items():
        server = Server.of(block)
        try:
            listed = pool.open(name)
        except Exception as exc:  # noqa: BLE001 (a program that is not there, a refused connection, a variable)
            message = f"the MCP server '{name}' ({server.where()}) could not be started: {type(exc).__name__}: {exc}"
            problems.append(diagnostic("E177", block.span, message, file=pipeline.path))
            continue
        tools = {split(n)[1] for n in called if split(n)[0] == name}
        change = changed(locked_tools(lock, server), listed, tools)
        if change:
            help = f"if the server's tools changed on purpose, lock them again: sbpc tools sync {pipeline.path}"
            message = f"the MCP server '{name}' changed since the lock ({LOCK}): {change}"
            problems.append(diagnostic("E176", block.span, message, file=pipeline.path, help=help))
    if problems:
        pool.close()
        raise PipelineError(problems, pipeline.text)
    return {name: ServerTool(pool, name, timeouts[name]) for name in called if is_server_tool(name)}


def changed(locked: dict[str, dict] | str, listed: Mapping[str, dict], used: set[str]) -> str | None:
    """How the tools a run uses differ between the lock and the server, or None."""
    if isinstance(locked, str):
        return locked
    for tool in sorted(used):
        if tool not in listed:
            return f"it no longer has the tool '{tool}'"
        for part, words in (("input_schema", "input schema"), ("description", "description")):
            if listed[tool].get(part) != locked.get(tool, {}).get(part):
                return f"tool '{tool}': its {words} differs (locked: {short(locked.get(tool, {}).get(part))}; now: {short(listed[tool].get(part))})"
    return None


def short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."


def sync(pipeline: ir.Pipeline) -> list[tuple[str, int]]:
    """Start every server the file declares, list its tools and write the lock: (server, its tool count) each.
    A server that cannot start is a PipelineError (E177), and the lock is left as it was."""
    blocks = servers(pipeline)
    folder = os.path.dirname(os.path.abspath(pipeline.path))
    pool = Servers({name: Server.of(block) for name, block in blocks.items()}, folder)
    entries, problems = {}, []
    try:
        for name, block in blocks.items():
            try:
                entries[name] = lock_entry(Server.of(block), pool.open(name))
            except Exception as exc:  # noqa: BLE001
                message = f"the MCP server '{name}' ({Server.of(block).where()}) could not be started: {type(exc).__name__}: {exc}"
                problems.append(diagnostic("E177", block.span, message, file=pipeline.path))
    finally:
        pool.close()
    if problems:
        raise PipelineError(problems, pipeline.text)
    write_lock(lock_path(pipeline.path), entries)
    return [(name, len(entry["tools"])) for name, entry in entries.items()]


def write_lock(path: str, entries: Mapping[str, dict]) -> None:
    """The lock, beside what other pipelines of the folder locked; `.sbpc/.gitignore` lets git keep it (it is
    a source: `check` reads it)."""
    kept = read_lock(path) or {}
    folder = Path(path).parent
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    keep = f"!{Path(path).name}"
    if not ignore.exists():
        atomic_write(
            ignore,
            f"# Written by sbpc: its run records and cache are not sources; the MCP lock is.\n*\n!.gitignore\n{keep}\n",
        )
    elif keep not in ignore.read_text(encoding="utf-8").split():
        atomic_write(ignore, ignore.read_text(encoding="utf-8").rstrip("\n") + f"\n!.gitignore\n{keep}\n")
    data = {"version": LOCK_VERSION, "servers": dict(sorted({**kept, **entries}.items()))}
    atomic_write(Path(path), json.dumps(data, indent=2, ensure_ascii=False) + "\n")
