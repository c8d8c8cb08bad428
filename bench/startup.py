"""Launch to first request: `sbpc run` on the fast path, bare `import litellm`, a fully cached `sbpc eval`.

Targets (issue 11): under 1 s for `sbpc run` (launch to the first request reaching the server)
and for a fully cached `sbpc eval` (launch to exit: it sends no request at all). Bare
`python -c "import litellm"` (launch to exit) is what every command paid before. Each figure is
the median of --rounds fresh processes, measured round-robin in one run so that the machine's
load hits all three alike; the loopback fake server runs in its own process.

    .venv/bin/python bench/startup.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fake model server is test code

from fake_server import spawn  # noqa: E402

PIPELINE = """pipeline toy "Decide"
input q: text
param p = "Answer Yes or No."
node verdict: choice(Yes, No) {{ prompt = p }}
q -> verdict
output verdict
model {{ name = "openai/fake"  api_base = "{url}"  temperature = 0 }}
"""


def stats(url: str, path: str = "/stats") -> dict:
    request = urllib.request.Request(url[: -len("/v1")] + path, method="POST" if path == "/reset" else "GET")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def launch(args: list[str], env: dict) -> tuple[float, float]:
    """(wall time at launch, wall time at exit) of one process; it must succeed."""
    start = time.time()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return start, time.time()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    url, stop = spawn(0.0, reply="Yes")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "toy.sbp").write_text(PIPELINE.format(url=url))
            (folder / "d.jsonl").write_text(
                "".join(json.dumps({"q": f"c{i}", "answer": "Yes"}) + "\n" for i in range(20))
            )
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "OPENAI_API_KEY": "sk-bench",
                "SBPC_CACHE_DIR": str(folder / "cache"),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            }
            sbpc = [sys.executable, "-m", "sembp_dsl.cli"]
            run = [*sbpc, "run", str(folder / "toy.sbp"), "--input", "q=hello", "--no-cache"]
            cached = [
                *sbpc,
                "eval",
                str(folder / "toy.sbp"),
                "--data",
                str(folder / "d.jsonl"),
                "--train-size",
                "0",
                "--val-size",
                "0",
                "--test-size",
                "20",
            ]
            launch(cached, env)  # fill the cache
            figures: dict[str, list[float]] = {"run": [], "litellm": [], "cached": []}
            for _ in range(args.rounds):
                stats(url, "/reset")
                start, _ = launch(run, env)
                figures["run"].append(stats(url)["first_request_time"] - start)
                start, end = launch([sys.executable, "-c", "import litellm"], env)
                figures["litellm"].append(end - start)
                stats(url, "/reset")
                start, end = launch(cached, env)
                assert stats(url)["requests"] == 0, "the cached eval sent a request"
                figures["cached"].append(end - start)
    finally:
        stop()
    median = {name: statistics.median(values) for name, values in figures.items()}
    load = os.getloadavg()[0]
    print(f"launch to first request, median of {args.rounds} rounds (load average {load:.1f}):")
    print(f"  sbpc run, fast path (to the first request)     {median['run']:6.2f} s   target < 1 s")
    print(f"  python -c 'import litellm' (to exit)           {median['litellm']:6.2f} s")
    print(f"  sbpc eval, every call cached (to exit)         {median['cached']:6.2f} s   target < 1 s")
    print(f"  import litellm / sbpc run: {median['litellm'] / median['run']:.1f}x")


if __name__ == "__main__":
    main()
