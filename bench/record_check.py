"""Checking a large run record against run.schema.json: jsonschema's validator against records/schema.py's checks.

`sbpc runs`, `show`, `report` and `--resume` check every record they read. The record is an evaluation of
--samples samples (each with the inputs, the answer and two nodes' prompts and replies, as `sbpc eval` writes
them), so its size is about that of a real one of as many samples. Both give the same verdict (the bench checks);
each figure is the fastest of --repeat, measured turn about in one run.

    .venv/bin/python bench/record_check.py [--samples 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jsonschema  # noqa: E402

from sembp_dsl.records.record import SCHEMA, VERSION, _checks  # noqa: E402


def evaluation(samples: int) -> dict:
    """An eval record of `samples` samples, in the shape `sbpc eval` writes."""

    def node(n: int, name: str) -> dict:
        prompt = f"# Task\nJudge whether statement {n} is true.\nStatement: the figure rose by {n} percent."
        return {"prompt": prompt, "reply": f"{name} reads statement {n} as plausible.", "output": "Yes"}

    rows = [
        {
            "id": f"liar/test/{n}",
            "inputs": {"statement": f"The figure rose by {n} percent.", "speaker": "a senator"},
            "expected": "Yes",
            "output": "Yes" if n % 3 else "No",
            "score": float(n % 3 != 0),
            "nodes": {"analyst": node(n, "analyst"), "judge": node(n, "judge")},
        }
        for n in range(samples)
    ]
    return {
        "version": VERSION,
        "kind": "eval",
        "settings": {"file": "liar.sbp", "data": "liar", "models": {"forward": "openai/m"}},
        "evaluation": {
            "split": "test",
            "metric": "exact",
            "score": 2 / 3,
            "scored": samples,
            "requested": samples,
            "prompts_sha256": "0" * 64,
            "samples": rows,
        },
        "finished": True,
        "ledger": None,
    }


def fastest(check, record: dict, repeat: int) -> tuple[float, bool]:
    times, holds = [], True
    for _ in range(repeat):
        start = time.perf_counter()
        holds = check(record)
        times.append(time.perf_counter() - start)
    return min(times), holds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    record = evaluation(args.samples)
    whole = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=whole)(SCHEMA)
    checks = _checks()
    theirs, ours = [], []
    for _ in range(args.repeat):  # turn about, so both meet the same load
        theirs.append(fastest(lambda r: next(iter(validator.iter_errors(r)), None) is None, record, 1))
        ours.append(fastest(lambda r: checks(r, ()) is None, record, 1))
    (slow, holds_slow), (fast, holds_fast) = min(theirs), min(ours)
    size = len(json.dumps(record)) / 1e6
    print(f"an eval record of {args.samples} samples ({size:.1f} MB of JSON), fastest of {args.repeat}:")
    print(f"  jsonschema Draft202012Validator   {slow:6.3f} s   holds: {holds_slow}")
    print(f"  records/schema.py checks          {fast:6.3f} s   holds: {holds_fast}")
    print(f"  ratio {fast / slow:.3f}x ({slow / fast:.1f} times faster); same verdict: {holds_slow == holds_fast}")
    if holds_slow != holds_fast or not holds_fast:
        raise SystemExit("the two checks disagree, or the record does not hold")


if __name__ == "__main__":
    main()
