"""Benchmark (not a test): wall clock of `decice reset` + `decice verify` on lab nodes.

    .venv/bin/python bench/cleanslate/run.py [--nodes 1 3 10] [--keep]
    .venv/bin/python bench/cleanslate/run.py --nodes 10 --rounds 2 \
        --checkout /tmp/base --checkout .

For each node count N: a fresh plain lab of N podman nodes (`decice.lab`, no SLURM). Then,
per round and per checkout (a decice source tree whose code and collection run the
commands; default: this one; the checkouts take turns on the same lab): `decice up --only
baseline,prepare` (not timed; lab nodes share this machine's kernel, so prepare runs with
``prepare_kernel_wide: false``), then on every node what a cluster leaves that a lab node
can have without extra packages (directories and files, a running unit and unit files, a
bridge interface, a tmpfs mount under /var/lib/kubelet, a net.* sysctl, the kube user and
kube-cert group; the nodes have no iptables/nft, so no chains), then `decice reset --yes`
and `decice verify`, each timed. Both must exit 0 (clean slate). Before the reset the ssh
masters of the up are ended (an experiment between up and reset outlasts them); verify
runs right after the reset, as it does after `decice reset`.
Besides the wall clock, the CPU each side spent: the controller (decice, ansible-playbook and
its workers, ssh clients: this process's children) and the nodes (the containers' cgroups:
sshd, the modules, what they run). The nodes share this machine's cores, so on 2 cores their
CPU is on the wall clock too; on real hosts each node has its own.
Prints one JSON line per N, checkout and round; with one checkout and several N, the ratio
of the largest N to the smallest; with several checkouts, per N and checkout the medians
over the rounds and their ratio to the first checkout's (of the same round, then the
median). The lab is destroyed afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from decice import lab, runner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labcpu import timed_decice

PLANT = r"""
set -e
mkdir -p /etc/kubernetes/manifests /var/lib/etcd/member /etc/cni/net.d /opt/cni/bin \
  /etc/kubeedge /var/lib/kubeedge /opt/kb-data /var/log/pods /var/log/containers /root/.kube
echo x > /etc/kubernetes/admin.conf; echo x > /usr/local/bin/kubelet
for u in kubelet containerd etcd; do
  printf '[Service]\nExecStart=/bin/sleep infinity\n' > /etc/systemd/system/$u.service
done
systemctl daemon-reload; systemctl start kubelet.service
ip link add cni0 type bridge
mkdir -p /var/lib/kubelet/pods/p1 && mount -t tmpfs tmpfs /var/lib/kubelet/pods/p1
sysctl -qw net.ipv4.conf.all.route_localnet=1
groupadd -r kube-cert; useradd -r -M -s /usr/sbin/nologin -G kube-cert kube
"""


def _decice(
    work: Path, nodes: list[str], *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, float], int, str]:
    """Run ``decice ARGS``: wall clock, controller CPU and node CPU (s), exit code, stderr."""
    proc, cost = timed_decice(work, *args, nodes=nodes, env=env)
    spent = {what: round(seconds, 2) for what, seconds in cost.items()}
    return spent, proc.returncode, proc.stderr[-2000:]


def close_masters() -> None:
    """End every ssh master decice's runs left (``decice.runner.control_path_dir``), so the
    timed reset opens its connections as it would after an experiment longer than their
    60 s; verify, right after it, reuses reset's as it would."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    roots = [runner.SSH_CONTROL_BASE] + ([Path(runtime)] if runtime.startswith("/") else [])
    for root in roots:
        for socket in root.glob(f"decice-ssh-{os.getuid()}/*/*"):
            if socket.is_socket():
                subprocess.run(
                    ["ssh", "-O", "exit", "-o", f"ControlPath={socket}", "unused"],
                    capture_output=True,
                    check=False,
                )


def _ssh(info: lab.LabInfo, node: str, script: str) -> None:
    subprocess.run(
        ["ssh", "-F", info.ssh_config, node, "bash -s"], input=script, text=True, check=True
    )


def cycle(work: Path, nodes: int, checkout: Path | None) -> dict[str, object]:
    """One up (baseline, prepare), planted leftovers, then reset and verify, timed."""
    env = {**os.environ, "PYTHONPATH": str(checkout / "cli")} if checkout else None
    up, rc, err = _decice(work, [], "up", "--only", "baseline,prepare", env=env)
    assert rc == 0, err
    info = lab.status(work.name, work / ".decice")
    assert info is not None
    with ThreadPoolExecutor(min(nodes, 10)) as pool:
        list(pool.map(lambda n: _ssh(info, n.name, PLANT), info.nodes))
    containers = [n.container for n in info.nodes]
    close_masters()
    load_before = os.getloadavg()[0]
    reset, rc, err = _decice(work, containers, "reset", "--yes", env=env)
    assert rc == 0, err
    verify, rc, err = _decice(work, containers, "verify", env=env)
    assert rc == 0, err
    controller = reset["controller_cpu"] + verify["controller_cpu"]
    return {
        "nodes": nodes,
        "checkout": str(checkout) if checkout else None,
        "up_baseline_prepare_s": up["wall"],
        "reset_s": reset["wall"],
        "verify_s": verify["wall"],
        "reset_plus_verify_s": round(reset["wall"] + verify["wall"], 2),
        "controller_cpu_s": round(controller, 2),
        "controller_cpu_per_host_s": round(controller / nodes, 2),
        "nodes_cpu_s": round(reset["nodes_cpu"] + verify["nodes_cpu"], 2),
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def make_lab(nodes: int, root: Path) -> Path:
    name = f"bcs{nodes}x{os.getpid()}"
    work = root / name
    work.mkdir()
    (work / "decice.yaml").write_text(
        f"name: {name}\ntarget: lab\nlab:\n  name: {name}\n  nodes: {nodes}\n"
        "allocation:\n  vars: {prepare_kernel_wide: false, restore_kernel_wide: false}\n"
    )
    return work


def compare(rows: list[dict[str, object]], checkouts: list[Path]) -> None:
    """Per N and checkout: medians over the rounds, and the median ratio to the first
    checkout's figure of the same round."""
    keys = ("reset_plus_verify_s", "controller_cpu_s", "controller_cpu_per_host_s", "nodes_cpu_s")
    for count in sorted({int(str(r["nodes"])) for r in rows}):
        mine = [r for r in rows if r["nodes"] == count]
        by = {str(c): [r for r in mine if r["checkout"] == str(c)] for c in checkouts}
        first = by[str(checkouts[0])]
        for checkout in checkouts:
            runs = by[str(checkout)]
            out: dict[str, object] = {
                "nodes": count,
                "checkout": str(checkout),
                "rounds": len(runs),
            }
            for key in keys:
                out[key + "_median"] = round(statistics.median(float(str(r[key])) for r in runs), 2)
                out[key.removesuffix("_s") + "_ratio"] = round(
                    statistics.median(
                        float(str(r[key])) / max(float(str(b[key])), 0.01)
                        for r, b in zip(runs, first, strict=True)
                    ),
                    2,
                )
            print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 3, 10])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--checkout", type=Path, action="append", default=[], help="a decice source tree"
    )
    parser.add_argument("--keep", action="store_true", help="keep the labs")
    args = parser.parse_args()
    checkouts: list[Path | None] = [c.resolve() for c in args.checkout] or [None]
    root = Path(tempfile.mkdtemp(prefix="bcs-", dir="/tmp"))
    results = []
    try:
        for count in args.nodes:
            work = make_lab(count, root)
            for _ in range(args.rounds):
                for checkout in checkouts:
                    row = cycle(work, count, checkout)
                    results.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        if not args.keep:
            for work in root.iterdir():
                subprocess.run(
                    [sys.executable, "-m", "decice", "lab", "destroy"],
                    cwd=work,
                    capture_output=True,
                    check=False,
                )
            shutil.rmtree(root, ignore_errors=True)
    if len(checkouts) > 1:
        compare(results, [c for c in checkouts if c is not None])
    elif len(args.nodes) > 1:
        first = next(r for r in results if r["nodes"] == args.nodes[0])
        last = next(r for r in results if r["nodes"] == args.nodes[-1])
        growth: dict[str, object] = {"growth": f"{first['nodes']} -> {last['nodes']} nodes"}
        for key in ("reset_plus_verify_s", "controller_cpu_s", "nodes_cpu_s"):
            growth[key.removesuffix("_s") + "_ratio"] = round(
                float(str(last[key])) / max(float(str(first[key])), 0.01), 2
            )
        print(json.dumps(growth))


if __name__ == "__main__":
    main()
