"""Cost of hostile sizes: one edge statement of n x n names, one huge string literal, a chain of n nodes.

Each case runs `check`, `compile` and `fmt` in a fresh process (so peak memory is its own) and prints
wall time (the fastest of three) and peak memory above an import-only baseline, the ratio to the case half its size, and
(compile and fmt) the ratio to `check` of the same file in the same run. Linear cost means a ratio
near 2 when the input doubles.

    PYTHONPATH=. python bench/hostile_sizes.py
    PYTHONPATH=. python bench/hostile_sizes.py --fmt   # fmt against check on a 20,000-node chain, turn about
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPEATS = 3

CHILD = """
import json, resource, sys, time
from sembp_dsl.language.check.checker import check
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.syntax.source import load
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
from sembp_dsl.language.diagnostics import PipelineError
try:
    if sys.argv[2] == "fmt":
        from sembp_dsl.language.tooling.fmt import format_text
        format_text(open(sys.argv[1], encoding="utf-8").read(), sys.argv[1])
    else:
        check(load(sys.argv[1])) if sys.argv[2] == "check" else compile_file(sys.argv[1])
except PipelineError as exc:
    sys.exit("limit error: " + exc.diagnostics[0].message)
print(json.dumps({"s": time.perf_counter() - start,
                  "mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}))
"""


def edge_statement(n: int) -> str:
    names = [f"input_number_{i:05d}" for i in range(n)], [f"node_number_{i:05d}" for i in range(n)]
    return (
        "pipeline big\n"
        + "".join(f"input {s}: text\n" for s in names[0])
        + "".join(f"node {t}: text {{}}\n" for t in names[1])
        + f"{', '.join(names[0])} -> {', '.join(names[1])}\noutput {names[1][0]}\n"
    )


def literal(megabytes: int) -> str:
    return (
        'pipeline big\ninput q: text\nparam p = "'
        + "x" * (megabytes * 2**20)
        + '"\nnode a: text { prompt = p }\nq -> a\noutput a\n'
    )


def chain(n: int) -> str:
    """n nodes, each reading the one before: the shape of a long generated pipeline (838 KB at 20,000)."""
    names = [f"step_{i:05d}" for i in range(n)]
    return (
        "pipeline chain\ninput q: text\n"
        + "".join(f"node {name}: text {{}}\n" for name in names)
        + "".join(f"{before} -> {after}\n" for before, after in zip(["q", *names], names))
        + f"output {names[-1]}\n"
    )


def messy_chain(n: int) -> str:
    """The chain as a careless generator writes it (`a->b`, blanks after names): fmt rewrites every line."""
    return chain(n).replace(" -> ", "->").replace(": text {}", " :text{ }")


def measure(text: str, phase: str, folder: Path, repeats: int = REPEATS) -> dict:
    """The fastest of REPEATS fresh processes: the run least slowed by whatever else the machine is doing."""
    path = folder / "case.sbp"
    path.write_text(text)
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), phase], capture_output=True, text=True)
        if out.returncode:  # past a limit: show the message, which is the point of the case
            return {"error": out.stderr.strip().splitlines()[-1][:90]}
        runs.append(json.loads(out.stdout))
    return min(runs, key=lambda run: run["s"]) | {"kb": len(text.encode()) / 1024}


def fmt_versus_check(text: str, folder: Path, rounds: int = 5) -> tuple[float, float]:
    """The fastest fmt and the fastest check of one file, run turn about, so that both meet the same load."""
    best = {"check": float("inf"), "fmt": float("inf")}
    for _ in range(rounds):
        for phase in best:
            best[phase] = min(best[phase], measure(text, phase, folder, repeats=1)["s"])
    return best["fmt"], best["check"]


def main() -> None:
    if sys.argv[1:] == ["--fmt"]:  # the ratio alone, taken turn about: the figure docs/performance.md quotes
        with tempfile.TemporaryDirectory() as folder:
            for label, make in (("chain, formatted", chain), ("chain, unformatted", messy_chain)):
                text = make(20000)
                fmt, check = fmt_versus_check(text, Path(folder))
                kb = len(text.encode()) / 1024
                print(f"{label:<20} {kb:5.0f} KB  fmt {fmt:5.2f} s  check {check:5.2f} s  fmt/check {fmt / check:4.2f}")
        return
    cases = [
        ("n x n edge statement", edge_statement, [375, 750, 1500]),
        ("string literal (MB)", literal, [5, 10, 20]),
        ("chain of n nodes", chain, [5000, 10000, 20000]),
        ("chain, unformatted", messy_chain, [5000, 10000, 20000]),
    ]
    with tempfile.TemporaryDirectory() as folder:
        print(
            f"{'case':<24}{'size':>7}{'input KB':>10}{'phase':>9}{'s':>8}{'MB':>8}{'x time':>8}{'x MB':>7}{'/check':>8}"
        )
        for label, make, sizes in cases:
            checked: dict[int, float] = {}  # size -> check's seconds, which fmt is compared with in this run
            for phase in ("check", "compile", "fmt"):
                previous = None
                for size in sizes:
                    got = measure(make(size), phase, Path(folder))
                    if "error" in got:
                        print(f"{label:<24}{size:>7}{'':>10}{phase:>9}  {got['error']}")
                        continue
                    ratio = (
                        f"{got['s'] / previous['s']:8.2f}{got['mb'] / max(previous['mb'], 1):7.2f}"
                        if previous
                        else f"{'':8}{'':7}"
                    )
                    if phase == "check":
                        checked[size] = got["s"]
                    versus = f"{got['s'] / checked[size]:8.2f}" if phase != "check" and size in checked else ""
                    print(
                        f"{label:<24}{size:>7}{got['kb']:>10.0f}{phase:>9}{got['s']:8.2f}{got['mb']:8.0f}{ratio}{versus}"
                    )
                    previous = got


if __name__ == "__main__":
    main()
