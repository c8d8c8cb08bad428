"""The Python API against the CLI and the HTTP service, on the same inputs, in one run.

Targets (issue 9), against a loopback server that answers after 200 ms:

* `Pipeline.batch` of 1,000 inputs at concurrency 64 takes at most 1.10x the time of
  `sbpc eval` on the same inputs at --concurrency 64 (both in this process, after the same
  warm-up, caches off, alternated so drift hits both alike; best of each is compared);
* `sbpc serve` answers 64 concurrent clients (1,000 requests in all) with no error.

    python bench/api_speed.py [--rows 1000] [--concurrency 64] [--delay 0.2] [--repeats 2]
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-real-key")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import aiohttp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fake model server is test code
from fake_server import spawn  # noqa: E402

import sembp_dsl as sbp  # noqa: E402
from sembp_dsl import cli  # noqa: E402

TRIAGE = """pipeline triage "Decide whether a support ticket is urgent"
input ticket: text
param decide = "Is the ticket urgent? Answer Yes or No."
node urgent: choice(Yes, No) { prompt = decide }
ticket -> urgent
output urgent
model { name = "openai/gpt-4o-mini"  api_base = "URL"  temperature = 0 }
"""


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def eval_once(path: Path, data: Path, concurrency: int) -> None:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(
            ["eval", str(path), "--data", str(data), "--concurrency", str(concurrency), "--no-cache", "--json"]
        )
    assert code == 0 and json.loads(out.getvalue())["lost"] == 0, out.getvalue()[-500:]


def batch_once(path: Path, rows: list[dict], concurrency: int) -> None:
    with sbp.load(path, concurrency=concurrency, cache=False) as triage:
        predictions = triage.batch(rows, concurrency=concurrency)
    assert len(predictions) == len(rows) and not any(p.failed for p in predictions)


def serve_once(path: Path, rows: list[dict], clients: int) -> tuple[float, int, int]:
    """(seconds, answered, errors): `clients` concurrent clients share the rows."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sembp_dsl.cli",
            "serve",
            str(path),
            "--port",
            "0",
            "--no-cache",
            "--concurrency",
            str(clients),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = re.search(r"http://\S+", proc.stdout.readline()).group(0)

        async def main() -> tuple[int, int]:
            answered = errors = 0
            queue = list(rows)
            connector = aiohttp.TCPConnector(limit=clients)
            async with aiohttp.ClientSession(connector=connector) as session:

                async def client() -> None:
                    nonlocal answered, errors
                    while queue:
                        row = queue.pop()
                        async with session.post(url + "/", json=row) as response:
                            body = await response.json()
                            ok = response.status == 200 and body.get("output") in ("Yes", "No")
                            answered, errors = answered + ok, errors + (not ok)

                await asyncio.gather(*(client() for _ in range(clients)))
            return answered, errors

        start = time.perf_counter()
        answered, errors = asyncio.run(main())
        return time.perf_counter() - start, answered, errors
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    url, stop = spawn(args.delay, reply="Yes")
    try:
        folder = Path(tempfile.mkdtemp())
        path = folder / "triage.sbp"
        path.write_text(TRIAGE.replace("URL", url))
        rows = [
            {"ticket": f"ticket {i}: the app {'crashes' if i % 2 else 'is slow'} on login"} for i in range(args.rows)
        ]
        data = folder / "tickets.jsonl"
        data.write_text("".join(json.dumps({**row, "answer": "Yes"}) + "\n" for row in rows))

        batch_once(path, rows[:64], args.concurrency)  # warm-up: imports, connections, code paths
        eval_once(path, data, args.concurrency)
        evals, batches = [], []
        for _ in range(args.repeats):
            evals.append(timed(lambda: eval_once(path, data, args.concurrency)))
            batches.append(timed(lambda: batch_once(path, rows, args.concurrency)))
        floor = args.rows / args.concurrency * args.delay
        print(
            f"{args.rows} inputs, concurrency {args.concurrency}, server delay {args.delay * 1000:.0f} ms "
            f"(ideal {floor:.2f} s)"
        )
        print(f"  sbpc eval        best {min(evals):6.2f} s   runs {', '.join(f'{t:.2f}' for t in evals)}")
        print(f"  Pipeline.batch   best {min(batches):6.2f} s   runs {', '.join(f'{t:.2f}' for t in batches)}")
        ratio = min(batches) / min(evals)
        print(f"  batch / eval     {ratio:.3f}x   (target <= 1.10x: {'met' if ratio <= 1.10 else 'NOT met'})")

        seconds, answered, errors = serve_once(path, rows, args.concurrency)
        print(
            f"  sbpc serve, {args.concurrency} concurrent clients: {answered} answered, {errors} errors in {seconds:.2f} s "
            f"({answered / seconds:.0f} requests/s; {seconds / min(batches):.2f}x the batch time)"
            f"   (target: no error: {'met' if errors == 0 and answered == args.rows else 'NOT met'})"
        )
    finally:
        stop()


if __name__ == "__main__":
    main()
