"""Codes of nodes that call tools: E11x the tool loop, E17x tools from MCP servers."""

from .code import Code

TABLE = [
    # E11x: nodes that call tools (a tool loop; E110-E111 are its kind's own: language/kinds/agent/codes.py)
    Code(
        "E112",
        "a signature that cannot become a tool's schema",
        "A model calls a tool with named arguments, as a JSON object whose schema sbpc reads from the\n"
        "function's signature (type hints and defaults) and docstring. `*args`, `**kwargs`, positional-only\n"
        "parameters and types with no JSON form (a socket, a class of your own) have none, nor has a function\n"
        "with no Python source (`math:sqrt`, built into Python or compiled). The module beside the pipeline\n"
        "(or an allowed one) is read, never imported; a module that is not UTF-8 text, or nested too deeply\n"
        "to read, cannot be read.",
        "def lookup(*places): ...",
        'def lookup(place: str, fact: Literal["population", "area"] = "population") -> str:\n'
        '    """Look up one fact about a place."""',
    ),
    Code(
        "E113",
        "a tool's description names no param",
        "A function's `description` names the param that tells the model what the tool does (so the optimizer\n"
        "can improve it like a prompt, and write-back changes the .sbp, never the Python file). It must be a\n"
        "param the file declares.",
        'function lookup = "tools:lookup" { description = lookup_dc }',
        'param lookup_doc = "Look up one fact about a place."\n'
        'function lookup = "tools:lookup" { description = lookup_doc }',
    ),
    # E17x: tools from MCP servers (language/mcp_servers.py; E176-E177 at run time)
    Code(
        "E170",
        "an MCP server block that names no server",
        "`mcp NAME { ... }` declares a Model Context Protocol server whose tools nodes call as `NAME.tool`. It\n"
        "needs exactly one of `command` (a program sbpc starts, spoken to on its stdin and stdout) and `url` (a\n"
        "streamable HTTP server), and a name.",
        "mcp docs { env = [DOCS_ROOT] }",
        'mcp docs { command = "python docs_server.py"  env = [DOCS_ROOT] }',
    ),
    Code(
        "E171",
        "a key written out in an MCP server's settings",
        "A pipeline file is shared, committed and shown in diffs: a key written in it leaks. A server's command,\n"
        "url and headers take keys from variables: `${NAME}` in a header or the url, `env = [NAME]` for a\n"
        "command's server. A literal that looks like a key (`sk-...`, a long random token) is refused.",
        'mcp docs { url = "https://docs.example.com/mcp"  headers = "Authorization: Bearer sk-4f9a8b7c6d5e4f3a2b1c" }',
        'mcp docs { url = "https://docs.example.com/mcp"  headers = "Authorization: Bearer ${DOCS_TOKEN}" }',
    ),
    Code(
        "E172",
        "headers that are no HTTP headers",
        "`headers` is one `Name: value` a line (a block string holds several), sent to a server reached by\n"
        "`url`; a server sbpc starts with `command` takes its settings from `env` instead.",
        'mcp docs { url = "http://localhost:8000/mcp"  headers = "Bearer ${DOCS_TOKEN}" }',
        'mcp docs { url = "http://localhost:8000/mcp"  headers = "Authorization: Bearer ${DOCS_TOKEN}" }',
    ),
    Code(
        "E173",
        "an MCP server's tools are not locked",
        "`check` starts no server: the tools' schemas come from the lock, `.sbpc/mcp.lock.json` beside the\n"
        "pipeline, which `sbpc tools sync FILE` writes by starting each server once and listing its tools. The\n"
        "lock keeps a hash of each server's settings: a changed command, url, env or headers needs a new sync.",
        "sbpc check agent.sbp        # before any sync",
        "sbpc tools sync agent.sbp\nsbpc check agent.sbp",
    ),
    Code(
        "E174",
        "a tool of an MCP server that is not declared",
        "`tools = [docs.search]` names the tool `search` of the server declared by `mcp docs { ... }`.",
        "node a: text { prompt = task  tools = [dcos.search] }",
        "node a: text { prompt = task  tools = [docs.search] }",
    ),
    Code(
        "E175",
        "an MCP server has no such tool",
        "The lock lists the tools the server had when `sbpc tools sync` ran; the name must be one of them.\n"
        "If the server has gained the tool since, sync again.",
        "node a: text { prompt = task  tools = [docs.serch] }",
        "node a: text { prompt = task  tools = [docs.search] }",
    ),
    Code(
        "E176",
        "an MCP server's tools differ from the lock",
        "At run time each server's tools are listed and compared with the lock before any call: a tool whose\n"
        "schema or description changed (or that is gone) would be offered to the model as it no longer is, and\n"
        "what was checked would not be what runs. The run stops before any model call.",
        "sbpc run agent.sbp ...     # the server changed since the lock was written",
        "sbpc tools sync agent.sbp  # then check and run again",
    ),
    Code(
        "E177",
        "an MCP server that cannot be started or reached",
        "The server's command failed to start or exited, its URL did not answer as an MCP server, or a variable\n"
        "its env or headers name is not set. The run stops before any model call, saying which.",
        'mcp docs { command = "python docs_servr.py" }',
        'mcp docs { command = "python docs_server.py" }',
    ),
]
