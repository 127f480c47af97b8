"""Benchmark (not a test): the CPU of Ansible's internal poll while tasks wait.

    .venv/bin/python bench/ansible/poll.py [--hosts 4] [--tasks 4] [--sleep 4] [--rounds 1]

Runs one play of ``--tasks`` tasks of ``sleep --sleep`` on ``--hosts`` local hosts (this
interpreter), with each strategy (``linear``, ``free``) and each ``internal_poll_interval``
(0.001, Ansible's default, and 0.01), through a config file of its own (``ANSIBLE_CONFIG``:
the setting has no environment variable). Prints one JSON line per run: wall seconds and
the CPU seconds of ansible-playbook and everything it waited for. The tasks only sleep, so
the CPU is Ansible's own: forking workers, and the controller polling them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchcli import options
from labcpu import children_cpu

POLLS = (0.001, 0.01)
STRATEGIES = ("linear", "free")


def main() -> None:
    args = options(__doc__, hosts=4, tasks=4, sleep=4.0, rounds=1)
    work = Path(tempfile.mkdtemp(prefix="decice-poll-bench-"))
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {f"h{i}": host for i in range(args.hosts)}}}
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory))
    tasks = [
        {"name": f"wait {i}", "ansible.builtin.command": f"sleep {args.sleep}",
         "changed_when": False}
        for i in range(args.tasks)
    ]  # fmt: skip
    ansible = str(Path(sys.executable).parent / "ansible-playbook")
    for rnd in range(args.rounds):
        for strategy in STRATEGIES:
            play = [{"hosts": "all", "gather_facts": False, "strategy": strategy, "tasks": tasks}]
            (work / f"{strategy}.yml").write_text(yaml.safe_dump(play))
            for poll in POLLS:
                config = work / f"poll-{poll}.cfg"
                config.write_text(f"[defaults]\ninternal_poll_interval = {poll}\nforks = 25\n")
                env = {**os.environ, "ANSIBLE_CONFIG": str(config)}
                cpu0, start = children_cpu(), time.monotonic()
                subprocess.run(
                    [ansible, "-i", str(work / "inventory.yml"), str(work / f"{strategy}.yml")],
                    env=env, stdout=subprocess.DEVNULL, check=True,
                )  # fmt: skip
                line = {"round": rnd + 1, "strategy": strategy, "poll_s": poll,
                        "wall_s": round(time.monotonic() - start, 2),
                        "cpu_s": round(children_cpu() - cpu0, 2)}  # fmt: skip
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
