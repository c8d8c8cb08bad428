"""`sbpc report`: one self-contained page, checked in a real headless Chromium over its DevTools pipe.

The browser test skips when Chromium is missing on a developer's machine, and fails
when CI=true: CI must prove the page loads offline, with no console error and its plots.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from test_optimize import TOY, data, write

from sembp_dsl import cli
from sembp_dsl.records.report import CSS

HOSTILE = '</div><script>alert("x")</script><img src=x onerror=alert(1)> <style>body{display:none}</style> $x^2$ &amp;'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def make_run(tmp_path, fake_llm, script, name: str, *flags) -> Path:
    """A real finished run on the fake server whose prompts, replies and gradients hold markup."""
    folder = tmp_path / name
    folder.mkdir()
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    script.improve = lambda param, prompt: f"Improved {param} {HOSTILE}"
    script.backward_reply = f"Hint 1: {HOSTILE} \u202edesrever\nHint 2: b"  # a bidi override, too
    path = write(folder, "toy.sbp", TOY, fake_llm.url)
    assert (
        cli.main(
            [
                "optimize",
                str(path),
                "--data",
                data(folder, n=12),
                "--train-size",
                "3",
                "--val-size",
                "5",
                "--test-size",
                "4",
                "--iters",
                "2",
                "--runs-dir",
                str(tmp_path / "runs"),
                *flags,
            ]
        )
        == 0
    )
    return path


@pytest.fixture
def two_runs(tmp_path, fake_llm, script, capsys):
    make_run(tmp_path, fake_llm, script, "one")
    make_run(tmp_path, fake_llm, script, "two", "--gradient", "no-sibling")
    capsys.readouterr()
    return tmp_path / "runs"


def report(runs: Path, out: Path, *specs: str) -> str:
    assert cli.main(["report", *specs, "--runs-dir", str(runs), "--out", str(out)]) == 0
    return out.read_text()


def test_the_page_escapes_everything_and_allows_only_its_own_style(two_runs, tmp_path):
    html = report(two_runs, tmp_path / "r.html", "1")
    assert "<script" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "\u202e" not in html and "\\u202edesrever" in html  # written out, as the terminal shows it
    assert html.count("<style>") == 1 and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in policy and "img-src data:" in policy and "unsafe" not in policy
    import base64
    import hashlib

    assert base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode() in policy
    # scores, calls and cost, and the run's concurrency over time (the adaptive window's, by default)
    assert html.count('<img class="plot"') == 3 and "data:image/svg+xml;base64," in html
    # every candidate's diff and fate, the gradients per node, the final diff of the source file
    assert "<ins>" in html and "taken" in html and "gradients from sample" in html
    assert '<span class="add">+param verdict_task = ' in html


def test_several_runs_give_one_comparing_page(two_runs, tmp_path):
    html = report(two_runs, tmp_path / "r.html", "1", "2")
    assert "2 runs compared" in html
    table = html[html.index("<table>") : html.index("</table>")]
    assert table.count("<tr>") == 3 and "gradient=no_sibling" in table
    assert html.count("<h2>") == 2


def test_a_missing_run_is_an_error_not_a_page(two_runs, tmp_path, capsys):
    assert cli.main(["report", "9", "--runs-dir", str(two_runs), "--out", str(tmp_path / "r.html")]) == 1
    assert "no run number 9" in capsys.readouterr().err and not (tmp_path / "r.html").exists()


def test_a_page_from_an_interrupted_run_whose_file_is_gone(two_runs, tmp_path):
    folder = sorted(two_runs.iterdir())[0]
    record = json.loads((folder / "run.json").read_text())
    record["iterations"] = record["iterations"][:1]
    record["settings"]["file"] = str(tmp_path / "gone.sbp")
    for key in ("test", "ledger"):
        record.pop(key)
    record["finished"] = False  # what a killed run leaves
    (folder / "run.json").write_text(json.dumps(record))
    html = report(two_runs, tmp_path / "r.html", "1")
    assert "interrupted after 1 of 2 iterations" in html and "1 iteration(s) not run" in html
    assert "the source file is gone" in html and "<ins>" in html


# --- the real browser ------------------------------------------------------------------------------


class DevTools:
    """The Chrome DevTools protocol over --remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4."""

    def __init__(self, profile: str):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # the child must find them on fds 3 and 4: park them high first, so no dup2 overwrites another
        high = [os.dup2(fd, 100 + i) for i, fd in enumerate((to_browser_r, from_browser_w))]

        def to_3_and_4():
            os.dup2(100, 3)
            os.dup2(101, 4)

        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(3, 4, *high),
            preexec_fn=to_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fd in (to_browser_r, from_browser_w, *high):
            os.close(fd)
        self.buffer, self.next_id, self.events = b"", 0, []

    def send(self, method: str, session: str | None = None, timeout: float = 30, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            reply = self.receive(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)
        raise TimeoutError(method)

    def receive(self, deadline: float) -> dict:
        import selectors

        while b"\0" not in self.buffer:
            with selectors.DefaultSelector() as waiting:  # not select(): a test process may hold fds past 1024
                waiting.register(self.from_browser, selectors.EVENT_READ)
                ready = waiting.select(max(0.0, deadline - time.time()))
            if not ready:
                raise TimeoutError("no message from the browser")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(self.receive(deadline))

    def close(self) -> None:
        try:
            os.write(self.to_browser, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)


@pytest.fixture
def browser(tmp_path):
    if not CHROMIUM:
        if os.environ.get("CI") == "true":
            pytest.fail(
                "CI must check the report in a real browser: install Debian's chromium (apt-get install chromium)"
            )
        pytest.skip("chromium is not installed (apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="sbpc-chromium-")
    devtools = DevTools(profile)
    yield devtools
    devtools.close()
    shutil.rmtree(profile, ignore_errors=True)


def test_the_page_loads_offline_with_no_console_error_and_its_plots(two_runs, tmp_path, browser):
    out = tmp_path / "report.html"
    report(two_runs, out, "1", "2")
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session)
    browser.send(
        "Network.emulateNetworkConditions", session, offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1
    )
    browser.events.clear()
    browser.send("Page.navigate", session, url=out.as_uri())
    browser.wait_for("Page.loadEventFired")
    result = browser.send(
        "Runtime.evaluate",
        session,
        returnByValue=True,
        expression="""({
        plots: [...document.querySelectorAll('img.plot')].filter(i => i.complete && i.naturalWidth > 300).length,
        scripts: document.scripts.length,
        styled: getComputedStyle(document.querySelector('ins')).backgroundColor,
        rows: document.querySelectorAll('table')[0].rows.length,
        text: document.body.innerText,
    })""",
    )["result"]["value"]
    browser.send("Runtime.evaluate", session, expression="1")  # let late console events arrive before we count them
    problems = [
        e
        for e in browser.events
        if (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
        or e.get("method") in ("Runtime.exceptionThrown", "Page.javascriptDialogOpening")
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert problems == []
    requests = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    assert result["plots"] == 4  # scores, calls and cost, and each run's concurrency over time: all drawn
    assert result["scripts"] == 0
    assert result["styled"] == "rgb(221, 255, 221)"  # the page's own style passed the policy
    assert result["rows"] == 3
    assert '<script>alert("x")</script>' in result["text"]  # shown as text, not run


def test_a_page_that_cannot_be_written_is_an_error(two_runs, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # said before the page is built, as compare --report does
        cli.main(["report", "1", "--runs-dir", str(two_runs), "--out", str(tmp_path / "nowhere" / "r.html")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--out: no folder" in err and "Traceback" not in err


def test_the_concurrency_over_time_and_the_429s_reach_the_record_and_the_page(tmp_path, fake_llm, script):
    """A server that refuses with 429 past 2 requests in flight: the ledger keeps the window's size at each change
    and when each refusal came, the run record keeps both, and the page plots them (the browser test above draws every plot of a page, this one's among them)."""
    fake_llm.configure(limit=2, delay=0.02)
    make_run(tmp_path, fake_llm, script, "busy")
    record = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    ledger = record["ledger"]
    [(deployment, sizes)] = ledger["concurrency"].items()
    refusals = ledger["refusals"][deployment]
    assert sizes[0] == [0.0, 8] and all(size >= 1 for _, size in sizes)
    assert len(refusals) == ledger["counters"]["refused for load (429, 503, 529)"] == fake_llm.rate_limited > 0
    assert refusals == sorted(refusals) and any(after < before for (_, before), (_, after) in zip(sizes, sizes[1:]))
    out = tmp_path / "report.html"
    html = report(tmp_path / "runs", out, "1")
    alt = f'alt="concurrency over time per deployment, {len(refusals)} refusals for load marked"'
    image = re.search(alt + r' src="data:image/svg\+xml;base64,([^"]+)"', html)
    svg = base64.b64decode(image.group(1)).decode()
    assert f"refused for load x{len(refusals)}" in svg and deployment in svg
