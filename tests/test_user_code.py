"""Code a pipeline names, misbehaving (issue 34): a function that overruns its timeout ends its sample and leaves
the process able to exit and to serve others; what it prints never reaches sbpc's own output."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sembp_dsl.usercode import call_function

ROOT = Path(__file__).resolve().parents[1]

ECHO = """\
pipeline echo "Run a function"
input s: text
function f = "tools:{name}"
node out: text {{ function = f  timeout = {timeout} }}
s -> out
output out
"""

TOOLS = """\
import asyncio
import time


def stuck(s):
    time.sleep(60)
    return s


async def blocking(s):
    time.sleep(60)
    return s


def surrogate(s):
    return s + "\\ud800"


def chatty(s):
    print("hello from the function")
    return s.upper()


class Halt(BaseException):
    "Not an Exception: caught by no except Exception."


def look(s):
    raise Halt("the index is gone")
"""


def folder_with(tmp_path: Path, name: str, timeout: float = 1) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS)
    path = tmp_path / "echo.sbp"
    path.write_text(ECHO.format(name=name, timeout=timeout))
    return path


def sbpc(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", *argv], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_run_exits_soon_after_a_sync_function_overruns_its_timeout(tmp_path):
    path = folder_with(tmp_path, "stuck", timeout=0.5)
    started = time.monotonic()
    done = sbpc("run", str(path), "--input", "s=x", timeout=30)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert "took longer than its timeout of 0.5s" in done.stdout + done.stderr
    started = time.monotonic()
    assert sbpc("run", str(folder_with(tmp_path, "chatty")), "--input", "s=x", timeout=30).returncode == 0
    assert took - (time.monotonic() - started) < 0.5 + 2  # within 2 s of the timeout, a quick run's time aside


def test_an_async_function_that_blocks_its_thread_still_times_out():
    async def blocking() -> str:
        time.sleep(3)
        return "late"

    started = time.monotonic()
    result, raised = asyncio.run(call_function(blocking, {}, 0.2))
    assert time.monotonic() - started < 1.5
    assert result is None and isinstance(raised, TimeoutError)


def test_calls_that_overran_do_not_starve_later_ones():
    def slow() -> str:
        time.sleep(3)
        return "late"

    async def scenario() -> list:
        stuck = await asyncio.gather(*(call_function(slow, {}, 0.1) for _ in range(40)))
        assert all(isinstance(raised, TimeoutError) for _, raised in stuck)
        return await asyncio.gather(*(call_function(lambda: "fast", {}, 1.0) for _ in range(40)))

    started = time.monotonic()
    later = asyncio.run(scenario())
    assert [result for result, _ in later] == ["fast"] * 40
    assert time.monotonic() - started < 2.5  # not behind the 3 s of the stuck ones


def test_a_sync_function_result_and_exception_come_back():
    def fails() -> None:
        raise ValueError("no")

    assert asyncio.run(call_function(lambda x: x + 1, {"x": 1}, 1.0)) == (2, None)
    result, raised = asyncio.run(call_function(fails, {}, 1.0))
    assert result is None and isinstance(raised, ValueError)
    result, raised = asyncio.run(call_function(lambda: sys.exit(3), {}, 1.0))
    assert isinstance(raised, SystemExit)


def test_run_json_stays_json_when_a_function_prints(tmp_path):
    path = folder_with(tmp_path, "chatty")
    done = sbpc("run", str(path), "--input", "s=abc", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["trace"]["output"] == "ABC"
    assert "hello from the function" in done.stderr


SURROGATE_PIPELINE = """\
pipeline p "Answer"
input question: text
function f = "tools:{name}"
param task = "Answer the question."
node mid: text {{ function = f }}
node out: text {{ prompt = task }}
question -> mid -> out
output out
model {{ name = "openai/fake"  api_base = "http://127.0.0.1:9/v1" }}
"""


def test_a_lone_surrogate_in_a_row_or_a_return_value_is_that_samples_error(tmp_path):
    done = sbpc("run", str(folder_with(tmp_path, "surrogate")), "--input", "s=a")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "function failed: what f returned holds a lone surrogate ('\\ud800')" in done.stdout, done.stdout
    (tmp_path / "tools.py").write_text(TOOLS + "\n\ndef broken(question):\n    return 'x\\ud800'\n")
    (tmp_path / "broken.sbp").write_text(SURROGATE_PIPELINE.format(name="broken"))
    direct = SURROGATE_PIPELINE.format(name="same").replace("node mid: text { function = f }\n", "")
    (tmp_path / "same.sbp").write_text(direct.replace("question -> mid -> out", "question -> out"))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "a\\ud800b", "answer": "x"}\n')
    done = sbpc("run", str(tmp_path / "broken.sbp"), "--input", "question=a", "--json")
    assert "Traceback" not in done.stderr and "bug in sbpc" not in done.stderr, done.stderr
    assert "lone surrogate" in done.stdout, done.stdout
    json.loads(done.stdout)
    # a row holding one is a bad row, named by its line before any call (tests/test_data_hostile.py)
    done = sbpc("eval", str(tmp_path / "same.sbp"), "--data", str(rows), "--errors", "1", "--json")
    assert done.returncode == 1 and "Traceback" not in done.stderr and "bug in sbpc" not in done.stderr
    assert "rows.jsonl:1: a \\ud800-\\udfff escape that pairs with none" in done.stderr, done.stderr


def test_evals_summary_counts_function_failures_by_cause(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"s": "a", "answer": "A"}\n{"s": "b", "answer": "B"}\n')
    done = sbpc("eval", str(folder_with(tmp_path, "surrogate")), "--data", str(rows))
    assert "2 of 2 samples scored wrong after a failure: function failed x2" in done.stdout, done.stdout + done.stderr
    done = sbpc("eval", str(folder_with(tmp_path, "surrogate")), "--data", str(rows), "--json")
    assert json.loads(done.stdout)["failure_causes"] == {"function failed": 2}


def test_a_base_exception_of_its_own_is_that_calls_error_at_once():
    """A BaseException other than SystemExit and KeyboardInterrupt killed the worker thread: a thread traceback
    on stderr, and the call waited out its whole timeout."""

    class Halt(BaseException):
        pass

    def look() -> None:
        raise Halt("the index is gone")

    started = time.monotonic()
    result, raised = asyncio.run(call_function(look, {}, 20.0))
    assert time.monotonic() - started < 2
    assert result is None and isinstance(raised, Halt) and str(raised) == "the index is gone"


def test_a_function_node_raising_a_base_exception_of_its_own_fails_its_sample_without_a_thread_traceback(tmp_path):
    started = time.monotonic()
    done = sbpc("run", str(folder_with(tmp_path, "look", timeout=20)), "--input", "s=x", timeout=60)
    assert time.monotonic() - started < 15  # not the 20 s timeout
    assert done.returncode == 1, done.stderr
    assert "function failed: f raised Halt: the index is gone" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr, done.stderr
