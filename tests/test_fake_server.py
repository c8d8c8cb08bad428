"""Quick tests of tests/fake_server.py (the loopback OpenAI-compatible server)."""

import asyncio
import time

import aiohttp
import httpx
import pytest
from fake_server import HANG, FakeServer, spawn

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there world"}]


def chat(url, timeout=5.0, client=httpx, **extra):
    """One chat completion; `client`: an httpx.Client to reuse its connection (default: a new one)."""
    return client.post(
        url + "/chat/completions", timeout=timeout, json={"model": "fake-model", "messages": MESSAGES, **extra}
    )


def test_completion_shape_and_echo():
    with FakeServer() as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv.url.endswith("/v1")
        r = chat(srv.url)
        assert r.status_code == 200
        body = r.json()
        assert body["object"] == "chat.completion"
        assert body["id"] and isinstance(body["created"], int)
        assert body["model"] == "fake-model"
        choice = body["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": "echo: hello there world"}
        assert choice["finish_reason"] == "stop"
        assert body["usage"] == {
            "prompt_tokens": 5,
            "completion_tokens": 4,
            "total_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 0},  # as OpenAI sends it: none of a new prompt
        }
        # Path without the /v1 prefix is served too.
        assert (
            httpx.post(srv.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES}).status_code == 200
        )
        assert srv.requests == 2
        assert srv.bodies[0]["messages"] == MESSAGES


def test_reply_string_and_callable():
    with FakeServer(reply="fixed answer") as srv:
        assert chat(srv.url).json()["choices"][0]["message"]["content"] == "fixed answer"
    with FakeServer(reply=lambda msgs: f"{len(msgs)} messages") as srv:
        assert chat(srv.url).json()["choices"][0]["message"]["content"] == "2 messages"


def test_keep_alive_off_closes_each_connection():
    """With keep_alive=False a client keeps no idle connection (bench/paper_calls.py serves the authors' code so:
    their client, shared by several event loops, fails on a connection an earlier loop left open)."""
    with FakeServer() as srv, httpx.Client() as client:
        for _ in range(2):
            assert chat(srv.url, client=client).headers["connection"] == "keep-alive"
        assert srv.connections == 1
        srv.configure(keep_alive=False)
        for _ in range(2):
            assert chat(srv.url, client=client).headers["connection"] == "close"
        assert srv.connections == 2  # the open one (closed after its answer), then a new one
        srv.configure(keep_alive=True)
        chat(srv.url, client=client)
        chat(srv.url, client=client)
        assert srv.connections == 3 and srv.requests == 6  # one new connection, kept


def test_delay():
    with FakeServer(delay=0.3) as srv:
        t0 = time.perf_counter()
        assert chat(srv.url).status_code == 200
        assert 0.3 <= time.perf_counter() - t0 < 2.0


def test_scripted_failures_then_success():
    with FakeServer(failures=[429, 500, 503], retry_after=0) as srv:
        r = chat(srv.url)
        assert r.status_code == 429
        assert r.headers["retry-after"] == "0"
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert [chat(srv.url).status_code for _ in range(3)] == [500, 503, 200]
        assert srv.requests == 4
        srv.reset(failures=[502])
        assert srv.requests == 0
        assert [chat(srv.url).status_code for _ in range(2)] == [502, 200]


def test_hang_exceeds_client_timeout():
    with FakeServer(failures=[HANG], hang_seconds=30) as srv:
        t0 = time.perf_counter()
        with pytest.raises(httpx.ReadTimeout):
            chat(srv.url, timeout=0.3)
        assert time.perf_counter() - t0 < 5
        assert chat(srv.url).status_code == 200  # only the first one hangs
    # Stopping the server cancels the hung request promptly (exit above).


def test_concurrent_requests_overlap_and_counters():
    n, delay = 128, 0.3

    async def run(url):
        # aiohttp: its pool stays cheap with hundreds of connections.
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one():
                async with session.post(url + "/chat/completions", json={"model": "m", "messages": MESSAGES}) as r:
                    await r.read()
                    return r.status

            t0 = time.perf_counter()
            statuses = await asyncio.gather(*(one() for _ in range(n)))
            return time.perf_counter() - t0, statuses

    with FakeServer(delay=delay) as srv:
        elapsed, statuses = asyncio.run(run(srv.url))
        assert statuses == [200] * n
        assert elapsed < delay * 4  # overlapped, not serialised
        assert srv.requests == n
        assert srv.max_in_flight == n
        assert srv.connections == n
        assert srv.in_flight == 0


def test_a_request_is_counted_out_before_its_answer_arrives():
    """The server thread counts a request out of in_flight before it writes the answer, so a client that
    has its answer (a completion, a stream or a fault) never sees it still in flight: no test needs to wait."""
    with FakeServer(failures=[500, 429] * 5) as srv, httpx.Client(timeout=5) as client:
        seen = []
        for i in range(200):  # the race it guards against showed in about 1 request in 10
            r = client.post(
                srv.url + "/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": i % 2 == 1}
            )
            seen.append((r.status_code, srv.in_flight))
        assert [in_flight for _, in_flight in seen] == [0] * 200
        assert {status for status, _ in seen} == {200, 429, 500}
        assert srv.requests == 200 and srv.max_in_flight == 1


def test_max_in_flight_reflects_client_limit():
    async def run(url, limit):
        sem = asyncio.Semaphore(limit)
        async with httpx.AsyncClient(timeout=10) as client:

            async def one():
                async with sem:
                    r = await client.post(url + "/chat/completions", json={"model": "m", "messages": MESSAGES})
                    assert r.status_code == 200

            await asyncio.gather(*(one() for _ in range(40)))

    with FakeServer(delay=0.05) as srv:
        asyncio.run(run(srv.url, 5))
        assert srv.requests == 40
        assert srv.max_in_flight == 5


def test_streaming_sse():
    with FakeServer(reply="a b c") as srv:
        r = chat(srv.url, stream=True)
        assert r.headers["content-type"] == "text/event-stream"
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert '"usage"' in events[-2]


def test_spawn_subprocess():
    url, stop = spawn(0.05)
    try:
        r = chat(url)
        assert r.status_code == 200
        stats = httpx.get(url[: -len("/v1")] + "/stats").json()
        assert stats["requests"] == 1 and stats["max_in_flight"] == 1
        assert httpx.post(url[: -len("/v1")] + "/reset").status_code == 200
        assert httpx.get(url[: -len("/v1")] + "/stats").json()["requests"] == 0
    finally:
        stop()
    with pytest.raises(httpx.ConnectError):
        chat(url, timeout=1)


def test_faults_at_a_rate_are_seeded_and_counted():
    kinds = ["500", "empty-choices", "html-502"]
    with FakeServer(reply="ok", fault_rate=0.5, fault_kinds=kinds, seed=7) as srv, httpx.Client() as client:
        first = [chat(srv.url, client=client).status_code for _ in range(40)]
        assert srv.faults == sum(srv.fault_counts.values()) == len(srv.fault_times)
        assert 8 <= srv.faults <= 32 and set(srv.fault_counts) <= set(kinds)
        srv.reset()  # re-seeds: the same faults again
        assert [chat(srv.url, client=client).status_code for _ in range(40)] == first


@pytest.mark.parametrize(
    "fault, check",
    [
        ("html-404", lambda r: r.status_code == 404 and "<title>404 Not Found</title>" in r.text),
        ("missing-credentials", lambda r: r.status_code == 500 and "Missing credentials" in r.text),
        ("401", lambda r: r.status_code == 401 and "sk-echoed" in r.text),
        ("null-content", lambda r: r.json()["choices"][0]["message"]["content"] is None),
        ("empty-choices", lambda r: r.json()["choices"] == []),
        ("no-choices", lambda r: "choices" not in r.json()),
        ("list-body", lambda r: r.json() == []),
        ("malformed", lambda r: r.status_code == 200 and r.text.startswith("{") and not r.text.endswith("}")),
        ("429-retry-after", lambda r: r.status_code == 429 and r.headers["retry-after"] == "0.5"),
    ],
)
def test_each_fault_looks_as_it_should(fault, check):
    with FakeServer(failures=[fault], retry_after=0.5) as srv:
        response = httpx.post(
            srv.url + "/chat/completions",
            headers={"Authorization": "Bearer sk-echoed"},
            json={"model": "m", "messages": MESSAGES},
        )
        assert check(response) and srv.fault_counts == {fault: 1}
        assert chat(srv.url).status_code == 200


def test_reset_mid_body_and_refused_connections():
    from fake_server import refused_url

    with FakeServer(failures=["reset"]) as srv:
        with pytest.raises(httpx.RemoteProtocolError):
            chat(srv.url)
        assert chat(srv.url).status_code == 200
    with pytest.raises(httpx.ConnectError):
        chat(refused_url(), timeout=1)


def test_a_refusal_past_the_limit_takes_its_delay_and_holds_no_place():
    """`refusal_delay` makes a 429 past `limit` take as long as a provider's does, without counting it in flight:
    what bench/adaptive.py measures the window against."""

    async def run(url):
        async with aiohttp.ClientSession() as session:

            async def one():
                t0 = time.perf_counter()
                async with session.post(url + "/chat/completions", json={"model": "m", "messages": MESSAGES}) as r:
                    await r.read()
                    return r.status, time.perf_counter() - t0

            return await asyncio.gather(*(one() for _ in range(4)))

    with FakeServer(reply="ok", delay=0.4, limit=2) as srv:
        srv.configure(refusal_delay=0.15)
        answers = asyncio.run(run(srv.url))
        refused = [took for status, took in answers if status == 429]
        assert sorted(status for status, _ in answers) == [200, 200, 429, 429]
        assert all(0.15 <= took < 0.35 for took in refused)  # the delay, not the answers' 0.4 s
        assert srv.max_in_flight == 3 and srv.in_flight == 0  # each refusal counted once, then out


def test_a_repeated_prompt_prefix_is_reported_cached_as_openai_reports_it():
    import openai

    head = " ".join(f"w{n}" for n in range(1200))  # 1,200 words: a 1,152-word cached prefix, in 128s past 1,024
    with FakeServer(reply="ok") as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="x")
        first = client.chat.completions.create(model="m", messages=[{"role": "user", "content": head + " one"}])
        again = client.chat.completions.create(model="m", messages=[{"role": "user", "content": head + " two"}])
        short = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "w0 w1 w2"}])
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens == 1152 and again.usage.prompt_tokens == 1201
    assert short.usage.prompt_tokens_details.cached_tokens == 0
