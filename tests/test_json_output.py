"""`--json` output of run, eval and optimize, and `sbpc serve`'s answers, carry model replies: strangers' text.
What would steer a terminal (DEL, C1 controls such as U+009B, a CSI; bidi overrides; zero-width characters) is
written as a \\u escape, other text as it is, and the JSON reads back to the very same strings."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import ECHO, with_fake_model

from sembp_dsl import cli
from sembp_dsl.language.diagnostics import INVISIBLE

HOSTILE = "café \x7f \x9b31m red \u202eevil\u202c \u200bhidden"


@pytest.fixture
def hostile_model():
    from fake_server import FakeServer

    with FakeServer(reply=HOSTILE) as server:
        yield server


@pytest.fixture
def echo(tmp_path):
    path = tmp_path / "echo.sbp"
    path.write_text(ECHO)
    return str(path)


def safe_json(text: str):
    """The JSON an `sbpc --json` printed, after checking it holds nothing raw that steers a terminal."""
    assert not INVISIBLE.search(text), INVISIBLE.findall(text)
    assert "café" in text  # other text is printed as it is, not as \u escapes
    return json.loads(text)


def test_run_and_eval_json_escape_what_steers_a_terminal(echo, hostile_model, tmp_path, capsys):
    model = ["--model", "openai/fake", "--api-base", hostile_model.url]
    assert cli.main(["run", echo, "--input", "topic=x", *model, "--json"]) == 0
    assert safe_json(capsys.readouterr().out)["trace"]["nodes"]["said"]["reply"] == HOSTILE
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"topic": "x", "answer": "something else"}) + "\n")
    assert cli.main(["eval", echo, "--data", str(data), *model, "--errors", "1", "--json"]) == 0
    [wrong] = safe_json(capsys.readouterr().out)["errors"]
    assert wrong["reply"] == wrong["output"] == HOSTILE


def test_optimize_json_escapes_what_steers_a_terminal(tmp_path, fake_llm, script, capsys):

    path = tmp_path / "echo.sbp"
    path.write_text(with_fake_model(ECHO, fake_llm.url))
    script.improve = lambda param, prompt: HOSTILE  # the optimizer's reply, kept in the run record
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"topic": f"t{i}", "answer": "right"}) + "\n" for i in range(4)))
    code = cli.main(
        [
            "optimize",
            str(path),
            "--data",
            str(data),
            "--train-size",
            "2",
            "--val-size",
            "2",
            "--test-size",
            "0",
            "--iters",
            "1",
            "--dry-run",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--json",
        ]
    )
    run = safe_json(capsys.readouterr().out)
    assert code == 0 and HOSTILE in json.dumps(run["iterations"], ensure_ascii=False)


def test_serve_answers_escape_what_steers_a_terminal(echo, hostile_model):
    from aiohttp import web

    import sembp_dsl as sbp
    from sembp_dsl import serve

    async def main() -> bytes:
        with sbp.load(echo, model="openai/fake", api_base=hostile_model.url) as pipeline:
            runner = web.AppRunner(serve.app(pipeline, allow_trace=True))
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            reader, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1])
            writer.write(
                b'POST /?trace=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 14\r\n\r\n{"topic": "x"}'
            )
            reply = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            await runner.cleanup()
            return reply

    head, _, body = asyncio.run(main()).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    answer = safe_json(body.decode())
    assert answer["output"] == answer["trace"]["nodes"]["said"]["reply"] == HOSTILE
