"""Benchmark (not a test): wall clock of `decice reset` + `decice verify` on lab nodes.

    .venv/bin/python bench/cleanslate/run.py [--nodes 1 3 10] [--keep]

For each node count N: a fresh plain lab of N podman nodes (`decice.lab`, no SLURM),
`decice up --only baseline,prepare` (not timed; lab nodes share this machine's kernel, so
prepare runs with ``prepare_kernel_wide: false``), then on every node what a cluster
leaves that a lab node can have without extra packages (directories and files, a running
unit and unit files, a bridge interface, a tmpfs mount under /var/lib/kubelet, a net.*
sysctl, the kube user and kube-cert group; the nodes have no iptables/nft, so no chains),
then `decice reset --yes` and `decice verify`, each timed. Both must exit 0 (clean slate).
Prints one JSON line per N and the ratio of N=10 (the largest) to N=1. The lab is
destroyed afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from decice import lab

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


def _decice(work: Path, *args: str) -> tuple[float, int, str]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "decice", *args, "--json"],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    return round(time.monotonic() - t0, 2), proc.returncode, proc.stderr[-2000:]


def _ssh(info: lab.LabInfo, node: str, script: str) -> None:
    subprocess.run(
        ["ssh", "-F", info.ssh_config, node, "bash -s"], input=script, text=True, check=True
    )


def measure(nodes: int, root: Path) -> dict[str, object]:
    name = f"bcs{nodes}x{os.getpid()}"
    work = root / name
    work.mkdir()
    (work / "decice.yaml").write_text(
        f"name: {name}\ntarget: lab\nlab:\n  name: {name}\n  nodes: {nodes}\n"
        "allocation:\n  vars: {prepare_kernel_wide: false, restore_kernel_wide: false}\n"
    )
    up_s, rc, err = _decice(work, "up", "--only", "baseline,prepare")
    assert rc == 0, err
    info = lab.status(name, work / ".decice")
    assert info is not None
    with ThreadPoolExecutor(min(nodes, 10)) as pool:
        list(pool.map(lambda n: _ssh(info, n.name, PLANT), info.nodes))
    reset_s, rc, err = _decice(work, "reset", "--yes")
    assert rc == 0, err
    verify_s, rc, err = _decice(work, "verify")
    assert rc == 0, err
    return {
        "nodes": nodes,
        "up_baseline_prepare_s": up_s,
        "reset_s": reset_s,
        "verify_s": verify_s,
        "reset_plus_verify_s": round(reset_s + verify_s, 2),
        "load_average": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 3, 10])
    parser.add_argument("--keep", action="store_true", help="keep the labs")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bcs-", dir="/tmp"))
    results = []
    try:
        for count in args.nodes:
            row = measure(count, root)
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
    if len(results) > 1:
        first, last = results[0], results[-1]
        ratio = float(str(last["reset_plus_verify_s"])) / float(str(first["reset_plus_verify_s"]))
        print(
            json.dumps(
                {"growth": f"{first['nodes']} -> {last['nodes']} nodes", "ratio": round(ratio, 2)}
            )
        )


if __name__ == "__main__":
    main()
