"""How long the test suite takes, measured in one run: as it was, as the README runs it, and the edit loop.

1. before: the suite of commit cfaf5ef (the last before the package move), serially as it ran then
   (`pytest -q -p no:xdist`), in a git worktree of that commit with PYTHONPATH set to it;
2. now: the README's test command's pytest part (`pytest -q -n auto`: every test, the slow ones too;
   with --durations=8 added, to show what dominates), and, timed apart, the checks it runs first
   (ruff check, ruff format --check, mypy);
3. fast: the edit loop, `pytest -q -m "not slow" -n auto`.

Targets (issue 16): now at most 0.5x before; fast under 120 s. The machine may be shared: the load
average before and after each step is printed with it.

    .venv/bin/python bench/suite_time.py [--before cfaf5ef] [--skip-before]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "cfaf5ef"


def readme_pytest() -> list[str]:
    """The pytest part of the README's test command, read by `.ci/run --print` as CI reads it, run with this
    interpreter."""
    printed = subprocess.run([str(ROOT / ".ci" / "run"), "--print"], capture_output=True, text=True, check=True)
    tests = printed.stdout.splitlines()[1]  # the main job, then the tests
    part = next(p for p in tests.split("&&") if "pytest" in p)
    words = [w for w in shlex.split(part) if not re.match(r"[A-Z_]+=", w)]  # the environment is set below
    return [sys.executable, *words[1:]]


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def timed(name: str, command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Seconds and pytest's summary line (or the exit status) of one command; the slowest tests, if shown."""
    print(f"{name}: {shlex.join(command)}  (in {cwd}; {load()})", flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = next((line.strip("= ") for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), "")
    outcome = summary or f"exit {done.returncode}" + (f": {done.stderr.strip()[-300:]}" if done.returncode else "")
    print(f"  {seconds:7.1f} s  {outcome}  ({load()})", flush=True)
    for line in lines:
        if re.match(r"\d+\.\d+s (call|setup|teardown) |FAILED ", line):
            print(f"    {line}", flush=True)
    return seconds, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help=f"the commit whose suite is 'before' (default {BEFORE})")
    parser.add_argument("--skip-before", action="store_true", help="time only the suite as it is now")
    args = parser.parse_args()

    data = os.environ.get("SBPC_DATA_DIR") or str(ROOT.parent / "shared" / "datasets")
    env = {**os.environ, "SBPC_DATA_DIR": os.path.abspath(data)}
    print(f"{os.cpu_count()} cores; data {env['SBPC_DATA_DIR']}; {sys.executable}", flush=True)

    before = None
    if not args.skip_before:
        tree = Path(tempfile.mkdtemp(prefix="sbpc-suite-before-"))
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=ROOT, check=True)
        try:
            old = {**env, "PYTHONPATH": str(tree)}
            before, _ = timed("before", [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist"], tree, old)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)
            shutil.rmtree(tree, ignore_errors=True)

    here = {**env, "PYTHONPATH": str(ROOT)}
    tools = Path(sys.executable).parent
    checks = 0.0
    for check in (["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy", "sembp_dsl"]):
        seconds, _ = timed("check", [str(tools / check[0]), *check[1:]], ROOT, here)
        checks += seconds
    now, _ = timed("now", [*readme_pytest(), "--durations=8"], ROOT, here)
    fast, _ = timed("fast", [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-n", "auto"], ROOT, here)

    print()
    if before is not None:
        print(f"before ({args.before}, serial): {before:7.1f} s")
    print(
        f"now (README, -n auto):      {now:7.1f} s"
        + (f"  = {now / before:.2f}x before (target <= 0.5x)" if before else "")
    )
    print(f"  and its checks first:     {checks:7.1f} s  (ruff check, ruff format --check, mypy)")
    print(f"fast (-m 'not slow'):       {fast:7.1f} s  (target < 120 s)")


if __name__ == "__main__":
    main()
