"""Launch to first request: `sbpc run` and `sbpc eval` on a shipped pipeline, a fully cached `sbpc eval`, bare Python.

Targets (issue 31): the first request within 0.5 s of launch for `sbpc run` and for `sbpc eval
pipelines/liar_paper.sbp --data liar` (LIAR from $SBPC_DATA_DIR), on the fast path (an OpenAI-compatible
server: the loopback fake server, in its own process); issue 11's: a fully cached `sbpc eval` done within 1 s
(it sends no request at all). Each figure is the median of --rounds fresh processes, measured round-robin in
one run so that the machine's load hits all alike, and is also given as a ratio to `python -c pass` (launch
to exit) measured in the same rounds: on a machine shared with other work the ratios move less than the
seconds. `python -c "import litellm"` (--litellm) is what every command paid before litellm became lazy.
Every launch gets an empty response cache, as a first run has; the load average is printed with the figures.

    SBPC_DATA_DIR=../shared/datasets .venv/bin/python bench/startup.py --rounds 9
"""

from __future__ import annotations

import argparse
import itertools
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

PIPELINE = ROOT / "pipelines" / "liar_paper.sbp"
INPUTS = ("statement", "job_title", "state", "party", "source")
TOY = """pipeline toy "Decide"
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


def to_exit(args: list[str], env: dict) -> float:
    """Seconds from launch to exit of one process, which must succeed."""
    start = time.time()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return time.time() - start


def to_first_request(args: list[str], env: dict, url: str) -> float:
    """Seconds from launch to the first request reaching the server (its clock, time.time()); the process is
    stopped there."""
    stats(url, "/reset")
    start = time.time()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while (arrived := stats(url)["first_request_time"]) is None:
            if proc.poll() is not None:
                raise SystemExit(f"{' '.join(args)} ended before its first request:\n{proc.stderr.read()}")
            time.sleep(0.005)  # polling the server for a condition, not waiting out a time
        return arrived - start
    finally:
        proc.kill()
        proc.communicate()


def commands(folder: Path, url: str) -> dict[str, list[str]]:
    sbpc = [sys.executable, "-m", "sembp_dsl.cli"]
    server = ["--model", "openai/fake", "--api-base", url]
    cached = [*sbpc, "eval", str(folder / "toy.sbp"), "--data", str(folder / "d.jsonl")]
    return {
        "run": [*sbpc, "run", str(PIPELINE), *(f"--input={name}=x" for name in INPUTS), *server],
        "eval": [*sbpc, "eval", str(PIPELINE), "--data", "liar", *server],
        "cached": [*cached, "--train-size", "0", "--val-size", "0", "--test-size", "20"],
    }


def measure(rounds: int, litellm: bool, before: Path | None) -> dict[str, list[float]]:
    url, stop = spawn(0.0, reply="Yes")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "toy.sbp").write_text(TOY.format(url=url))
            (folder / "d.jsonl").write_text(
                "".join(json.dumps({"q": f"c{i}", "answer": "Yes"}) + "\n" for i in range(20))
            )
            # compiled modules kept, as every launch after the first has them (a shell may say otherwise)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env |= {"PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-bench"}
            env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
            run = commands(folder, url)
            cache = {**env, "SBPC_CACHE_DIR": str(folder / "cache")}
            to_exit(run["cached"], cache)  # fill the cache
            trees = {"": ROOT, " before": before} if before else {"": ROOT}
            figures: dict[str, list[float]] = {"pass": [], "run": [], "eval": [], "cached": [], "litellm": []}
            for r in range(rounds):
                figures["pass"].append(to_exit([sys.executable, "-c", "pass"], env))
                for (tree, code), name in itertools.product(trees.items(), ("run", "eval")):
                    # each with an empty cache, as a first run has
                    fresh = {**env, "SBPC_CACHE_DIR": str(folder / f"cache-{name}-{r}{tree}"), "PYTHONPATH": str(code)}
                    figures.setdefault(name + tree, []).append(to_first_request(run[name], fresh, url))
                stats(url, "/reset")
                figures["cached"].append(to_exit(run["cached"], cache))
                if stats(url)["requests"]:
                    raise SystemExit("the cached eval sent a request")
                if litellm:
                    figures["litellm"].append(to_exit([sys.executable, "-c", "import litellm"], env))
    finally:
        stop()
    return {name: values for name, values in figures.items() if values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--litellm", action="store_true", help="also time `python -c 'import litellm'` (seconds each)")
    ap.add_argument(
        "--before", type=Path, help="another checkout (a git worktree of main) whose run and eval to time too"
    )
    args = ap.parse_args()
    if not os.environ.get("SBPC_DATA_DIR"):
        raise SystemExit("set SBPC_DATA_DIR to the folder with liar/ (../shared/datasets)")
    before = os.getloadavg()[0]
    figures = measure(args.rounds, args.litellm, args.before)
    median = {name: statistics.median(values) for name, values in figures.items()}
    rows = [
        ("run", "sbpc run liar_paper.sbp, to the first request", "target < 0.5 s"),
        ("eval", "sbpc eval liar_paper.sbp --data liar, to the first request", "target < 0.5 s"),
        ("run before", "sbpc run, to the first request, --before", ""),
        ("eval before", "sbpc eval, to the first request, --before", ""),
        ("cached", "sbpc eval, every call cached, to exit", "target < 1 s"),
        ("litellm", "python -c 'import litellm', to exit", ""),
        ("pass", "python -c pass, to exit", ""),
    ]
    load = f"load average {before:.1f} before, {os.getloadavg()[0]:.1f} after"
    print(f"launch to first request, median of {args.rounds} fresh processes each, round-robin ({load}):")
    for name, label, target in rows:
        if name in median:
            ratio = median[name] / median["pass"]
            print(f"  {label:60s} {median[name]:6.3f} s  {ratio:5.1f}x python  {target}")


if __name__ == "__main__":
    main()
