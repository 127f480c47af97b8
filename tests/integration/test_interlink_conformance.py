"""decice-interlink-slurm as interLink 0.6.2 drives it, on the session's SLURM lab (#30).

The plugin runs on node1 as the lab user, listening on ``tcp:127.0.0.1`` with no token
(interLink on the same host; interLink sends none). The test's client
(:mod:`tests.integration.interlink_conformance`, written from interLink's Go types)
reaches that loopback port through an ssh forward from a unix socket here, so the
plugin sees a plain TCP client on 127.0.0.1 without an Authorization header. Pods are
what HPC users write for the reference plugin: no resources, env interLink did not
resolve, subPath, the reference's annotations, MPI across two nodes, followed logs,
a walltime, a cancel from outside; and a pilot's walltime (pilot mode, a plugin of its
own), whose one-minute wait runs beside the job's.

Not possible here: apptainer (not in Debian's archive; the lab runs containers bare,
so a subPath's bind, apptainer options and the image root are checked by the unit
tests with a stub), and an out-of-memory kill (the lab's SLURM enforces no memory:
``TaskPlugin=task/none``, ``CR_Core``), also unit-tested.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from decice import lab
from tests.integration.interlink_conformance import InterLink, v1_pod
from tests.integration.labsupport import ssh, stage_plugin
from tests.integration.pluginsupport import Plugin, create, log, pod, running_plugin, terminated
from tests.support import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons]

BASE = "/shared/ilc"
PILOT_WALLTIME = "--runtime bare --mode pilot --pilot-nodes 1 --pilot-time 1 --withdraw 0"
PORT = 4100
LAB_UID = 1500


@dataclass
class Site:
    info: lab.LabInfo
    client: InterLink
    walltime_pod: dict[str, Any]
    pilot: Plugin  # pilot mode, its pilot's walltime one minute
    pilot_pod: dict[str, Any]

    def sh(self, command: str, check: bool = True) -> str:
        return ssh(self.info, "decice@node1", command, check=check)

    def host_path(self, path: str) -> Path:
        """A path under /shared on the nodes, as this machine sees it."""
        return Path(self.info.shared_dir) / Path(path).relative_to("/shared")

    def job_dir(self, pod: dict[str, Any]) -> Path:
        meta = pod["metadata"]
        return self.host_path(f"{BASE}/data/jobs/{meta['namespace']}-{meta['uid']}")

    def state(self, pod: dict[str, Any], index: int = 0) -> dict[str, Any]:
        found = self.client.status([pod])
        return found[0]["containers"][index]["state"] if found else {}

    def terminated(self, pod: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        return wait_for("the container to end", lambda: self.state(pod).get("terminated"), timeout)

    def succeeds(
        self,
        pod: dict[str, Any],
        containers: list[dict[str, Any]] | None = None,
        timeout: float = 60,
    ) -> None:
        """Create ``pod`` (``containers``: its containers' volume data) and wait for its
        container to end with exit code 0."""
        code, body = self.client.create(pod, containers)
        assert code == 200, body
        assert self.terminated(pod, timeout)["exitCode"] == 0

    def log(self, pod: dict[str, Any], container: str = "main", **opts: Any) -> str:
        code, pieces = self.client.logs(pod, container, **opts)
        assert code == 200, pieces
        return b"".join(pieces).decode()


def _limits() -> dict[str, Any]:
    return {"limits": {"cpu": "1", "memory": "32Mi"}}


def _main(script: str, **extra: Any) -> dict[str, Any]:
    return {"name": "main", "command": ["sh", "-c", script], **extra}


@pytest.fixture(scope="module")
def site(slurm_cluster: lab.LabInfo) -> Iterator[Site]:
    root = stage_plugin(slurm_cluster, "ilc")
    for path in [root, *root.rglob("*")]:
        shutil.chown(path, LAB_UID, LAB_UID)
    sock_dir = Path(tempfile.mkdtemp(prefix="ilc-"))
    sock = sock_dir / "plugin.sock"
    start = (
        f"cd {BASE} || exit 1; PYTHONPATH={BASE}/app setsid nohup "
        f"python3 -m decice.interlink serve --data-dir {BASE}/data "
        f"--listen tcp:127.0.0.1:{PORT} --mpi-launcher srun "
        f"--pidfile {BASE}/plugin.pid >>{BASE}/plugin.log 2>&1 </dev/null &"
    )
    ssh(slurm_cluster, "decice@node1", start)
    forward = subprocess.Popen(
        [
            "ssh", "-F", slurm_cluster.ssh_config, "-o", "BatchMode=yes",
            "-o", "ExitOnForwardFailure=yes", "-N",
            "-L", f"{sock}:127.0.0.1:{PORT}", "decice@node1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = InterLink(str(sock))

    def answers() -> bool:
        try:
            return client.status([]).get("status") == "ok"
        except OSError:
            return False

    try:
        wait_for("the plugin behind the forward", answers, timeout=30, every=0.3)
        # the walltime pod first: SLURM ends it a minute or more from now, while the
        # other tests run
        walltime = v1_pod(
            "walltime",
            [_main("echo started; sleep 600", resources=_limits())],
            annotations={"slurm-job.vk.io/time": "1"},
        )
        code, body = client.create(walltime)
        assert code == 200, body
        # and a pod in pilot mode whose one-node pilot has a one-minute walltime: both
        # limits run out while the other tests run
        with running_plugin(slurm_cluster, "ilw", 4002, PILOT_WALLTIME) as pilot:
            cut = pod("cut", "echo started; sleep 600")
            create(pilot, cut)
            yield Site(slurm_cluster, client, walltime, pilot, cut)
    finally:
        forward.terminate()
        forward.wait(10)
        shutil.rmtree(sock_dir, ignore_errors=True)
        ssh(
            slurm_cluster,
            "decice@node1",
            f"[ -e {BASE}/plugin.pid ] && kill $(cat {BASE}/plugin.pid) || true",
        )
        ssh(
            slurm_cluster,
            "decice@node1",
            f"PYTHONPATH={BASE}/app python3 -m decice.interlink cancel-all --data-dir {BASE}/data",
        )
        shutil.rmtree(root, ignore_errors=True)


def test_a_routable_listen_without_a_token_is_refused_at_start(site: Site) -> None:
    out = site.sh(
        f"cd {BASE} && PYTHONPATH={BASE}/app python3 -m decice.interlink serve "
        f"--data-dir {BASE}/open --listen tcp:0.0.0.0:{PORT + 1} 2>&1; echo rc=$?",
        check=False,
    )
    assert out.endswith("rc=2") and "without --token-file this would be an open port" in out
    assert not site.host_path(f"{BASE}/open").exists()


def test_a_pod_without_resources_runs_with_the_default_size(site: Site) -> None:
    pod = v1_pod("nores", [_main("echo ran")])
    code, body = site.client.create(pod)
    assert code == 200 and body["PodUID"] == pod["metadata"]["uid"], body
    assert site.terminated(pod)["reason"] == "Completed"
    script = (site.job_dir(pod) / "job.sh").read_text()
    assert "#SBATCH --cpus-per-task=1\n" in script and "#SBATCH --mem" not in script
    assert site.log(pod) == "ran\n"


def test_env_interlink_did_not_resolve_is_empty_and_noted(site: Site) -> None:
    env = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
    ]
    pod = v1_pod(
        "unresolved",
        [_main('echo "token=[$TOKEN] host=[$HOST] cpu=$CPU"', env=env, resources=_limits())],
    )
    site.succeeds(pod)
    lines = site.log(pod).splitlines()
    assert lines[0].startswith("decice-interlink-slurm: env TOKEN is set empty: secretKeyRef")
    assert lines[1].startswith("decice-interlink-slurm: env HOST is set empty: fieldRef")
    assert lines[2] == "token=[] host=[] cpu=1"


def test_sub_path_mounts_of_delivered_volumes(site: Site) -> None:
    cm = {"metadata": {"name": "cfg", "namespace": "hpc"}, "data": {"app.conf": "mode=fast\n"}}
    mounts = [
        {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
        {"name": "scratch", "mountPath": "/work", "subPath": "run/1"},
    ]
    pod = v1_pod(
        "subpath",
        [_main('cat "$DECICE_VOLUMES/cfg/app.conf"', volumeMounts=mounts, resources=_limits())],
        volumes=[
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    site.succeeds(pod, [{"name": "main", "configMaps": [cm]}])
    assert site.log(pod) == "mode=fast\n"
    assert (site.job_dir(pod) / "volumes" / "scratch" / "run" / "1").is_dir()


def test_the_reference_annotations(site: Site) -> None:
    pod = v1_pod(
        "annotated",
        [_main('echo "tool=$TOOL ip=$POD_IP"; cat pre.txt', resources=_limits())],
        annotations={
            "slurm-job.vk.io/pre-exec": "export TOOL=/opt/tool\necho from-pre-exec > pre.txt",
            "slurm-job.vk.io/flags": "--comment=conformance --begin=now",
            "slurm-job.vk.io/singularity-options": "--fakeroot",
            "slurm-job.vk.io/image-root": "/cvmfs/unpacked.cern.ch/",
            "interlink.eu/pod-ip": "10.244.7.9",
        },
    )
    site.succeeds(pod)
    lines = site.log(pod).splitlines()
    assert "singularity-options/-mounts and image-root not used" in lines[0]
    assert lines[1:] == ["tool=/opt/tool ip=10.244.7.9", "from-pre-exec"]
    script = (site.job_dir(pod) / "job.sh").read_text()
    assert "#SBATCH --comment=conformance\n#SBATCH --begin=now\n" in script


def test_mpi_flags_launch_tasks_on_two_nodes(site: Site) -> None:
    pod = v1_pod(
        "mpi",
        [_main("echo rank $SLURM_PROCID on $(hostname)", resources=_limits())],
        annotations={
            "slurm-job.vk.io/flags": "--nodes=2 --ntasks=2",
            "slurm-job.vk.io/mpi-flags": "--label",
        },
    )
    site.succeeds(pod, timeout=90)
    lines = sorted(site.log(pod).splitlines())
    assert [line.split(":")[0] for line in lines] == ["0", "1"], lines
    hosts = {line.rsplit(" ", 1)[-1] for line in lines}
    assert len(hosts) == 2 and hosts <= {n.name for n in site.info.nodes}, lines


def test_logs_follow_tail_timestamps_since_and_previous(site: Site) -> None:
    pod = v1_pod(
        "chatty",
        [_main("for i in 1 2 3 4; do echo line $i; sleep 1; done", resources=_limits())],
    )
    assert site.client.create(pod)[0] == 200
    wait_for("Running", lambda: site.state(pod).get("running"), timeout=30)
    started = time.monotonic()
    code, pieces = site.client.logs(pod, "main", follow=True)
    assert code == 200
    assert b"".join(pieces).decode().splitlines() == [f"line {i}" for i in range(1, 5)]
    assert len(pieces) >= 2 and time.monotonic() - started >= 1.5  # streamed as written
    site.terminated(pod)
    stamped = site.log(pod, timestamps=True).splitlines()
    times = [line.split(" ", 1)[0] for line in stamped]
    assert [line.split(" ", 1)[1] for line in stamped] == [f"line {i}" for i in range(1, 5)]
    assert times == sorted(times) and times[0] < times[-1] and times[0].endswith("Z")
    assert site.log(pod, tail=1) == "line 4\n"
    # times come from one-second samples: lines written within one share its stamp
    last = "".join(f"{line.split(' ', 1)[1]}\n" for line in stamped if line.startswith(times[-1]))
    assert last.endswith("line 4\n") and "line 1" not in last
    assert site.log(pod, since_time=times[-1]) == last
    assert site.log(pod, since_seconds=3600).count("line") == 4
    assert site.log(pod, previous=True) == ""


def test_a_cancel_from_outside_the_plugin_is_reported_as_such(site: Site) -> None:
    pod = v1_pod("cancelled", [_main("sleep 600", resources=_limits())])
    code, body = site.client.create(pod)
    assert code == 200
    wait_for("Running", lambda: site.state(pod).get("running"), timeout=30)
    site.sh(f"scancel {body['PodJID']}")  # the user, by hand
    ended = site.terminated(pod)
    assert ended["reason"] == "Cancelled" and "cancelled outside the plugin" in ended["message"]
    code, text = site.client.delete(pod)
    assert code == 200 and "had already ended (CANCELLED)" in text


def test_a_walltime_kill_is_deadline_exceeded(site: Site) -> None:
    """Last: the pod the fixture started with a one-minute limit (SLURM checks limits
    every 30 s, then KillWait)."""
    ended = site.terminated(site.walltime_pod, timeout=180)
    assert ended["reason"] == "DeadlineExceeded", ended
    assert "reached its time limit" in ended["message"] and ended["exitCode"] == 143
    # what the container wrote before SLURM stopped it (its shell may add "Terminated")
    assert site.log(site.walltime_pod).startswith("started\n")


def test_a_pilot_at_its_walltime_fails_its_pods_with_that_reason(site: Site) -> None:
    """Pilot mode (#31): the pod the fixture started in a pilot with a one-minute walltime
    ends DeadlineExceeded, the message naming the pilot's walltime."""
    ended = terminated(site.pilot, site.pilot_pod, timeout=180)
    assert (ended["exitCode"], ended["reason"]) == (143, "DeadlineExceeded"), ended
    assert "reached the end of its walltime" in ended["message"], ended
    assert log(site.pilot, site.pilot_pod).startswith("started\n")
