"""Start-up time of the decice CLI: ``decice --help`` wall clock (not a test).

    .venv/bin/python bench/cli_startup.py [--runs 20] [--checkout DIR ...]

Runs ``decice --help`` ``--runs`` times after one warm-up run and prints one JSON object
per checkout: the fastest, median and slowest wall-clock seconds and the 1-minute load
average at the end. Without ``--checkout``, the ``decice`` entry point next to this
interpreter; with them, ``python -m decice --help`` of each checkout (its ``cli``, ``kube``
and ``scheduler`` first on PYTHONPATH, the same interpreter and packages), the checkouts taking
turns run by run so that the machine's other work hits each alike. The fastest run is the
figure to compare: slower ones measure the machine's other work.
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


def one_run(argv: list[str], env: dict[str, str] | None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--checkout", action="append", type=Path, default=[])
    args = parser.parse_args()
    arms: list[tuple[str, list[str], dict[str, str] | None]] = []
    if args.checkout:
        for checkout in args.checkout:
            # its own packages first: cli, scheduler and (from #28 on) kube
            roots = [checkout.resolve() / d for d in ("cli", "kube", "scheduler")]
            path = ":".join(str(root) for root in roots if root.is_dir())
            pythonpath = {**os.environ, "PYTHONPATH": path}
            arms.append((str(checkout), [sys.executable, "-m", "decice", "--help"], pythonpath))
    else:
        decice = str(Path(sys.executable).parent / "decice")
        arms = [(decice, [decice, "--help"], None)]
    for _, argv, env in arms:
        one_run(argv, env)  # warm the page cache
    times: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    for _ in range(args.runs):
        for name, argv, env in arms:
            times[name].append(one_run(argv, env))
    for name, values in times.items():
        result = {
            "checkout": name,
            "runs": args.runs,
            "min_s": round(min(values), 3),
            "median_s": round(statistics.median(values), 3),
            "max_s": round(max(values), 3),
            "load1": round(os.getloadavg()[0], 1),
        }
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
