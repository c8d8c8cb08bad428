"""What `sbpc eval --batch` costs beside the same eval sent call by call: the ledger's dollars of both, as a ratio.

`sbpc eval pipelines/liar.sbp --data liar --test-size N --model openai/gpt-4o-mini --no-cache --json`, once at once and
once with `--batch`, against the loopback server (tests/fake_batch.py: the chat server, and OpenAI's files and
batches endpoints answering each line as the chat server would; its tokens are words), priced by litellm's table:
gpt-4o-mini's prices, and its batch prices (`input_cost_per_token_batches`, `output_cost_per_token_batches`).

    SBPC_DATA_DIR=... .venv/bin/python bench/batch.py [--samples 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]  # the fake model server is test code

from fake_batch import FakeBatchServer  # noqa: E402

MODEL = "openai/gpt-4o-mini"


def evaluated(url: str, samples: int, batch: bool) -> tuple[dict, float]:
    """The eval's --json and its wall time."""
    args = ["eval", str(ROOT / "pipelines" / "liar.sbp"), "--data", "liar", "--test-size", str(samples)]
    args += ["--model", MODEL, "--api-base", url, "--no-cache", "--json", *(["--batch"] if batch else [])]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench", "SBPC_BATCH_POLL": "0.2"}
    start = time.perf_counter()
    ran = subprocess.run([sys.executable, "-m", "sembp_dsl.cli", *args], capture_output=True, text=True, env=env)
    if ran.returncode != 0:
        sys.exit(f"sbpc eval{' --batch' if batch else ''} failed:\n{ran.stderr}")
    return json.loads(ran.stdout), time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200, help="LIAR test samples (default 200)")
    args = ap.parse_args()
    with FakeBatchServer(reply=lambda messages: "No") as server:
        at_once, at_once_s = evaluated(server.url, args.samples, batch=False)
        batched, batched_s = evaluated(server.url, args.samples, batch=True)
        batches = server.batches_created
    print(f"sbpc eval pipelines/liar.sbp, {at_once['requested']} LIAR test samples, {MODEL} on the loopback server:")
    for name, result, seconds in (("at once", at_once, at_once_s), ("--batch", batched, batched_s)):
        ledger = result["ledger"]
        print(
            f"  {name:8} accuracy {result['accuracy']:.3f}, {ledger['calls']} calls, {ledger['tokens']} tokens, "
            f"${ledger['cost']:.6f}, {seconds:.1f} s"
        )
    same = at_once["accuracy"] == batched["accuracy"] and at_once["ledger"]["tokens"] == batched["ledger"]["tokens"]
    print(f"  {batches} batches (one a round: the five analysts, then the judge); same answers and tokens: {same}")
    print(f"  cost with --batch / without: {batched['ledger']['cost'] / at_once['ledger']['cost']:.3f}")


if __name__ == "__main__":
    main()
