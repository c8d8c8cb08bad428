"""`sbpc serve` and clients that hang up: real HTTP clients, a real `sbpc serve`, the loopback fake model.

The fake model stops a request whose client closed its connection (as vLLM does), so its
`in_flight` counts the calls somebody still waits for.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import ECHO, wait_until
from fake_server import FakeServer

DELAY = 3.0  # seconds the fake model takes per call: far longer than it may take to see a client leave


@pytest.fixture
def model():
    with FakeServer(delay=DELAY, reply="something") as server:
        yield server


@pytest.fixture
def served(tmp_path, model):
    """`sbpc serve` of ECHO in a process of its own, against the fake model: its URL."""
    path = tmp_path / "echo.sbp"
    path.write_text(ECHO)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "serve",
            str(path),
            "--port",
            "0",
            "--model",
            "openai/fake",
            "--api-base",
            model.url,
            "--no-cache",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://\S+", line)
        assert url, line + proc.stderr.read()
        yield url.group(0)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        errors = proc.stderr.read()
        assert "Traceback" not in errors and "Task was destroyed" not in errors, errors


def post(url: str, inputs: dict) -> socket.socket:
    """A client that sent its request and waits for the answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    client = socket.create_connection((host, int(port)), timeout=30)
    body = json.dumps(inputs).encode()
    client.sendall(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    return client


def answer(client: socket.socket) -> tuple[int, dict]:
    """The status and JSON body; (0, {}) when the server closed the connection without an answer."""
    reply = b""
    while chunk := client.recv(65536):
        reply += chunk
    client.close()
    if not reply:
        return 0, {}
    head, body = reply.split(b"\r\n\r\n", 1)
    return int(head.split()[1]), json.loads(body)


def answer_in_background(client: socket.socket):
    """Read the answer in a thread; call the result to wait for it."""
    answers: list = []
    thread = threading.Thread(target=lambda: answers.append(answer(client)), daemon=True)
    thread.start()

    def wait(timeout: float) -> tuple[int, dict]:
        thread.join(timeout)
        assert answers, f"no answer within {timeout:g} s"
        return answers[0]

    return wait


def test_a_client_that_hangs_up_cancels_its_model_call_and_not_the_others(served, model):
    leaving, staying = post(served, {"topic": "cats"}), post(served, {"topic": "dogs"})
    stayed = answer_in_background(staying)
    wait_until(lambda: model.in_flight == 2, within=2)
    leaving.close()
    assert wait_until(lambda: model.in_flight == 1, within=1.5) < DELAY / 2  # not the call ending on its own
    status, body = stayed(2 * DELAY)
    assert status == 200 and body["output"] == "something"
    assert model.requests == 2  # the call of the client that left was not asked again
    assert model.in_flight == 0  # the fake counts a call out before it answers


def test_a_call_shared_with_a_client_that_hung_up_still_answers_the_one_that_stayed(served, model):
    first = post(served, {"topic": "cats"})
    wait_until(lambda: model.in_flight == 1, within=2)
    stayed = answer_in_background(post(served, {"topic": "cats"}))  # the same prompt: shares the call in flight
    time.sleep(0.5)
    assert model.requests == 1
    first.close()  # the request that made the call leaves
    status, body = stayed(3 * DELAY)
    assert status == 200 and body["output"] == "something"
    assert model.requests == 1  # the call went on for the client that stayed: not cancelled, not asked again
