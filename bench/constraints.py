"""Decoding constraints on the embedded model, off and on, in one run: the README's main job, and LIAR eval.

    SBPC_DATA_DIR=../shared/datasets python bench/constraints.py [--skip-job] [--skip-eval] [--test-size 100]

1. The main job: `sbpc optimize liar.sbp --data liar --train-size 6 --val-size 6 --iters 2`, on a copy of
   pipelines/liar.sbp, first with `model { constrain = off }` added, then as shipped (`auto`: a grammar for
   the embedded model); same seed, each with a response cache of its own, so every call is made. Printed:
   the ledger's format counts (gradient lines missing, candidates rejected for format, optimizer calls
   skipped because no feedback reached the param, forward parse failures, which in LIAR only the choice
   node can have: a text node reads any reply), and every candidate's fate with the gate's wins and losses.
2. `Pipeline.evaluate` (what `sbpc eval` runs) of the same pipeline on N LIAR test samples, off then on:
   accuracy with its Wilson interval, replies the choice parser could not read, and seconds and completion
   tokens per call of the judge, the one node a constraint changes. One call at a time, one cache for both
   modes: the analysts' replies (text: never constrained) are made once, so both judges read the same.

The main job runs the CLI as a user runs it, its figures from `--json`; wall and CPU seconds are the sbpc
process's (the machine may be shared: CPU seconds do not count the others' load). Each part is printed,
and written to --json, as soon as it is done.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {"off": "\nmodel { constrain = off }\n", "on": ""}
COUNTS = (
    "gradient lines missing",
    "candidates rejected (format)",
    "optimizer calls skipped: no feedback",
    "forward parse failures",
)


def sbpc(args: list[str], folder: Path) -> tuple[dict, float, float]:
    """One sbpc command in `folder` with a cache of its own: its --json output, wall and CPU seconds."""
    env = {**os.environ, "SBPC_CACHE_DIR": str(folder / "cache"), "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", *args, "--json"], cwd=folder, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        sys.exit(f"sbpc {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout), wall, cpu


def copy(folder: Path, mode: str) -> Path:
    folder.mkdir(parents=True)
    path = folder / "liar.sbp"
    path.write_text((ROOT / "pipelines/liar.sbp").read_text() + MODES[mode])
    return path


def main_job(work: Path) -> dict:
    results = {}
    for mode in MODES:
        folder = work / f"job-{mode}"
        copy(folder, mode)
        args = ["optimize", "liar.sbp", "--data", "liar", "--train-size", "6", "--val-size", "6", "--iters", "2"]
        out, wall, cpu = sbpc(args, folder)
        counters = out["ledger"]["counters"]
        results[mode] = {
            "wall": wall,
            "cpu": cpu,
            "calls": out["ledger"]["calls"],
            **{name: counters.get(name, 0) for name in COUNTS},
            "constrained": counters.get("constrained replies (grammar)", 0),
            "changed": bool(out["diff"]),
            "iterations": [
                {
                    "index": it["index"],
                    "train": it["train_score"],
                    "gate": it["gate"] and {k: it["gate"][k] for k in ("wins", "losses", "p")},
                    "fates": {c["param"]: c["fate"] for c in it["candidates"]},
                    "gradients": sum(len(g["nodes"]) for g in it["gradients"]),
                }
                for it in out["iterations"]
            ],
        }
    return results


def liar_eval(work: Path, size: int) -> dict:
    """In process, one call at a time (the embedded model serves one anyway), so each call's latency is its
    own; one cache for both modes, so the five analysts (text nodes: never constrained) answer once and the
    judge of both modes reads the very same analyses."""
    import sembp_dsl as sbp

    cache = work / "eval-cache.sqlite"
    results = {}
    for mode in MODES:
        pipeline = sbp.load(copy(work / f"eval-{mode}", mode), concurrency=1, cache=cache)
        start, cpu = time.perf_counter(), time.process_time()
        evaluation = pipeline.evaluate("liar", test_size=size)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        verdicts = [r.trace.final for r in evaluation.results if not r.trace.final.lost]
        made = [t for t in verdicts if not t.cached]
        low, high = evaluation.interval
        results[mode] = {
            "accuracy": evaluation.accuracy,
            "interval": [low, high],
            "correct": evaluation.correct,
            "scored": evaluation.scored,
            "unparseable": sum(1 for t in verdicts if t.output is None),
            "verdict calls": len(made),
            "seconds per verdict call": statistics.mean(t.latency for t in made),
            "completion tokens per verdict call": statistics.mean(t.completion_tokens for t in made),
            "wall": wall,
            "cpu": cpu,
            "counters": dict(pipeline.ledger.counters),
        }
        pipeline.close()
    return results


def report(job: dict | None, evals: dict | None) -> str:
    lines = []
    if job:
        lines.append("main job (optimize liar.sbp, train 6, val 6, 2 iterations), constraints off -> on:")
        for name in (*COUNTS, "calls", "wall", "cpu"):
            off, on = job["off"][name], job["on"][name]
            lines.append(f"  {name:<36} {off:>4.0f} -> {on:.0f}" + (" s" if name in ("wall", "cpu") else ""))
        for mode in MODES:
            lines.append(f"  constrain {mode}: {'prompts changed' if job[mode]['changed'] else 'no prompt changed'}")
            for it in job[mode]["iterations"]:
                gate = it["gate"]
                tally = (
                    f"{len(gate['wins'])} wins, {len(gate['losses'])} losses, p = {gate['p']:.3f}"
                    if gate
                    else "no gate"
                )
                train = "-" if it["train"] is None else f"{it['train']:.3f}"
                lines.append(f"    iteration {it['index']}: train {train}, gradients {it['gradients']}, {tally}")
                for param, fate in it["fates"].items():
                    lines.append(f"      {param}: {fate}")
    if evals:
        lines.append(f"LIAR eval, {evals['on']['scored']} test samples, constraints off -> on:")
        for mode in MODES:
            e = evals[mode]
            low, high = e["interval"]
            lines.append(
                f"  {mode:<3} accuracy {e['accuracy']:.3f} ({e['correct']}/{e['scored']}, 95% [{low:.3f}, {high:.3f}]), "
                f"unparseable {e['unparseable']}; judge: {e['seconds per verdict call']:.2f} s and "
                f"{e['completion tokens per verdict call']:.1f} completion tokens per call ({e['verdict calls']} calls); "
                f"{e['wall']:.0f} s wall, {e['cpu']:.0f} s CPU in all"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-job", action="store_true")
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--test-size", type=int, default=100)
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sbpc-constraints-"))
    found: dict = {}
    try:
        if not args.skip_job:
            found["job"] = main_job(work)
            print(report(found["job"], None), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(found, indent=2))
        if not args.skip_eval:
            found["eval"] = liar_eval(work, args.test_size)
            print(report(None, found["eval"]), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(found, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
