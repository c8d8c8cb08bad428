"""Tools from MCP servers (issue 46): a pipeline names a server, `sbpc tools sync` locks its tools, `check` reads
the lock and starts nothing, and `eval` and `optimize` call the server's tools through the loopback fake model's
tool calls. The servers are tests/mcp_docs_server.py, written with the `mcp` package, over stdio and over
streamable HTTP; a server that hangs, dies mid-call, answers 50 MB or changes its schema is said plainly."""

from __future__ import annotations

import contextlib
import io
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Script, with_fake_model
from fake_server import FakeServer

import sembp_dsl as sbp
from sembp_dsl.cli.commands import main
from sembp_dsl.language.kinds.agent import steps_of

pytest.importorskip("mcp")

SERVER = ROOT / "tests" / "mcp_docs_server.py"
VARIABLES = ("DOCS_CALLS", "DOCS_HANG", "DOCS_CRASH", "DOCS_HUGE")
PIPELINE = """pipeline support "Answer a customer's question from the shop's help pages"
input question: text
param task = "Answer the customer's question from the help pages."
param search_doc = "Search the shop's help pages."
mcp docs {
  WHERE
  timeout = 5
  search.description = search_doc
}
template asking = "{{ prompt }}\\nQuestion: {{ question }}"
node answer: text { prompt = task  template = asking  tools = [docs.search]  max_steps = 3 }
question -> answer
output answer
metric exact
"""
DATA = [
    {"question": "refunds", "answer": "Refunds are paid within 14 days of a return reaching the warehouse."},
    {"question": "shipping", "answer": "Orders ship within 2 working days; express orders the same day."},
    {"question": "refunds again", "answer": "Refunds are paid within 14 days of a return reaching the warehouse."},
    {"question": "shipping times", "answer": "Orders ship within 2 working days; express orders the same day."},
]


def stdio_settings() -> str:
    return f'command = "{sys.executable} {SERVER}"\n  env = [{", ".join(VARIABLES)}]'


class Searcher(Script):
    """A model that searches the docs with the question, then answers with what the search said (`wrong`: with
    something else, so that optimize has errors to learn from)."""

    wrong = False

    def __call__(self, messages):
        last = messages[-1]
        if last["role"] == "tool":
            return "I could not say." if self.wrong else last["content"]
        if self.kind(last["content"]) != "forward":
            return super().__call__(messages)
        question = last["content"].rsplit("Question: ", 1)[-1].split("\n")[0]
        arguments = json.dumps({"query": question})
        return {
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "docs__search", "arguments": arguments}}
            ],
        }


@pytest.fixture
def calls(tmp_path, monkeypatch) -> Path:
    """The file the server writes each call to, and the variables its env names."""
    path = tmp_path / "calls.txt"
    monkeypatch.setenv("DOCS_CALLS", str(path))
    for name, query in (("DOCS_HANG", "hang"), ("DOCS_CRASH", "crash"), ("DOCS_HUGE", "huge")):
        monkeypatch.setenv(name, query)
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    return path


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def pipeline(tmp_path: Path, url: str, where: str | None = None, timeout: float = 5) -> Path:
    path = tmp_path / "support.sbp"
    text = PIPELINE.replace("WHERE", where or stdio_settings()).replace("timeout = 5", f"timeout = {timeout:g}")
    path.write_text(with_fake_model(text, url))
    (tmp_path / "support.jsonl").write_text("".join(json.dumps(row) + "\n" for row in DATA))
    return path


def started(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_check_reads_the_lock_sync_writes_and_starts_no_server(tmp_path, calls):
    path = pipeline(tmp_path, "http://127.0.0.1:9/v1")
    status, _, err = cli("check", str(path))
    assert status == 1 and "error[E173]: the MCP server 'docs' is not in the lock" in err
    assert f"sbpc tools sync {path}" in err
    status, out, _ = cli("tools", "sync", str(path))
    assert status == 0 and "locked 2 tool(s) of the MCP server 'docs'" in out
    lock = json.loads((tmp_path / ".sbpc" / "mcp.lock.json").read_text())
    assert lock["servers"]["docs"]["tools"]["search"]["input_schema"]["properties"]["query"]["type"] == "string"
    assert "!mcp.lock.json" in (tmp_path / ".sbpc" / ".gitignore").read_text()  # git keeps it: check reads it
    before = started(calls)
    (tmp_path / "support.sbp").write_text(path.read_text())  # a fresh stamp: check reads the lock again
    status, out, err = cli("check", str(path))
    assert status == 0 and f"{path}: ok" in out, err
    assert started(calls) == before  # no server started
    path.write_text(path.read_text().replace("timeout = 5", "timeout = 5\n  env = [DOCS_CALLS]"))
    status, _, err = cli("check", str(path))  # settings changed since the lock: said, before any run
    assert status == 1 and "is older than the settings of the MCP server 'docs'" in err


def test_check_suggests_the_tool_and_refuses_a_key_written_out(tmp_path, calls):
    path = pipeline(tmp_path, "http://127.0.0.1:9/v1")
    assert cli("tools", "sync", str(path))[0] == 0
    path.write_text(path.read_text().replace("[docs.search]", "[docs.serch, dcos.search]"))
    status, _, err = cli("check", str(path))
    assert "error[E175]: node 'answer': the MCP server 'docs' has no tool 'serch' (as locked)" in err
    assert "did you mean 'search'?" in err and "did you mean 'docs'?" in err  # E174: the server misspelt
    keyed = 'url = "http://127.0.0.1:9/mcp"\n  headers = "Authorization: Bearer sk-live-8f3a9c2b7d4e1f6a"'
    path.write_text(PIPELINE.replace("WHERE", keyed))
    status, _, err = cli("check", str(path))
    assert status == 1 and "error[E171]: mcp server 'docs': headers: it holds what looks like a key" in err
    assert "sk-live" in path.read_text() and "${DOCS_TOKEN}" in err  # the fix names a variable


def test_eval_and_optimize_call_the_stdio_server_and_write_the_trained_description_back(tmp_path, calls):
    script = Searcher()
    with FakeServer(reply=script) as model:
        path = pipeline(tmp_path, model.url)
        assert cli("tools", "sync", str(path))[0] == 0
        status, out, err = cli(
            "eval", str(path), "--data", str(tmp_path / "support.jsonl"), "--runs-dir", str(tmp_path / "runs")
        )
        assert status == 0, err
        assert "accuracy" in out.lower() and re.search(r"1\.0+|100", out), out
        offered = model.bodies[0]["tools"][0]["function"]
        assert offered["name"] == "docs__search" and offered["description"] == "Search the shop's help pages."
        assert offered["parameters"]["properties"]["query"]["type"] == "string"  # the server's own schema
        assert sorted(started(calls)) == sorted(f"search {row['question']}" for row in DATA)
        script.wrong = True
        with sbp.load(path, cache=False) as loaded:
            optimized = loaded.optimize(
                str(tmp_path / "support.jsonl"),
                train_size=2,
                val_size=2,
                iterations=1,
                gate="none",
                write=True,
                runs_dir=tmp_path / "runs",
            )
    [iteration] = optimized.outcome.iterations
    assert "search_doc" in {c.param for c in iteration.candidates}  # the server's tool description is trained
    assert 'param search_doc = "Improved instruction for search_doc."' in path.read_text()
    assert "search.description = search_doc" in path.read_text()


@pytest.fixture
def http_server(tmp_path, calls):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    process.kill()
    process.wait()


def test_a_streamable_http_server_passes_check_after_sync_and_its_tools_are_called(
    tmp_path, calls, http_server, monkeypatch
):
    monkeypatch.setenv("DOCS_TOKEN", "a-token-from-the-environment")
    with FakeServer(reply=Searcher()) as model:
        path = pipeline(
            tmp_path, model.url, f'url = "{http_server}"\n  headers = "Authorization: Bearer ${{DOCS_TOKEN}}"'
        )
        assert cli("tools", "sync", str(path))[0] == 0
        assert "a-token" not in (tmp_path / ".sbpc" / "mcp.lock.json").read_text()  # the lock keeps no key
        status, out, err = cli("check", str(path))
        assert status == 0, err
        status, out, err = cli(
            "eval", str(path), "--data", str(tmp_path / "support.jsonl"), "--runs-dir", str(tmp_path / "runs")
        )
        assert status == 0, err
    assert sorted(started(calls)) == sorted(f"search {row['question']}" for row in DATA)


def one_answer(tmp_path, calls, question: str, timeout: float = 5, again: str | None = None):
    """Ask once with `question` (and then `again`, on the same pipeline); each prediction's search result."""
    with FakeServer(reply=Searcher()) as model:
        path = pipeline(tmp_path, model.url, timeout=timeout)
        assert cli("tools", "sync", str(path))[0] == 0
        with sbp.load(path, cache=False) as loaded:
            results = []
            for asked in (question, again) if again else (question,):
                started_at = time.monotonic()
                prediction = loaded(question=asked)
                [result] = steps_of(prediction.trace.nodes["answer"])[0].results
                results.append((result, time.monotonic() - started_at))
    return results


def test_a_server_that_hangs_is_that_calls_error_and_is_restarted(tmp_path, calls):
    [(hung, took), (after, _)] = one_answer(tmp_path, calls, "hang", timeout=1, again="refunds")
    assert hung.error and "did not answer within its timeout of 1s" in hung.content
    assert "was stopped and is started again for the next call" in hung.content
    assert took < 8, took  # no hang: the call's timeout, then the answer
    assert not after.error and after.content.startswith("Refunds are paid")


def test_a_server_that_dies_mid_call_is_that_calls_error_and_is_restarted(tmp_path, calls):
    [(died, _), (after, _)] = one_answer(tmp_path, calls, "crash", again="shipping")
    assert died.error and "the MCP server 'docs' stopped during the call of docs.search" in died.content
    assert not after.error and after.content.startswith("Orders ship")
    assert started(calls) == ["search crash", "search shipping"]


def test_a_result_of_50_mb_is_that_calls_error(tmp_path, calls):
    """Read no further than 4 MB: the call fails at once, and the server is started again for the next."""
    [(huge, took), (after, _)] = one_answer(tmp_path, calls, "huge", timeout=30, again="refunds")
    assert huge.error and "docs.search returned more than 4 MB (a tool's result may be 1 MB)" in huge.content
    assert took < 15, took  # not the timeout: the reading stopped at the limit
    assert not after.error and after.content.startswith("Refunds are paid")


def test_a_result_of_50_mb_over_http_is_that_calls_error(tmp_path, calls, http_server):
    with FakeServer(reply=Searcher()) as model:
        path = pipeline(tmp_path, model.url, f'url = "{http_server}"', timeout=60)
        assert cli("tools", "sync", str(path))[0] == 0
        with sbp.load(path, cache=False) as loaded:
            prediction = loaded(question="huge")
    [huge] = steps_of(prediction.trace.nodes["answer"])[0].results
    assert huge.error and re.search(r"docs\.search returned 5\d\.\d MB, more than the 1 MB", huge.content)


def test_a_server_whose_schema_changed_stops_the_run_before_any_call(tmp_path, calls, monkeypatch):
    with FakeServer(reply=Searcher()) as model:
        path = pipeline(tmp_path, model.url)
        assert cli("tools", "sync", str(path))[0] == 0
        monkeypatch.setenv("DOCS_RENAME", "words")  # the server's search now takes `words`
        path.write_text(path.read_text().replace("env = [", "env = [DOCS_RENAME, "))
        lock = tmp_path / ".sbpc" / "mcp.lock.json"
        data = json.loads(lock.read_text())
        from sembp_dsl.language.mcp_servers import Server
        from sembp_dsl.language.syntax.source import load

        data["servers"]["docs"]["settings"] = Server.of(load(str(path)).blocks[0]).settings_hash()
        lock.write_text(json.dumps(data))  # as if the lock were made before the server changed
        status, _, err = cli("run", str(path), "--input", "question=refunds")
        assert model.requests == 0  # stopped before any model call
    assert status == 1 and "error[E176]: the MCP server 'docs' changed since the lock" in err
    assert "tool 'search': its input schema differs" in err and "Traceback" not in err


def test_a_server_that_cannot_start_again_stops_the_run_saying_so(tmp_path, calls, monkeypatch):
    moved = tmp_path / "server.py"
    moved.write_text(SERVER.read_text())
    with FakeServer(reply=Searcher()) as model:
        path = pipeline(tmp_path, model.url, stdio_settings().replace(str(SERVER), str(moved)))
        assert cli("tools", "sync", str(path))[0] == 0
        with sbp.load(path, cache=False) as loaded:
            loaded(question="crash")  # the server dies
            moved.unlink()  # and cannot start again
            with pytest.raises(sbp.ServerStopped, match=r"stopped, and could not be started again for docs\.search"):
                loaded(question="refunds")


# --- a pipeline served as an MCP tool ---------------------------------------------------------------------------


def lookup_then_answer(messages):
    """The agent's model: looks the population of Kesh up, then answers with the number it was told."""
    last = messages[-1]
    if last["role"] == "tool":
        return last["content"].rsplit(": ", 1)[-1]
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"place": "Kesh", "fact": "population"}'},
    }
    return {"content": None, "tool_calls": [call]}


def served_agent(tmp_path: Path, url: str) -> Path:
    for name in ("agent.sbp", "agent_tools.py"):
        (tmp_path / name).write_text((ROOT / "pipelines" / name).read_text())
    path = tmp_path / "agent.sbp"
    path.write_text(with_fake_model(path.read_text(), url))
    return path


async def listed_and_called(streams) -> tuple[list, object]:
    from mcp.client.session import ClientSession

    async with ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        result = await session.call_tool(tools[0].name, {"question": "How many people live in Kesh?"})
        return tools, result


def assert_the_agent_tool(tools, result) -> None:
    [tool] = tools
    assert tool.name == "agent"
    assert tool.description == "Answer a question about the Vellmar Islands by looking facts up and computing"
    assert tool.input_schema["properties"]["question"]["type"] == "string"
    assert tool.input_schema["required"] == ["question"]
    assert not result.is_error and result.content[0].text == "18400"


def test_serve_mcp_answers_the_mcp_packages_own_client_on_stdio(tmp_path, monkeypatch):
    import asyncio

    from mcp.client.stdio import StdioServerParameters, stdio_client

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    with FakeServer(reply=lookup_then_answer) as model:
        path = served_agent(tmp_path, model.url)
        command = StdioServerParameters(
            command=sys.executable,
            args=["-m", "sembp_dsl.cli", "serve", str(path), "--mcp"],
            env={"OPENAI_API_KEY": "dummy"},
        )

        async def session():
            async with stdio_client(command) as streams:
                return await listed_and_called(streams)

        tools, result = asyncio.run(asyncio.wait_for(session(), 60))
        assert model.requests == 2  # the lookup call, then the answer
    assert_the_agent_tool(tools, result)


def test_serve_mcp_http_answers_mcp_clients_beside_the_json_service(tmp_path, monkeypatch):
    import asyncio
    import urllib.request

    from mcp.client.streamable_http import streamable_http_client

    with FakeServer(reply=lookup_then_answer) as model:
        path = served_agent(tmp_path, model.url)
        process = subprocess.Popen(
            [sys.executable, "-m", "sembp_dsl.cli", "serve", str(path), "--mcp", "http", "--port", "0", "--no-cache"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**__import__("os").environ, "OPENAI_API_KEY": "dummy"},
        )
        try:
            line = process.stdout.readline()
            url = re.search(r"on (http://\S+)", line).group(1)
            assert f"MCP clients at {url}/mcp" in line

            async def session():
                async with streamable_http_client(f"{url}/mcp") as streams:
                    return await listed_and_called(streams)

            tools, result = asyncio.run(asyncio.wait_for(session(), 60))
            request = urllib.request.Request(url, data=b'{"question": "How many people live in Kesh?"}', method="POST")
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert json.loads(answer.read())["output"] == "18400"  # the JSON service, beside it
        finally:
            process.terminate()
            process.wait(10)
    assert_the_agent_tool(tools, result)


def test_check_of_a_pipeline_with_servers_imports_no_mcp(tmp_path, calls):
    path = pipeline(tmp_path, "http://127.0.0.1:9/v1")
    assert cli("tools", "sync", str(path))[0] == 0
    probe = (
        "import json, sys\nfrom sembp_dsl.cli import main\nstatus = main(['check', sys.argv[1]])\n"
        "print(json.dumps([status, sorted(sys.modules)]))"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    status, modules = json.loads(done.stdout.splitlines()[-1])
    assert status == 0, done.stderr
    assert not [m for m in modules if m.split(".")[0] in ("mcp", "mcp_types", "httpx2", "anyio", "starlette")]
    assert "sembp_dsl.runtime.mcp_client" not in modules


def test_the_editor_indexes_servers_their_tools_and_description_params(tmp_path):
    from sembp_dsl.language.tooling.editor import Document

    text = PIPELINE.replace("WHERE", 'command = "python docs_server.py"')
    document = Document(text=text, path=str(tmp_path / "support.sbp"))
    servers = [(o.declaration, text[o.start : o.end]) for o in document.occurrences if o.namespace == "mcp"]
    assert servers == [(True, "docs"), (False, "docs")]  # `mcp docs {`, and `docs.search` in the tools list
    params = [o.declaration for o in document.occurrences if o.name == "search_doc"]
    assert params == [True, False]  # declared, and named by `search.description`
    assert "MCP server **docs**: `python docs_server.py`" in document.describe("mcp", "docs")


def test_the_yaml_twin_compiles_to_the_same_servers(tmp_path):
    from sembp_dsl.language.syntax.source import parse_text

    sbp_form = parse_text(PIPELINE.replace("WHERE", 'command = "python docs_server.py"'), str(tmp_path / "a.sbp"))
    yaml_form = parse_text(
        "pipeline: support\ndescription: Answer a customer's question from the shop's help pages\n"
        "inputs: {question: text}\n"
        "params: {task: Answer the customer's question from the help pages., search_doc: Search the shop's help pages.}\n"
        "mcp:\n  docs:\n    command: python docs_server.py\n    timeout: 5\n    tools: {search: {description: search_doc}}\n"
        'templates:\n  asking: "{{ prompt }}\\nQuestion: {{ question }}"\n'
        "nodes:\n  answer: {type: text, prompt: task, template: asking, tools: [docs.search], max_steps: 3}\n"
        'edges: ["question -> answer"]\noutput: answer\nmetric: exact\n',
        str(tmp_path / "a.yaml"),
    )
    assert yaml_form.blocks == sbp_form.blocks and yaml_form.nodes == sbp_form.nodes


def test_a_tool_setting_of_a_tool_the_server_lacks_is_said(tmp_path, calls):
    path = pipeline(tmp_path, "http://127.0.0.1:9/v1")
    assert cli("tools", "sync", str(path))[0] == 0
    path.write_text(path.read_text().replace("search.description", "serch.description"))
    status, _, err = cli("check", str(path))
    assert status == 1 and "error[E175]: the MCP server 'docs' has no tool 'serch' (as locked)" in err
    assert "did you mean 'search'?" in err
