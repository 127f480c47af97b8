"""decice-interlink-slurm's command line: runtime choice, pidfile, sockets, defaults."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from decice.interlink import slurm
from decice.interlink.__main__ import detect_runtime, main
from decice.interlink.api import parse_create
from decice.interlink.errors import UsageError
from decice.interlink.jobscript import Defaults, Runtime, sbatch_options
from decice.interlink.plugin import Config, Plugin
from decice.interlink.podspec import parse_pod
from decice.interlink.store import SUBMITTED, Entry

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_runtime_auto_prefers_apptainer_then_singularity(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_runtime("auto").kind == "bare"
    with pytest.raises(UsageError, match="neither apptainer nor singularity"):
        detect_runtime("apptainer")
    for name in ("singularity", "apptainer"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
        runtime = detect_runtime("auto")
        assert (runtime.kind, runtime.binary) == ("apptainer", str(tmp_path / name))
    assert detect_runtime("bare").kind == "bare"


def test_runtime_apptainer_without_one_exits_2(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    argv = ["serve", "--data-dir", str(tmp_path / "d"), "--runtime", "apptainer"]
    assert main(argv) == 2
    assert "--runtime apptainer" in capsys.readouterr().err


def test_live_pidfile_or_socket_exits_2(tmp_path: Path, capsys):
    data = tmp_path / "d"
    pidfile = tmp_path / "pid"
    pidfile.write_text(f"{os.getppid()}\n")  # a live process that is not this one
    argv = ["serve", "--data-dir", str(data), "--pidfile", str(pidfile), "--runtime", "bare"]
    assert main(argv) == 2
    assert "already runs as pid" in capsys.readouterr().err
    data.mkdir(exist_ok=True)
    busy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    busy.bind(str(data / "plugin.sock"))
    busy.listen()
    try:
        assert main(["serve", "--data-dir", str(data), "--runtime", "bare"]) == 2
        assert "another process serves this socket" in capsys.readouterr().err
    finally:
        busy.close()


def test_bad_partition_account_or_max_pods_exits_2(tmp_path: Path, capsys):
    argv = ["serve", "--data-dir", str(tmp_path), "--partition", "a;b"]
    assert main(argv) == 2
    assert "--partition 'a;b'" in capsys.readouterr().err
    assert main(["serve", "--data-dir", str(tmp_path), "--account", "x y"]) == 2
    assert "--account 'x y'" in capsys.readouterr().err
    assert main(["serve", "--data-dir", str(tmp_path), "--max-pods", "0"]) == 2
    assert "--max-pods 0" in capsys.readouterr().err


def _one_node_in_partition_p(monkeypatch: pytest.MonkeyPatch, node: str) -> None:
    """SLURM as the plugin asks it: default partition ``p``, its one node as scontrol shows
    ``node`` (``Partitions=p`` added)."""
    monkeypatch.setattr(slurm, "default_partition", lambda: "p")
    monkeypatch.setattr(slurm, "nodes", lambda: slurm.parse_nodes(f"{node} Partitions=p"))


def test_max_pods_is_what_ping_reports(tmp_path: Path, monkeypatch):
    _one_node_in_partition_p(
        monkeypatch, "NodeName=n CPUTot=2 CPUAlloc=2 RealMemory=100 State=ALLOCATED"
    )
    ping = Plugin(Config(tmp_path, Runtime("bare"), Defaults(), max_pods=7)).ping()
    assert ping["resources"] == {"cpu": "0", "memory": "100Mi", "pods": "7"}


def test_ping_counts_what_the_plugins_own_jobs_hold_as_capacity(tmp_path: Path, monkeypatch):
    # other users' jobs shrink the virtual node; this plugin's own do not (the pods bound
    # to the node are counted by the scheduler already)
    _one_node_in_partition_p(
        monkeypatch,
        "NodeName=n CPUTot=8 CPUAlloc=5 RealMemory=4096 AllocMem=3072 Gres=gpu:2 "
        "GresUsed=gpu:2 State=MIXED",
    )
    monkeypatch.setattr(
        slurm,
        "allocations",
        lambda: slurm.parse_allocations(
            "JobId=41 JobState=RUNNING AllocTRES=cpu=2,mem=1G,node=1,gres/gpu=1\n"
            "JobId=42 JobState=RUNNING AllocTRES=cpu=3,mem=2048M,node=1,gres/gpu=1\n"
            "JobId=43 JobState=PENDING AllocTRES=\n"
        ),
    )
    plugin = Plugin(Config(tmp_path, Runtime("bare"), Defaults(), max_pods=7))
    plugin.ensure_dirs()
    assert plugin.ping()["resources"]["cpu"] == "3"  # nothing of its own yet
    plugin.store.put(Entry("a", "default", "u1", str(tmp_path), state=SUBMITTED, jid="41"))
    resources = plugin.ping()["resources"]
    assert (resources["cpu"], resources["memory"]) == ("5", "2048Mi")
    assert resources["accelerators"] == [{"resourceType": "nvidia.com/gpu", "available": "1"}]


def test_plugin_defaults_yield_to_pod_annotations(tmp_path: Path):
    uid = "0f6a3c1e-6f5b-4a51-9a53-2d1b9d2f0c11"

    def options(annotations: dict) -> list[str]:
        c = {"name": "m", "command": ["x"], "resources": {"limits": {"cpu": "1", "memory": "1Mi"}}}
        meta = {"name": "p", "namespace": "n", "uid": uid, "annotations": annotations}
        req = parse_create({"pod": {"metadata": meta, "spec": {"containers": [c]}}})
        return sbatch_options(req.ref, parse_pod(req), tmp_path, Defaults("batch", "acct"))

    assert {"--partition=batch", "--account=acct"} <= set(options({}))
    mine = options({"slurm-job.vk.io/partition": "gpu", "slurm-job.vk.io/account": "me"})
    assert {"--partition=gpu", "--account=me"} <= set(mine)
    assert "--partition=batch" not in mine


def test_console_script_module_runs(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "cli")}
    proc = subprocess.run(
        [sys.executable, "-m", "decice.interlink", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0 and "serve" in proc.stdout and "cancel-all" in proc.stdout
    text = (REPO / "pyproject.toml").read_text()
    assert 'decice-interlink-slurm = "decice.interlink.__main__:main"' in text
