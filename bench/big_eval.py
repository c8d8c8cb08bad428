"""Memory of a long evaluation, and the time to open its record: `sbpc eval` of a one-node pipeline over CSVs of
growing length on the loopback fake server, then `sbpc show` and `sbpc report` of the run it left.

Each command runs in a fresh process (its peak memory, max RSS, is its own); the server runs in another, so its CPU
and memory are not the client's. Printed per size: the eval's wall time and max RSS, the size of the record, and
the wall time of `show` and `report` (each a fresh process, imports included); then the ratio of the largest
eval's max RSS to the smallest's (1.0: memory does not grow with the rows).

    PYTHONPATH=. python bench/big_eval.py                  # 2,000, 20,000 and 100,000 rows
    PYTHONPATH=. python bench/big_eval.py 2000 20000       # smaller, quicker
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from big_data import PIPELINE, write_csv  # noqa: E402 (the same one-node pipeline over the same CSV)

CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from sembp_dsl.cli import main
code = main(sys.argv[1:])
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"s": time.perf_counter() - start, "code": code, "mb": usage.ru_maxrss / 1024,
                  "cpu": usage.ru_utime + usage.ru_stime}))
"""


def measure(folder: Path, *argv: str) -> dict:
    """One sbpc command in a fresh process: its wall time, max RSS (MB), CPU seconds and exit code."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "OPENAI_API_KEY": "fake"},
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"sbpc {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_sizes(folder: Path, url: str, sizes: list[int]) -> list[dict]:
    """Per size: the eval, then show and report of its record."""
    (folder / "p.sbp").write_text(PIPELINE.replace("URL", url))
    out = []
    for rows in sizes:
        write_csv(folder / "big.csv", rows)
        runs = folder / f"runs-{rows}"
        evaluated = measure(folder, "eval", "p.sbp", "--runs-dir", str(runs), "--no-cache")  # its data block's file
        [run] = runs.iterdir()
        record_mb = sum(f.stat().st_size for f in run.iterdir()) / 2**20
        shown = measure(folder, "show", str(run))
        reported = measure(folder, "report", str(run), "--out", str(folder / f"report-{rows}.html"))
        page_mb = (folder / f"report-{rows}.html").stat().st_size / 2**20
        out.append(
            {
                "rows": rows,
                "eval": evaluated,
                "record_mb": record_mb,
                "show": shown,
                "report": reported,
                "page": page_mb,
            }
        )
    return out


def seconds(measured: dict) -> str:
    return f"{measured['s']:.2f} ({measured['cpu']:.2f})"


def main() -> None:
    from fake_server import spawn

    sizes = [int(a) for a in sys.argv[1:]] or [2_000, 20_000, 100_000]
    url, stop = spawn(0.0, reply="yes")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            found = run_sizes(Path(tmp), url, sizes)
    finally:
        stop()
    print("seconds are wall (CPU of the process); show and report include Python's start and sbpc's imports")
    print(f"{'rows':>9}{'eval s':>15}{'eval MB':>9}{'record MB':>11}{'show s':>14}{'report s':>14}{'page MB':>9}")
    for f in found:
        print(
            f"{f['rows']:>9,}{seconds(f['eval']):>15}{f['eval']['mb']:>9.0f}{f['record_mb']:>11.1f}"
            f"{seconds(f['show']):>14}{seconds(f['report']):>14}{f['page']:>9.2f}"
        )
    first, last = found[0], found[-1]
    print(
        f"eval max RSS at {last['rows']:,} rows / at {first['rows']:,}: {last['eval']['mb'] / first['eval']['mb']:.2f}x "
        f"for {last['rows'] / first['rows']:.0f}x the rows"
    )


if __name__ == "__main__":
    main()
