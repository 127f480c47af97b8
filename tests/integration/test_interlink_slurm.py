"""decice-interlink-slurm against the lab's real SLURM, run as the lab's user ``decice``.

The lab gives every node user ``decice`` (the lab key authorized) and ``/shared``, one
host directory bind-mounted on every node: the plugin runs on node1 from a copy of the
package under /shared, its data dir is /shared/il/data, and this test talks to it over
HTTP with a bearer token, as interLink's API server would.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from decice import lab
from tests.integration.labsupport import ssh
from tests.integration.pluginsupport import (
    LAB_UID,
    Plugin,
    create,
    log,
    pod,
    running_plugin,
    state,
    terminated,
)
from tests.support import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons]

PORT = 4000
BASE = "/shared/il"  # on every node


def test_lab_user_and_shared_dir(slurm_cluster: lab.LabInfo) -> None:
    info = slurm_cluster
    assert info.user == "decice" and info.shared_mount == "/shared"
    for host in ["slurmctl", *(n.name for n in info.nodes)]:
        assert ssh(info, f"decice@{host}", "id -u; id -g; echo $HOME") == "1500\n1500\n/home/decice"
    ssh(info, "decice@node1", "echo hello > /shared/probe")
    assert ssh(info, "decice@node3", "cat /shared/probe") == "hello"
    job = ssh(
        info, "decice@node1", "sbatch --parsable -o /shared/probe.out --wrap 'id -un; hostname'"
    )
    assert job.isdigit()

    def done() -> str | None:
        out = ssh(info, "decice@node2", "cat /shared/probe.out 2>/dev/null || true")
        return out if len(out.splitlines()) == 2 else None

    user, host = wait_for("the probe job's output", done, timeout=60).splitlines()
    assert user == "decice" and host in {n.name for n in info.nodes}


@pytest.fixture(scope="module")
def plugin(slurm_cluster: lab.LabInfo) -> Iterator[Plugin]:
    with running_plugin(slurm_cluster, "il", PORT) as p:
        yield p


def test_pod_runs_as_a_job_and_succeeds(plugin: Plugin) -> None:
    spec = pod("ok", "echo start on $(hostname); sleep 3; echo done")
    jid = create(plugin, spec)
    assert plugin.active_jobs().get(jid) == f"decice-{spec['metadata']['uid']}"
    running = wait_for("Running", lambda: state(plugin, spec).get("running"), timeout=30)
    assert running["startedAt"].endswith("Z")
    done = terminated(plugin, spec)
    assert (done["exitCode"], done["reason"]) == (0, "Completed")
    first, last = log(plugin, spec).splitlines()
    assert first.startswith("start on node") and last == "done"
    assert log(plugin, spec, Tail=1) == "done\n"


def test_failing_pod_reports_its_exit_code(plugin: Plugin) -> None:
    spec = pod("fail", "echo oops >&2; exit 7")
    create(plugin, spec)
    done = terminated(plugin, spec)
    assert (done["exitCode"], done["reason"]) == (7, "Error")


def test_delete_cancels_the_running_job(plugin: Plugin) -> None:
    spec = pod("long", "sleep 300")
    jid = create(plugin, spec)
    wait_for("Running", lambda: state(plugin, spec).get("running"), timeout=30)
    code, text = plugin.call("POST", "/delete", spec)
    assert code == 200 and f"SLURM job {jid} cancelled" in text
    wait_for("the job to leave squeue", lambda: jid not in plugin.active_jobs(), timeout=10)


def test_restarted_plugin_keeps_tracking(plugin: Plugin) -> None:
    spec = pod("restart", "sleep 6; exit 3")
    create(plugin, spec)
    wait_for("Running", lambda: state(plugin, spec).get("running"), timeout=30)
    plugin.stop()
    plugin.start()
    assert "running" in state(plugin, spec) or "terminated" in state(plugin, spec)
    assert terminated(plugin, spec)["exitCode"] == 3


def test_a_pod_too_big_submits_nothing(plugin: Plugin) -> None:
    before = plugin.sh("squeue --me -h -t all -o %i | sort -n | tail -1")
    huge = pod("huge", "true", {"limits": {"cpu": "999", "memory": "1Mi"}})
    code, text = plugin.call("POST", "/create", {"pod": huge})
    assert code == 422 and "asks for 999 cpus; the largest node of partition lab has" in text
    assert plugin.sh("squeue --me -h -t all -o %i | sort -n | tail -1") == before


def test_cancel_all_cancels_what_is_left(plugin: Plugin) -> None:
    jids = {create(plugin, pod(f"left{i}", "sleep 300")) for i in range(2)}
    wait_for("both jobs in squeue", lambda: jids <= set(plugin.active_jobs()), timeout=10)
    out = plugin.cancel_all()
    assert {line.rsplit(" ", 1)[-1] for line in out.splitlines()} == jids
    assert not jids & set(plugin.active_jobs())


# Rendered and checked on the login host by the real sbatch: `--test-only -v` lists the
# options in effect ("defined options") without submitting.
SBATCH_CHECK = r"""
import json, subprocess, sys
from pathlib import Path
from decice.interlink.api import parse_create
from decice.interlink.jobscript import Defaults, Runtime, write_job_dir
from decice.interlink.podspec import parse_pod
from decice.interlink.slurm import SBATCH

out = {}
for i, body in enumerate(json.loads(Path(sys.argv[1]).read_text())):
    req = parse_create(body)
    job = Path(sys.argv[2]) / f"j{i}"
    script = write_job_dir(job, req.ref, parse_pod(req), Runtime("bare"), Defaults())
    done = subprocess.run([*SBATCH, "--test-only", "-v", str(script)], capture_output=True,
                          text=True)
    out[str(job)] = done.stdout + done.stderr
print(json.dumps(out))
"""


def _defined_options(verbose: str) -> dict[str, str]:
    """sbatch -v's "defined options" block: option -> value."""
    options, inside = {}, False
    for line in verbose.splitlines():
        text = line.removeprefix("sbatch: ").strip()
        if text.startswith("defined options"):
            inside = True
        elif text.startswith("end of defined options"):
            inside = False
        elif inside and ":" in text and not text.startswith("-"):
            name, value = text.split(":", 1)
            options[name.strip()] = value.strip()
    return options


def test_hostile_pods_set_no_sbatch_option_the_plugin_did_not(plugin: Plugin) -> None:
    """Second security round, findings 2 and 3, with the real sbatch: a pod's newline plus
    `#PBS`/`#BSUB`/`#SBATCH` in args or workingDir, and its allowed flags, leave exactly the
    options the plugin set (output and chdir its job directory), and `--ignore-pbs` is what
    keeps a `#PBS` line from counting (the same script without it takes the path)."""
    hostile = [
        ("args", ["a\n#PBS -o /tmp/pwned-o\nb", "#BSUB -cwd /tmp", "x\n#SBATCH --error=/tmp/e"]),
        ("workingDir", "/tmp\n#PBS -e /tmp/pwned-e"),
    ]
    bodies = []
    for field, value in hostile:
        body = pod(f"hostile-{field.lower()}", "true")
        body["spec"]["containers"][0][field] = value
        body["metadata"]["annotations"] = {"slurm-job.vk.io/flags": "--comm=ok"}  # --comment
        bodies.append({"pod": body, "container": [{"name": "main"}]})
    shared = plugin.info.shared_dir
    (Path(shared) / "il" / "pods.json").write_text(json.dumps(bodies))
    (Path(shared) / "il" / "check.py").write_text(SBATCH_CHECK)
    for name in ("pods.json", "check.py"):
        shutil.chown(Path(shared) / "il" / name, LAB_UID, LAB_UID)
    raw = plugin.sh(
        f"mkdir -p {BASE}/checked && "
        f"PYTHONPATH={BASE}/app python3 {BASE}/check.py {BASE}/pods.json {BASE}/checked"
    )
    results = json.loads(raw)
    assert len(results) == 2, results
    plugin_set = {"job-name", "output", "chdir", "export", "nodes", "ntasks", "cpus-per-task"}
    for job, verbose in results.items():
        options = _defined_options(verbose)
        assert options, verbose  # the block was found
        assert options["output"] == f"{job}/job.out", options
        assert options["chdir"] == job, options
        assert "error" not in options, options
        assert options.get("comment") == "ok", options
        extra = set(options) - plugin_set - {"mem", "comment", "test-only", "verbose", "parsable"}
        extra -= {"ignore-pbs", "mem-per-node", "mincpus", "export-env", "time"}
        assert not extra, (job, sorted(extra), verbose)
        assert "pwned" not in verbose and "/tmp/e" not in verbose, verbose

    # the control: a #PBS line right after the header counts unless --ignore-pbs is given
    probe = f"{BASE}/checked/pbs.sh"
    lines = "#!/bin/bash\\n#SBATCH --output=/dev/null\\n#PBS -o /tmp/pbs-out\\ntrue\\n"
    plugin.sh(f"printf '{lines}' > {probe}")
    test_only = "sbatch --test-only -v"
    without = _defined_options(plugin.sh(f"{test_only} {probe} 2>&1 || true"))
    with_it = _defined_options(plugin.sh(f"{test_only} --ignore-pbs {probe} 2>&1 || true"))
    assert without.get("output") == "/tmp/pbs-out", without
    assert with_it.get("output") == "/dev/null", with_it
