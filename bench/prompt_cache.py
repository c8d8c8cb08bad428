"""How much of an optimize run's prompts a provider's prompt cache could serve: the share of prompt tokens that are
a prefix an earlier request began with, with sbpc's built-in prompts laid out as they were (the request after the
sample) and as they are (the request first), in one run.

Three optimizes (2 iterations, `--no-cache`, 50 samples: bench/paper_calls.py's draw, which needs the authors'
code) against the loopback server, which reports a repeated prefix in `usage.prompt_tokens_details.cached_tokens`
(tests/fake_server.py): `pipelines/liar.sbp` (its own forward templates, sbpc's built-in backward and optimizer
prompts) once with the old layout of those prompts (bench/prompt_cache_before/, given to the file as its own
`backward`, `backward_no_sibling` and `optimizer` templates, so both runs render through the same code) and once
as sbpc ships them, answered by the matrix's fake model (tests/matrix.py); and `pipelines/liar_paper.sbp`, whose
every prompt is its own template (no built-in one is sent, so the layout cannot change it), answered by
bench/paper_calls.py's fake model. Each is run under two rules: OpenAI's (prefixes of 1,024 tokens and more, in
steps of 128), what it would bill at the cached rate, and any prefix from 16 words in steps of 16, how much of
the prompts repeats at all. Its tokens are words. The figures are the run records' ledgers.

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
from matrix import MODEL, Universal  # noqa: E402

BEFORE = ROOT / "bench" / "prompt_cache_before"
OVERRIDDEN = ("backward", "backward_no_sibling", "optimizer")  # the built-ins liar.sbp sends
RULES = {"OpenAI's (1,024 on, in 128s)": (1024, 128), "any prefix from 16 words, in 16s": (16, 16)}
ROLES = ("forward", "backward", "optimizer")


def old_layout(source: str) -> str:
    """The pipeline with the built-in prompts as they were laid out, as templates of its own."""
    kept = "".join(f'\ntemplate {name} = """\n{(BEFORE / f"{name}.j2").read_text()}"""\n' for name in OVERRIDDEN)
    return source + kept


def shares(record: dict) -> dict[str, tuple[int, int]]:
    """(cached, prompt) tokens of each role and of all, from a run record's ledger."""
    roles = record["ledger"]["roles"]
    found = {r: (roles.get(r, {}).get("cached_tokens", 0), roles.get(r, {}).get("prompt_tokens", 0)) for r in ROLES}
    found["all"] = (sum(c for c, _ in found.values()), sum(p for _, p in found.values()))
    return found


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
    liar = (ROOT / "pipelines" / "liar.sbp").read_text()
    runs = {  # name -> (fake model, the pipeline's text; None: liar_paper.sbp and its own fake model)
        "liar.sbp, request after the sample (before)": (Universal, old_layout(liar)),
        "liar.sbp, request first (after)": (Universal, liar),
        "liar_paper.sbp (its own templates)": (None, None),
    }
    print(f"optimize, {args.iters} iterations, 50 training samples, --no-cache; cached of prompt tokens by role:")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "liar50.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        found: dict[str, dict[str, tuple[int, int]]] = {}
        for name, (fake, source) in runs.items():
            model = fake() if fake else paper_calls.FakeModel({r["statement"]: r["answer"] for r in records}, "0")
            print(f"  {name}")
            with FakeServer(reply=model) as server:
                extra = ("--model", MODEL, "--api-base", server.url) if source is not None else ()
                for rule, (least, step) in RULES.items():
                    server.configure(cache_min=least, cache_step=step)
                    server.reset()
                    _, record = paper_calls.run_sbpc(
                        work, data, server.url, args.iters, False, "adaptive", source, extra
                    )
                    found[f"{name} {rule}"] = shares(record)
                    row = "  ".join(f"{r} {c:,} of {p:,} ({c / p:.1%})" for r, (c, p) in shares(record).items() if p)
                    print(f"    {rule}: {row}")

    before, after = (found[f"{name} any prefix from 16 words, in 16s"] for name in list(runs)[:2])
    for part in ("backward", "optimizer", "all"):
        was, now = (c / p for c, p in (before[part], after[part]))
        print(f"  liar.sbp {part}: {was:.1%} of prompt tokens repeat before, {now:.1%} after ({now / was:.1f}x)")


if __name__ == "__main__":
    main()
