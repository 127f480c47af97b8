"""Start-up time of the decice CLI: ``decice --help`` wall clock (not a test).

    .venv/bin/python bench/cli_startup.py [--runs 20]

Runs the ``decice`` entry point next to this interpreter ``--runs`` times after one
warm-up run and prints one JSON object: the fastest, median and slowest wall-clock
seconds and the 1-minute load average at the end. The fastest run is the figure to
compare: slower ones measure the machine's other work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one_run(decice: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(decice), "--help"], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    decice = Path(sys.executable).parent / "decice"
    one_run(decice)  # warm the page cache
    times = [one_run(decice) for _ in range(args.runs)]
    result = {
        "runs": args.runs,
        "min_s": round(min(times), 3),
        "median_s": round(statistics.median(times), 3),
        "max_s": round(max(times), 3),
        "load1": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
