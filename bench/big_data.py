"""Cost of a long data file: `check`, `eval --limit 2` and `init --data` on CSVs of growing length.

Each command runs in a fresh process (so its peak memory is its own), against a loopback fake model for `eval`;
printed: wall time and peak memory, the ratio to the case a quarter of its length, and beside them the cost of
reading the file whole (`datasets.load`) in the same run. Bounded reading means a ratio near 1 as the file grows.

    PYTHONPATH=. python bench/big_data.py            # 750,000 and 3,000,000 rows (~15 and ~60 MB)
    PYTHONPATH=. python bench/big_data.py 100000     # smaller, quicker
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

CHILD = """
import json, resource, sys, time
start = time.perf_counter()
if sys.argv[1] == "load":
    from sembp_dsl.runtime.datasets import load
    load(sys.argv[2])
    code = 0
else:
    from sembp_dsl.cli import main
    code = main(sys.argv[1:])
print(json.dumps({"s": time.perf_counter() - start, "code": code,
                  "mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

PIPELINE = """pipeline p "Answer yes or no"
input q: text
param t = "Answer yes or no."
node n: choice(yes, no) { prompt = t }
q -> n
output n
data { file = "big.csv" }
model { name = "openai/fake"  api_base = "URL" }
"""


def write_csv(path: Path, rows: int) -> None:
    with open(path, "w") as file:
        file.write("q,answer\n")
        file.writelines(f"question number {i},{'yes' if i % 2 else 'no'}\n" for i in range(rows))


def measure(folder: Path, *argv: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], cwd=folder, capture_output=True, text=True, timeout=1800
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from fake_server import FakeServer

    largest = int(sys.argv[1]) if len(sys.argv) > 1 else 3_000_000
    commands = {
        "check": ("check", "p.sbp"),
        "eval --limit 2": ("eval", "p.sbp", "--limit", "2", "--runs-dir", "runs"),
        "init --data": ("init", "--data", "big.csv", "Answer", "--model", "openai/x", "--out", "new.sbp"),
        "read whole": ("load", "big.csv"),
    }
    with FakeServer(delay=0.0, reply="yes") as server, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "p.sbp").write_text(PIPELINE.replace("URL", server.url))
        first: dict[str, dict] = {}
        print(f"{'command':<16}{'rows':>11}{'MB file':>9}{'s':>8}{'peak MB':>9}{'x rows/4':>10}")
        for rows in (largest // 4, largest):
            write_csv(folder / "big.csv", rows)
            size = (folder / "big.csv").stat().st_size / 2**20
            for label, argv in commands.items():
                (folder / "new.sbp").unlink(missing_ok=True)
                got = measure(folder, *argv)
                ratio = f"{got['s'] / first[label]['s']:.2f}" if label in first else ""
                first.setdefault(label, got)
                print(f"{label:<16}{rows:>11,}{size:>9.0f}{got['s']:>8.2f}{got['mb']:>9.0f}{ratio:>10}")


if __name__ == "__main__":
    main()
