"""Adaptive concurrency (models/adaptive.py) against loopback fake servers that take calls in different ways.

Targets (issue 45), first: a default `sbpc optimize pipelines/liar_paper.sbp` (2 iterations, `--no-cache`, the
fake model and 50 samples of bench/paper_calls.py, which needs the authors' code for their sample draw) against a
server that refuses past 8 in flight with `Retry-After` 1, 0 and 5 s, and past 40 with 1 s: at most 1.15x the
time of the same run at `--concurrency` 8 (40) on the same server, at most 3% of requests refused.

Targets (issue 31): against a server that refuses with 429 past 8 requests in flight, at most 5% of requests
refused and the whole run at most 1.3x the same run at `--concurrency 8`. The loopback server refuses at once;
the same server again with each refusal taking a tenth and a quarter of a call shows how the refusals grow
when a 429 takes a network round trip (the window lets calls in until it hears one). Beside it, in the same run: a server
that refuses past 40 (how many calls finding a higher limit costs), an unlimited one (how fast the window opens:
the run against the ideal, every call at once), and one that serves 4 at a time and queues the rest, as a vLLM
server does (how wide the window gets there). Each server answers after `--delay` seconds; each figure is the
median of `--rounds`, the fixed and the adaptive runs alternating.

    python bench/adaptive.py [--rounds 3] [--delay 0.2] [--iters 2] [--optimize 8:1 8:0 8:5 40:1]
        [--only-optimize] [--paper-code PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]  # the fake model server is test code

from fake_server import FakeServer  # noqa: E402

from sembp_dsl.language.graph.graph import ModelSpec  # noqa: E402
from sembp_dsl.models.llm import LLM  # noqa: E402


def one(server: FakeServer, calls: int, concurrency: int | None, words: int = 0) -> tuple[float, int, int, int]:
    """`calls` at once (each prompt `words` words longer) through sbpc's LLM layer: (wall seconds, requests, refused,
    widest window)."""
    requests, refused = server.requests, server.rate_limited
    spec = ModelSpec("forward", "openai/fake", MappingProxyType({"api_base": server.url}))
    llm = LLM({"forward": spec}, concurrency=concurrency, backoff=0.05)

    async def go() -> None:
        await asyncio.gather(*(llm.complete("forward", f"prompt{n}" + " word" * words) for n in range(calls)))

    start = time.perf_counter()
    llm.run(go())
    wall = time.perf_counter() - start
    widest = max((size for history in llm.ledger.concurrency.values() for _, size in history), default=0)
    return wall, server.requests - requests, server.rate_limited - refused, widest


def median_of(rounds: int, run) -> tuple[float, ...]:
    results = [run() for _ in range(rounds)]
    return tuple(statistics.median(column) for column in zip(*results))


def optimize_runs(delay: float, iters: int, cases: list[tuple[int, float]], paper: Path) -> None:
    """A default `sbpc optimize pipelines/liar_paper.sbp --no-cache` (bench/paper_calls.py's fake model and 50
    samples) against servers refusing past `limit` in flight with `Retry-After: wait`, each beside the same run at
    `--concurrency limit` on the same server, alternating: (wall ratio, share of requests refused)."""
    import paper_calls

    tsv = Path(os.environ.get("SBPC_DATA_DIR", ROOT.parent / "shared" / "datasets")) / "liar" / "train.tsv"
    why = paper_calls.missing(paper, tsv)
    if why:
        print(f"optimize runs skipped: {why}")
        return
    records = [paper_calls.record_fields(s) for s in paper_calls.paper_samples(paper, tsv)]
    model = paper_calls.FakeModel({r["statement"]: r["answer"] for r in records}, "0")
    print(f"optimize of pipelines/liar_paper.sbp, {iters} iterations, --no-cache, {delay * 1000:.0f} ms a call:")
    with tempfile.TemporaryDirectory() as tmp, FakeServer(delay=delay, reply=model) as server:
        work = Path(tmp)
        data = work / "liar50.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        for limit, wait in cases:
            server.configure(limit=limit, retry_after=wait)
            fixed, _ = paper_calls.run_sbpc(work, data, server.url, iters, False, str(limit))
            before, refused = server.requests, server.rate_limited
            wall, _ = paper_calls.run_sbpc(work, data, server.url, iters, False, "adaptive")
            sent, refused = server.requests - before, server.rate_limited - refused
            ratio, share = wall / fixed, refused / sent
            print(
                f"  past {limit} in flight refused, Retry-After {wait:g}: --concurrency {limit} {fixed:.1f} s, "
                f"adaptive {wall:.1f} s ({ratio:.2f}x, target <= 1.15x: {'met' if ratio <= 1.15 else 'NOT met'}), "
                f"{refused} of {sent} refused ({share:.1%}, target <= 3%: {'met' if share <= 0.03 else 'NOT met'})"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.2, help="seconds each call takes (default 0.2)")
    ap.add_argument("--iters", type=int, default=2, help="iterations of each optimize run (default 2)")
    ap.add_argument(
        "--optimize",
        nargs="*",
        default=["8:1", "8:0", "8:5", "40:1"],
        metavar="LIMIT:RETRY_AFTER",
        help="optimize runs against a server refusing past LIMIT in flight with Retry-After (default 8:1 8:0 8:5 "
        "40:1; none: skip them)",
    )
    ap.add_argument("--only-optimize", action="store_true", help="only the optimize runs")
    ap.add_argument("--paper-code", type=Path, default=ROOT.parent / "shared" / "paper" / "code")
    args = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "fake-key")
    delay, rounds = args.delay, args.rounds
    print(f"{delay * 1000:.0f} ms per call, median of {rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    cases = [(int(case.split(":")[0]), float(case.split(":")[1])) for case in args.optimize]
    if cases:
        optimize_runs(delay, args.iters, cases, args.paper_code)
    if args.only_optimize:
        return

    with FakeServer(reply="ok", delay=delay, limit=8) as server:
        pairs = [(one(server, 200, 8), one(server, 200, None)) for _ in range(rounds)]
    fixed = statistics.median(p[0][0] for p in pairs)
    wall, requests, refused, widest = (statistics.median(p[1][k] for p in pairs) for k in range(4))
    share, ratio = refused / requests, wall / fixed
    print(f"refuses past 8 in flight, 200 calls: --concurrency 8 {fixed:.2f} s, adaptive {wall:.2f} s")
    print(f"  whole run {ratio:.2f}x the fixed 8's (target <= 1.3x: {'met' if ratio <= 1.3 else 'NOT met'})")
    print(f"  {refused:.0f} of {requests:.0f} requests refused: {share:.1%} (target <= 5%: ", end="")
    print(f"{'met' if share <= 0.05 else 'NOT met'}); widest window {widest:.0f}")

    for share in (10, 4):  # a provider's 429 takes a network round trip, not nothing: a tenth, a quarter of a call
        with FakeServer(reply="ok", delay=delay, limit=8) as server:
            server.configure(refusal_delay=delay / share)
            wall, requests, refused, widest = median_of(rounds, lambda: one(server, 200, None))
        print(f"  each 429 after {delay * 1000 / share:.0f} ms: {wall:.2f} s ({wall / fixed:.2f}x), ", end="")
        print(
            f"{refused:.0f} of {requests:.0f} requests refused ({refused / requests:.1%}), widest window {widest:.0f}"
        )

    with FakeServer(reply="ok", delay=delay) as server:  # 300 calls of 101 words, 6,000 words a second
        server.configure(tpm=6000, tpm_window=1.0)
        wall, requests, refused, _ = median_of(rounds, lambda: one(server, 300, None, words=100))
    print(
        f"a token limit its headers tell (6,000 words a 1 s window), 300 calls of 101 words: {wall:.2f} s "
        f"(at least {300 * 101 / 6000 - 1:.1f} s), {refused:.0f} of {requests:.0f} refused (target 0)"
    )

    with FakeServer(reply="ok", delay=delay, limit=40) as server:
        wall, requests, refused, widest = median_of(rounds, lambda: one(server, 400, None))
    print(f"refuses past 40 in flight, 400 calls: {wall:.2f} s, {refused:.0f} of {requests:.0f} refused")

    with FakeServer(reply="ok", delay=delay) as server:
        wall, _, _, widest = median_of(rounds, lambda: one(server, 300, None))
        wide, _, _, _ = median_of(rounds, lambda: one(server, 300, 300))
    print(
        f"unlimited, 300 calls: adaptive {wall:.2f} s, every call at once {wide:.2f} s ({wall / wide:.2f}x), ", end=""
    )
    print(f"widest window {widest:.0f}")

    with FakeServer(reply="ok", delay=delay / 4, slots=4) as server:
        wall, _, _, widest = median_of(rounds, lambda: one(server, 300, None))
        fixed, _, _, _ = median_of(rounds, lambda: one(server, 300, 4))
    print(
        f"serves 4 at a time and queues the rest ({delay * 250:.0f} ms a call), 300 calls: adaptive {wall:.2f} s, ",
        end="",
    )
    print(f"--concurrency 4 {fixed:.2f} s ({wall / fixed:.2f}x), widest window {widest:.0f}")


if __name__ == "__main__":
    main()
