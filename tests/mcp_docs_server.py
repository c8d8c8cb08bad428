"""A Model Context Protocol server for the tests (tests/test_mcp.py), written with the `mcp` package as a user
would: a small document search over stdio, or over streamable HTTP (`--http PORT`).

Its behaviour bends to variables, so one file can be each misbehaving server the tests need:
DOCS_CALLS (a file each call appends a line to: the tests see the calls reach the server), DOCS_HANG (a query
that never answers), DOCS_CRASH (a query that kills the process mid-call), DOCS_HUGE (a query whose result is
50 MB), DOCS_RENAME (the search argument's name, so its schema changes).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

DOCS = {
    "refunds": "Refunds are paid within 14 days of a return reaching the warehouse.",
    "shipping": "Orders ship within 2 working days; express orders the same day.",
}

server = MCPServer("docs")
ARGUMENT = os.environ.get("DOCS_RENAME", "query")


def record(line: str) -> None:
    path = os.environ.get("DOCS_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(line + "\n")


def search(**arguments: str) -> str:
    query = str(next(iter(arguments.values()), ""))
    record(f"search {query}")
    if query == os.environ.get("DOCS_HANG"):
        time.sleep(3600)
    if query == os.environ.get("DOCS_CRASH"):
        os._exit(3)
    if query == os.environ.get("DOCS_HUGE"):
        return "x" * 50_000_000
    hits = [text for topic, text in DOCS.items() if topic in query.lower()]
    return "\n".join(hits) or f"nothing about {query!r}"


exec(  # the argument's name is the test's to choose (DOCS_RENAME): a signature written with it
    f"def search_docs({ARGUMENT}: str) -> str:\n"
    f'    """Search the shop\'s help pages.\n\n    Args:\n        {ARGUMENT}: words to look for\n    """\n'
    f"    return search({ARGUMENT}={ARGUMENT})\n"
)
server.tool(name="search")(search_docs)  # noqa: F821 (defined by the exec above)


@server.tool()
def lookup_order(order_id: str) -> str:
    """The status of an order.

    Args:
        order_id: the order's number, such as A-1001
    """
    record(f"lookup_order {order_id}")
    return {"A-1001": "shipped on 2 March"}.get(order_id, f"no order {order_id}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), stateless_http=True, json_response=True)
    else:
        server.run()
