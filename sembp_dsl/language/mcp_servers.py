"""Tools from Model Context Protocol servers, as the language sees them: declared, checked and locked without
starting a server or importing anything.

    mcp docs {
      command = "python docs_server.py"          # stdio: a command sbpc starts (or: url = "https://.../mcp")
      env     = [DOCS_ROOT]                       # variables passed on from sbpc's environment, by name
      headers = "Authorization: Bearer ${DOCS_TOKEN}"   # HTTP only: one header a line, values from ${VARIABLES}
      timeout = 10                                # seconds one call may take
      search.description = search_doc             # the tool's description is the param search_doc (trained)
    }
    node answer: text { prompt = task  tools = [docs.search, lookup] }

A key is never written in the file: a literal that looks like one (`sk-...`, a long random token) is refused.
The tools' schemas come from the lock, `.sbpc/mcp.lock.json` beside the pipeline, which `sbpc tools sync`
writes (runtime/mcp_client.py starts each server once and lists its tools); the lock keeps a hash of each
server's settings, so `check` says when the settings changed since. At run time the servers' schemas are
compared with the lock.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from . import ir
from .diagnostics import suggestion, url_problem
from .signatures import ToolParam, ToolSpec

KIND = "mcp"  # the block's keyword
SERVER_SETTINGS: dict[str, tuple] = {"command": (str,), "url": (str,), "env": (tuple,), "headers": (str,)}
SERVER_SETTINGS["timeout"] = (int, float)
TOOL_SETTINGS: dict[str, tuple] = {"description": (str,), "timeout": (int, float)}  # `search.description = ...`
LOCK = os.path.join(".sbpc", "mcp.lock.json")  # beside the pipeline
LOCK_VERSION = 1
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# What a key looks like when it is written out: a provider's prefix, or a long run of letters and digits mixed
KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-[A-Za-z0-9_-]{12,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,})"
)
LONG_TOKEN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9+=]{24,}(?![A-Za-z0-9])")  # no separator: not a path or words
SECRET_QUERY = re.compile(r"[?&](?:api[_-]?key|key|token|access[_-]?token|secret)=([^&${]+)", re.I)


@dataclass(frozen=True)
class Server:
    """A declared server, as its block says: a command (stdio) or a URL (streamable HTTP)."""

    name: str
    command: tuple[str, ...]  # argv; () for an HTTP server
    url: str
    env: tuple[str, ...]  # the variables passed on, by name
    headers: tuple[tuple[str, str], ...]  # (name, value with ${VARIABLES} still in it)
    timeout: float | None

    @classmethod
    def of(cls, block: ir.Block) -> Server:
        settings = {s.key: s.value for s in block.settings}
        command = settings.get("command")
        try:
            argv = tuple(shlex.split(command)) if isinstance(command, str) else ()
        except ValueError:
            argv = ()
        env = settings.get("env")
        headers = settings.get("headers")
        timeout = settings.get("timeout")
        return cls(
            block.name or "",
            argv,
            str(settings.get("url", "")),
            env if isinstance(env, tuple) else (),
            tuple(header_lines(headers)) if isinstance(headers, str) else (),
            float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None,
        )

    def settings_hash(self) -> str:
        """What the lock was made from: how the server is started or reached (never a variable's value)."""
        made = {"command": self.command, "url": self.url, "env": self.env, "headers": self.headers}
        return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()[:16]

    def where(self) -> str:
        return f"`{shlex.join(self.command)}`" if self.command else self.url


def header_lines(text: str) -> Iterator[tuple[str, str]]:
    """`Name: value` a line; a line without a colon is kept whole as the name (check says it is no header)."""
    for line in text.splitlines():
        if line.strip():
            name, _, value = line.partition(":")
            yield name.strip(), value.strip()


def servers(pipeline: ir.Pipeline) -> dict[str, ir.Block]:
    """The file's `mcp NAME { }` blocks, by name (the first of a name: the checker reports the others)."""
    found: dict[str, ir.Block] = {}
    for block in pipeline.blocks:
        if block.kind == KIND and block.name:
            found.setdefault(block.name, block)
    return found


def is_server_tool(name: str) -> bool:
    """`docs.search` names a server's tool; a Python function's name has no dot."""
    return "." in name


def split(name: str) -> tuple[str, str]:
    server, _, tool = name.partition(".")
    return server, tool


def shown_name(name: str) -> str:
    """The name a model calls `docs.search` by: providers take letters, digits, `_` and `-` only."""
    return name.replace(".", "__")


def tool_setting(block: ir.Block | None, tool: str, key: str) -> ir.Setting | None:
    """`search.description = ...` of a server's block."""
    if block is None:
        return None
    return next((s for s in block.settings if s.key == f"{tool}.{key}"), None)


def tool_function(pipeline: ir.Pipeline, name: str) -> ir.Function | None:
    """A server's tool as the function a tools list names: its `description` and `timeout` are those its block
    gives it (`search.timeout`, else the block's `timeout`). None: no such server is declared."""
    server, tool = split(name)
    block = servers(pipeline).get(server)
    if block is None:
        return None
    settings = [
        ir.Setting(key, s.value, span=s.span, value_span=s.value_span)
        for key in TOOL_SETTINGS
        if (s := tool_setting(block, tool, key))
    ]
    if not any(s.key == "timeout" for s in settings):
        settings += [
            ir.Setting("timeout", s.value, span=s.span, value_span=s.value_span)
            for s in block.settings
            if s.key == "timeout"
        ]
    return ir.Function(name, f"{KIND}:{name}", tuple(settings), span=block.span, literal=block.span)


def lock_path(pipeline_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(pipeline_path)), LOCK)


def read_lock(path: str) -> dict | None:
    """The lock file's servers, by name; None when there is none (or it cannot be read as one)."""
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError):
        return None
    servers = data.get("servers") if isinstance(data, dict) and data.get("version") == LOCK_VERSION else None
    return servers if isinstance(servers, dict) else None


def locked_tools(lock: Mapping | None, server: Server) -> dict[str, dict] | str:
    """A server's tools as the lock has them (name -> {"description", "input_schema"}), or why they cannot be
    used: no lock, or a lock made from other settings."""
    entry = lock.get(server.name) if lock is not None else None
    if not isinstance(entry, dict) or not isinstance(entry.get("tools"), dict):
        return f"the MCP server '{server.name}' is not in the lock ({LOCK}): its tools' schemas are unknown"
    if entry.get("settings") != server.settings_hash():
        return f"the lock ({LOCK}) is older than the settings of the MCP server '{server.name}'"
    return entry["tools"]


def lock_entry(server: Server, tools: Mapping[str, dict]) -> dict:
    return {"settings": server.settings_hash(), "where": server.where(), "tools": dict(sorted(tools.items()))}


def tool_spec(name: str, entry: Mapping) -> ToolSpec:
    """A locked tool as a tool loop offers it: its own JSON Schema, kept whole."""
    given = entry.get("input_schema")
    schema: dict = given if isinstance(given, dict) else {}
    listed = schema.get("properties")
    properties: dict = listed if isinstance(listed, dict) else {}
    required = set(schema.get("required") or ())
    params = tuple(
        ToolParam(
            key,
            {k: v for k, v in value.items() if k != "description"} if isinstance(value, dict) else {},
            key in required,
            str(value.get("description", "")) if isinstance(value, dict) else "",
        )
        for key, value in properties.items()
    )
    return ToolSpec(shown_name(name), str(entry.get("description") or ""), params, {"type": "object", **schema})


def key_problem(text: str) -> str | None:
    """Why a setting's text seems to hold a key written out, or None. `${VARIABLE}`s are where keys go."""
    bare = VARIABLE.sub("", text)
    for found in (KEY_SHAPES.search(bare), SECRET_QUERY.search(bare)):
        if found is not None:
            return "it holds what looks like a key written out"
    if any(sum(bool(re.search(c, t)) for c in ("[a-z]", "[A-Z]", "[0-9]")) >= 2 for t in LONG_TOKEN.findall(bare)):
        return "it holds a long token that looks like a key written out"
    return None


Report = Callable[..., None]  # the checker's Context.report


def check_server(report: Report, block: ir.Block, params: Mapping[str, ir.Param]) -> None:
    """A server block's own rules, beyond its settings' types: one of command and url, no key written out,
    headers that are headers, and each tool's settings."""
    settings = {s.key: s for s in block.settings}
    if block.name is None:
        report("E170", block.span, "an mcp block needs a name: `mcp docs { ... }`, its tools then `docs.search`")
    command, url = settings.get("command"), settings.get("url")
    if (command is None) == (url is None):
        report(
            "E170",
            block.span,
            f"mcp server '{block.name}' needs one of command (a program sbpc starts) and url (a streamable HTTP server)",
            help='command = "python docs_server.py", or url = "http://localhost:8000/mcp"',
        )
    if command is not None and isinstance(command.value, str):
        try:
            if not shlex.split(command.value):
                report("E170", command.value_span, "the command is empty")
        except ValueError as exc:
            report("E170", command.value_span, f"the command does not split into words: {exc}")
    if url is not None and isinstance(url.value, str) and (problem := url_problem(url.value)):
        report("E170", url.value_span, f"url {problem}")
    for s in block.settings:
        if s.key in ("command", "url", "headers") and isinstance(s.value, str) and (problem := key_problem(s.value)):
            report(
                "E171",
                s.value_span,
                f"mcp server '{block.name}': {s.key}: {problem}",
                help="name a variable instead, e.g. ${DOCS_TOKEN} (headers) or env = [DOCS_TOKEN] (a command's)",
            )
    headers = settings.get("headers")
    if headers is not None and isinstance(headers.value, str):
        check_headers(report, block, headers)
    for s in block.settings:
        if "." in s.key:
            check_tool_setting(report, block, s, params)


def check_headers(report: Report, block: ir.Block, headers: ir.Setting) -> None:
    if any(s.key == "command" for s in block.settings):
        report("E172", headers.value_span, "headers go to an HTTP server: a command's server takes env = [NAME]")
    for name, _ in header_lines(str(headers.value)):
        if not re.fullmatch(r"[A-Za-z0-9-]+", name):
            report(
                "E172",
                headers.value_span,
                f"'{name}' is no header: write one header a line, `Name: value`",
                help='headers = "Authorization: Bearer ${DOCS_TOKEN}"',
            )


def check_tool_setting(report: Report, block: ir.Block, s: ir.Setting, params: Mapping[str, ir.Param]) -> None:
    tool, _, key = s.key.partition(".")
    if key not in TOOL_SETTINGS:
        report(
            "E030",
            s.span,
            f"unknown setting '{key}' of tool '{tool}' in mcp block",
            help=suggestion(key, TOOL_SETTINGS) or "a tool takes description and timeout",
        )
    elif key == "description" and isinstance(s.value, str) and s.value not in params:
        report(
            "E113",
            s.value_span,
            f"tool '{block.name}.{tool}': its description names no param '{s.value}'",
            help=suggestion(s.value, params) or 'declare it: param NAME = "what the tool does"',
        )
    elif key == "timeout" and (isinstance(s.value, bool) or not isinstance(s.value, (int, float)) or s.value <= 0):
        report("E033", s.value_span, f"'{s.key}' must be a number of seconds, more than 0, not {s.value!r}")


def server_tool_spec(pipeline: ir.Pipeline, name: str) -> ToolSpec | str:
    """A server's tool as the lock has it, or why it cannot be had."""
    server_name, tool = split(name)
    block = servers(pipeline).get(server_name)
    if block is None:
        return f"no MCP server '{server_name}' is declared"
    tools = locked_tools(cached_lock(lock_path(pipeline.path), lock_stamp(pipeline.path)), Server.of(block))
    if isinstance(tools, str):
        return tools
    if tool not in tools:
        return f"the MCP server '{server_name}' has no tool '{tool}' (as locked)"
    return tool_spec(name, tools[tool])


@functools.lru_cache(maxsize=64)
def cached_lock(path: str, stamp: int) -> dict | None:
    return read_lock(path) if stamp else None


def lock_stamp(pipeline_path: str) -> int:
    try:
        return os.stat(lock_path(pipeline_path)).st_mtime_ns
    except OSError:
        return 0
