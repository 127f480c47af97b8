"""Pilot mode on the lab's real SLURM: pods run as job steps of one leased allocation.

The plugin on node1 (user ``decice``) leases pilots of two whole nodes (``--pilot-nodes
2 --max-pilots 1``, released after 3 idle seconds). The lab's nodes have 2 CPUs each, so
a pilot holds 4. A pilot's walltime: test_interlink_conformance.py (its one-minute wait
runs beside that module's job walltime).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from decice import lab
from tests.integration import pluginsupport as ps
from tests.support import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons]

PILOT = "--runtime bare --mode pilot --pilot-nodes 2 --pilot-time 30:00 --max-pilots 1"


@dataclass
class Site:
    plugin: ps.Plugin


@pytest.fixture(scope="module")
def site(slurm_cluster: lab.LabInfo) -> Iterator[Site]:
    with ps.running_plugin(slurm_cluster, "ilp", 4001, f"{PILOT} --idle-release 3") as plugin:
        yield Site(plugin)


def pilots(p: ps.Plugin) -> dict[str, str]:
    """This plugin's pilot jobs squeue knows: job id -> state."""
    out = p.sh("squeue --me -h -t all -o '%i|%T|%j|%Z'")
    found = {}
    for line in out.splitlines():
        jid, job_state, name, workdir = line.split("|", 3)
        if name == "decice-pilot" and workdir == f"{p.data}/pilots":
            found[jid] = job_state
    return found


def steps(p: ps.Plugin) -> set[str]:
    """The names of the running steps of user decice (pods: decice-<uid>)."""
    out = p.sh("squeue --me --steps -h -o '%j'")
    return {name for name in out.split() if name.startswith("decice-")}


def jid_of(p: ps.Plugin, spec: dict) -> str:
    code, body = p.call("GET", "/status", [spec])
    assert code == 200 and body, body
    return str(body[0]["JID"])


def test_forty_pods_run_in_one_pilot_without_a_job_each(site: Site) -> None:
    p = site.plugin
    before = set(p.sh("squeue --me -h -t all -o %i").split())
    pods = [ps.pod(f"many{i}", f"echo pod {i}; sleep 1; exit {i % 3}") for i in range(40)]
    for spec in pods:
        ps.create(p, spec)
    ended = [ps.terminated(p, spec, timeout=120) for spec in pods]
    assert [e["exitCode"] for e in ended] == [i % 3 for i in range(40)]
    assert [e["reason"] for e in ended] == [
        ["Completed", "Error", "Error"][i % 3] for i in range(40)
    ]
    assert [ps.log(p, spec) for spec in pods] == [f"pod {i}\n" for i in range(40)]
    used = {jid_of(p, spec) for spec in pods}
    new_jobs = set(p.sh("squeue --me -h -t all -o %i").split()) - before
    assert len(used) == 1 and used <= set(pilots(p)), (used, pilots(p))
    # one SLURM job for forty pods: the pilot (or none, when an earlier test's still ran)
    assert new_jobs <= used, (new_jobs, used)
    assert not any(
        name.startswith("decice-") and name != "decice-pilot" for name in (p.active_jobs().values())
    )


def test_a_pod_bigger_than_the_free_room_waits_for_room(site: Site) -> None:
    p = site.plugin
    small = [ps.pod(f"small{i}", "sleep 5") for i in range(3)]
    for spec in small:
        ps.create(p, spec)
    wait_for("3 small pods running", lambda: all("running" in ps.state(p, s) for s in small), 60)
    big = ps.pod("big", "echo big", {"limits": {"cpu": "2", "memory": "32Mi"}})
    assert ps.create(p, big) == ""  # queued: no node of the pilot has 2 free cpus
    waiting = ps.state(p, big)["waiting"]
    assert waiting == {"reason": "Pending", "message": "waiting for room in a pilot (pilot mode)"}
    assert len([s for s in pilots(p).values() if s in ("PENDING", "RUNNING")]) == 1
    # the node offers the lease (2 nodes x 2 cpus), no more: --max-pilots 1 is reached
    assert p.call("GET", "/ping")[1]["resources"]["cpu"] == "4"
    done = ps.terminated(p, big, timeout=60)
    assert (done["exitCode"], ps.log(p, big)) == (0, "big\n")
    ends = [ps.terminated(p, s) for s in small]
    assert [e["exitCode"] for e in ends] == [0, 0, 0]
    assert done["startedAt"] >= min(e["finishedAt"] for e in ends)  # once room freed


def test_a_killed_plugin_keeps_tracking_and_deleting_its_steps(site: Site) -> None:
    p = site.plugin
    long = [ps.pod(f"long{i}", "sleep 300") for i in range(2)]
    short = ps.pod("short", "sleep 6; exit 5")
    for spec in [*long, short]:
        ps.create(p, spec)
    every = [*long, short]
    wait_for("3 pods running", lambda: all("running" in ps.state(p, s) for s in every), 60)
    p.sh(f"kill -9 $(cat {p.base}/plugin.pid)")
    p.start()
    assert all("running" in ps.state(p, s) for s in every)
    names = {f"decice-{s['metadata']['uid']}" for s in every}
    assert names <= steps(p)
    code, text = p.call("POST", "/delete", long[0])
    assert code == 200 and "sent SIGTERM" in text, text
    gone = f"decice-{long[0]['metadata']['uid']}"
    wait_for("the deleted pod's step to end", lambda: gone not in steps(p), timeout=20)
    assert ps.terminated(p, short, timeout=30)["exitCode"] == 5
    assert "running" in ps.state(p, long[1])
    p.call("POST", "/delete", long[1])
    wait_for("no step left", lambda: not names & steps(p), timeout=20)


def test_an_idle_pilot_is_released(site: Site) -> None:
    p = site.plugin
    spec = ps.pod("brief", "true")
    ps.create(p, spec)
    assert ps.terminated(p, spec, timeout=60)["exitCode"] == 0
    pilot = jid_of(p, spec)
    wait_for("the idle pilot to be released", lambda: pilots(p).get(pilot) == "CANCELLED", 30)
    # no lease now: the node offers what one more pilot would hold
    assert p.call("GET", "/ping")[1]["resources"]["cpu"] == "4"


def test_cancel_all_leaves_no_job_and_no_step(site: Site) -> None:
    p = site.plugin
    specs = [ps.pod(f"left{i}", "sleep 300") for i in range(5)]  # 4 run, 1 waits for room
    for spec in specs:
        ps.create(p, spec)
    wait_for("4 steps", lambda: len(steps(p)) >= 4, timeout=60)
    out = p.cancel_all()
    assert out.startswith("cancelled SLURM job"), out
    active = [jid for jid, s in pilots(p).items() if s in ("PENDING", "RUNNING", "COMPLETING")]
    assert active == [] and not {f"decice-{s['metadata']['uid']}" for s in specs} & steps(p)
    time.sleep(2.5)  # two rounds of the running plugin: the pod that waited leases nothing
    assert not [s for s in pilots(p).values() if s in ("PENDING", "RUNNING", "CONFIGURING")]
