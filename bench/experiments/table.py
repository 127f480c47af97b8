"""Print an experiment run's per-arm medians and intervals as a Markdown table (the
figures in bench/README.md come from here), computed afresh from its raw.json by this
checkout's decice.experiment.stats; a metric no arm has (e.g. the API server's clock
without the sim's audit log, gang waits without groups) is left out.

    .venv/bin/python bench/experiments/table.py <experiment run dir>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from decice.experiment import stats


def main() -> None:
    run_dir = Path(sys.argv[1])
    raw = json.loads((run_dir / "raw.json").read_text())
    summary = stats.summarize(raw)
    arms = list(summary["arms"])
    print(f"run {raw['id']} ({raw['status']}), order {raw['order']}")
    print(
        "| metric | "
        + " | ".join(f"{a} ({summary['arms'][a]['repetitions']} reps)" for a in arms)
        + " |"
    )
    print("|---|" + "---|" * len(arms))
    for key, label, unit, better in stats.METRICS:
        if all(summary["arms"][arm]["metrics"][key]["median"] is None for arm in arms):
            continue
        cells = []
        for arm in arms:
            m = summary["arms"][arm]["metrics"][key]
            cells.append(
                "-"
                if m["median"] is None
                else f"{m['median']:.3g} [{m['low']:.3g}, {m['high']:.3g}]"
            )
        print(f"| {label} ({unit}, {better} is better) | " + " | ".join(cells) + " |")
    print()
    print(
        "| repetition | arm | throughput | sched p50 | sched p99 | start p50 | makespan "
        "| partial groups |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m in summary["runs"]:
        print(
            f"| {m['repetition']} | {m['arm']} | {m['throughput']} | {m['sched_p50']} | "
            f"{m['sched_p99']} | {m['start_p50']} | {m['makespan']} | {m['partial_groups']} |"
        )


if __name__ == "__main__":
    main()
