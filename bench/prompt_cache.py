"""How much of an optimize run's prompts a provider's prompt cache could serve: the share of prompt tokens that are
a prefix an earlier request began with.

A default `sbpc optimize pipelines/liar_paper.sbp` (2 iterations, `--no-cache`; bench/paper_calls.py's fake model
and 50 samples, which needs the authors' code for their sample draw) against the loopback server, which reports a
repeated prefix in `usage.prompt_tokens_details.cached_tokens` (tests/fake_server.py): with OpenAI's rule (prefixes
of 1,024 tokens and more, in steps of 128) what it would bill at the cached rate, and with prefixes of any length
from 16 words, in steps of 16, how much of the prompts repeats at all. Its tokens are words.

    .venv/bin/python bench/prompt_cache.py [--iters 2] [--paper-code PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]  # the fake model server is test code

import paper_calls  # noqa: E402
from fake_server import FakeServer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--paper-code", type=Path, default=paper_calls.PAPER)
    args = ap.parse_args()
    tsv = Path(os.environ.get("SBPC_DATA_DIR", ROOT.parent / "shared" / "datasets")) / "liar" / "train.tsv"
    why = paper_calls.missing(args.paper_code, tsv)
    if why:
        print(f"skipped: {why}")
        return
    records = [paper_calls.record_fields(s) for s in paper_calls.paper_samples(args.paper_code, tsv)]
    model = paper_calls.FakeModel({r["statement"]: r["answer"] for r in records}, "0")
    print(f"optimize of pipelines/liar_paper.sbp, {args.iters} iterations, --no-cache:")
    with tempfile.TemporaryDirectory() as tmp, FakeServer(reply=model) as server:
        work = Path(tmp)
        data = work / "liar50.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        for rule, (least, step) in (("OpenAI's (1,024 on, in 128s)", (1024, 128)), ("any (16 on, in 16s)", (16, 16))):
            server.configure(cache_min=least, cache_step=step)
            server.reset()
            _, record = paper_calls.run_sbpc(work, data, server.url, args.iters, False, "adaptive")
            roles = record["ledger"]["roles"].values()
            prompt = sum(r["prompt_tokens"] for r in roles)
            cached = sum(r.get("cached_tokens", 0) for r in roles)
            print(f"  repeated prefixes by {rule} rule: {cached} of {prompt} prompt tokens ({cached / prompt:.1%})")
            for role, usage in record["ledger"]["roles"].items():
                if usage["prompt_tokens"]:
                    share = usage.get("cached_tokens", 0) / usage["prompt_tokens"]
                    print(f"    {role}: {usage.get('cached_tokens', 0)} of {usage['prompt_tokens']} ({share:.1%})")


if __name__ == "__main__":
    main()
