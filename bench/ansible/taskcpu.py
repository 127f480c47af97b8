"""Profile (not a test): the controller's CPU of one decice command, per Ansible task.

    cd <a decice work dir> && /path/to/.venv/bin/python /path/to/bench/ansible/taskcpu.py \\
        [--top 30] [--checkout DIR] -- reset --yes

Runs ``python -m decice ARGS --json`` (with ``--checkout``: that source tree's code and
collection) with a ``sitecustomize`` on ``PYTHONPATH`` that, in ansible-playbook processes
only, records:

- per worker process (one per host and task): the task's name, the worker's own CPU seconds
  (templating, the action plugin, building the module) and the CPU of what it waited for
  (ssh clients, a module run on the controller);
- per ansible-playbook process, at its exit: its own CPU seconds (forking the workers,
  reading their results, the callbacks, variables) and all its children's.

Prints one JSON line per task name (sorted by CPU, ``--top`` of them), one per
ansible-playbook process and a total: host-tasks (worker processes), the workers' CPU, the
main processes' own CPU, and decice's whole controller CPU (this script's children). The
recording itself costs a little CPU (a line written per worker), so compare figures taken
with this tool with each other, not with `bench/cleanslate/run.py`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labcpu import children_cpu

SITECUSTOMIZE = r"""
import atexit, os, resource, sys

_LOG = os.environ.get("DECICE_TASKCPU_LOG")


def _cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _line(record):
    import json
    with open(_LOG, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


if _LOG and sys.argv and os.path.basename(sys.argv[0]) == "ansible-playbook":
    from ansible.executor.process import worker

    _run = worker.WorkerProcess._run

    def _recorded(self):
        try:
            return _run(self)
        finally:
            _line({"task": self._task.get_name(), "self": _cpu(resource.RUSAGE_SELF),
                   "children": _cpu(resource.RUSAGE_CHILDREN)})

    worker.WorkerProcess._run = _recorded
    _pid = os.getpid()
    atexit.register(lambda: os.getpid() == _pid and _line(
        {"playbook": " ".join(sys.argv[1:])[-160:], "self": _cpu(resource.RUSAGE_SELF),
         "children": _cpu(resource.RUSAGE_CHILDREN)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--checkout", type=Path, help="a decice source tree")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- and decice's arguments")
    args = parser.parse_args()
    decice_args = [a for a in args.args if a != "--"]
    if not decice_args:
        parser.error("give decice's arguments after --")
    with tempfile.TemporaryDirectory(prefix="decice-taskcpu-") as tmp:
        Path(tmp, "sitecustomize.py").write_text(SITECUSTOMIZE)
        log = Path(tmp, "tasks.jsonl")
        path = [tmp] + ([str(args.checkout.resolve() / "cli")] if args.checkout else [])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
            "DECICE_TASKCPU_LOG": str(log),
        }
        before = children_cpu()
        proc = subprocess.run(
            [sys.executable, "-m", "decice", *decice_args, "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        whole = children_cpu() - before
        records = (
            [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        )
    tasks: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    playbooks = [r for r in records if "playbook" in r]
    for record in records:
        if "task" in record:
            entry = tasks[record["task"]]
            entry[0] += 1
            entry[1] += record["self"]
            entry[2] += record["children"]
    ranked = sorted(tasks.items(), key=lambda item: -(item[1][1] + item[1][2]))
    for name, (count, own, waited) in ranked[: args.top]:
        print(json.dumps({"task": name, "runs": count, "cpu_s": round(own, 3),
                          "children_cpu_s": round(waited, 3)}))  # fmt: skip
    for record in playbooks:
        print(
            json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in record.items()})
        )
    print(
        json.dumps(
            {
                "exit": proc.returncode,
                "host_tasks": sum(int(e[0]) for e in tasks.values()),
                "workers_cpu_s": round(sum(e[1] + e[2] for e in tasks.values()), 2),
                "ansible_playbook_own_cpu_s": round(sum(p["self"] for p in playbooks), 2),
                "controller_cpu_s": round(whole, 2),
            }
        )
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(proc.returncode)


if __name__ == "__main__":
    main()
