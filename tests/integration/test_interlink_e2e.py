"""interLink end to end through the CLI: a pod on the sim's virtual HPC node runs as a SLURM job.

`decice up` on a sim spec whose virtual node ``hpc-0`` is backed by an interLink endpoint
on the session's SLURM lab (login host node1, user ``decice``, data dir on the lab's shared
/shared): the addons phase installs ``decice-interlink-slurm`` there as that user, the
sim's node agent plays the virtual kubelet for hpc-0, and decice-scheduler places pods
onto it. Then: a pod with requests/limits and the node's toleration becomes an sbatch job
in squeue, goes Running -> Succeeded with the job's exit code, `kubectl logs` is the job's
output; a failing one ends Failed with its exit code; deleting a running pod cancels its
job; `decice down` with a job still running cancels it, stops the plugin and leaves nothing
on the login host or in squeue. On the way: the plugin runs as the lab user with private
files, a second `up` changes nothing, a killed plugin is started again by the next `up`;
once the user lingers, the next `up` moves the plugin into a systemd --user unit (the
supervised process stopped, a further `up` changes nothing), and once it stops lingering
the next `up` goes back to the supervised process and removes the unit;
pods without limits or larger than the partition fail with the plugin's reason and submit
no job; the plugin killed mid-job is restarted by systemd and keeps tracking the job;
`decice verify` after `down` is clean and names a planted leftover on the login host; the
token is in no output and no file but its own.
Everything real: the lab's SLURM, the plugin, the sim's kube-apiserver, decice-scheduler,
the login host's systemd user manager (the lab image has pam_systemd).
"""

from __future__ import annotations

import json
import select
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from decice import lab
from tests.integration.labsupport import require_lab_prerequisites, ssh
from tests.support import run_captured, run_decice, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons, pytest.mark.sim]

NODE = "hpc-0"
UNIT = f"decice-interlink-{NODE}.service"
USER_ENV = 'XDG_RUNTIME_DIR="/run/user/$(id -u)"'  # ssh's session may not set it
TOLERATION = {"key": "virtual-node.interlink/no-schedule", "operator": "Exists"}


def _spec(info: lab.LabInfo, data_dir: str) -> dict[str, Any]:
    return {
        "name": "interlink-e2e",
        "target": "sim",
        "sim": {
            "nodes": [
                {"name_prefix": "cpu", "count": 1, "capacity": {"cpu": "4", "memory": "8Gi"}},
                {
                    "name_prefix": "hpc",
                    "count": 1,
                    "capacity": {"cpu": "64", "memory": "64Gi", "pods": "100"},
                    "labels": {"type": "virtual-kubelet", "virtual-node.interlink/type": "slurm"},
                    "taints": [
                        {
                            "key": "virtual-node.interlink/no-schedule",
                            "value": "true",
                            "effect": "NoSchedule",
                        }
                    ],
                },
            ]
        },
        "allocation": {"ssh_config": info.ssh_config},
        "addons": {
            "volcano": {"enabled": False},
            "kubeedge": {"enabled": False},
            "sedna": {"enabled": False},
            "kubeflow": {"enabled": False},
            "interlink": {
                "endpoints": [
                    {
                        "node": NODE,
                        "login_host": info.nodes[0].name,
                        "user": info.user,
                        "data_dir": data_dir,
                        "partition": "lab",
                        "runtime": "bare",
                    }
                ]
            },
        },
    }


def _pod(name: str, script: str, *, limits: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "docker.io/library/busybox:1.36",
        "command": ["/bin/sh", "-c", script],
    }
    if limits:
        quantity = {"cpu": "1", "memory": "64Mi"}
        container["resources"] = {"requests": quantity, "limits": quantity}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "decice-scheduler",
            "restartPolicy": "Never",
            "nodeSelector": {"type": "virtual-kubelet"},
            "tolerations": [TOLERATION],
            "containers": [container],
        },
    }


class Kubectl:
    def __init__(self, state: Path, binary: str) -> None:
        self.argv = [binary, "--kubeconfig", str(state / "kubeconfig")]

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        done = run_captured([*self.argv, *args], input=stdin, timeout=60)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def follow(self, name: str) -> tuple[str, str, str]:
        """``kubectl logs -f NAME``: its first line, the pod's phase right after that line
        came, and the rest of the output (it must end by itself within 90 s)."""
        proc = subprocess.Popen(
            [*self.argv, "logs", "-f", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, "kubectl logs -f printed nothing in 60 s"
            first = proc.stdout.readline()
            phase = str(self.pod(name)["status"].get("phase"))
            rest, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        return first, phase, rest

    def pod(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self("get", "pod", name, "-o", "json"))
        return data

    def terminated(self, name: str) -> dict[str, Any] | None:
        pod = self.pod(name)
        if pod["status"].get("phase") not in ("Succeeded", "Failed"):
            return None
        return pod


def _unit_pid(info: lab.LabInfo, login: str) -> str:
    """MainPID of the plugin's user unit ("0" when it runs no process)."""
    return ssh(info, login, f"{USER_ENV} systemctl --user show -P MainPID {UNIT}")


def _plugin_pids(info: lab.LabInfo, login: str) -> list[str]:
    """The login user's decice-interlink-slurm serve processes."""
    return ssh(info, login, "pgrep -u \"$(id -u)\" -f '[d]ecice-interlink-slurm s'").split()


def _get(url: str, token: str | None) -> int:
    """The HTTP status of GET ``url``; 0 when nothing answers."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def _changed(record: dict[str, Any]) -> int:
    return sum(counts["changed"] for counts in record["stats"].values())


def _squeue(info: lab.LabInfo, user: str) -> str:
    """The lab user's jobs (id, name, state), as the login host sees them."""
    return ssh(info, f"{user}@{info.nodes[0].name}", "squeue --me -h -t all -o '%i %j %T'")


def _decice(cwd: Path, *args: str, outputs: list[str] | None = None) -> dict[str, Any]:
    done = run_decice(cwd, *args, "--json", timeout=1200)
    if outputs is not None:
        outputs.append(done.stdout + done.stderr)
    try:
        record: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(done.stdout[-3000:] + done.stderr[-3000:]) from None
    assert done.returncode == 0, json.dumps(record.get("failures"), indent=1)[-4000:]
    return record


def test_pod_on_the_virtual_node_runs_as_a_slurm_job_and_down_leaves_nothing(
    slurm_cluster: lab.LabInfo, tmp_path: Path
) -> None:
    require_lab_prerequisites()
    info, user = slurm_cluster, slurm_cluster.user
    assert user, "the lab has its non-root user"
    login = f"{user}@{info.nodes[0].name}"
    data_dir = f"{info.shared_mount}/decice-e2e-{tmp_path.name}"
    (tmp_path / "decice.yaml").write_text(yaml.safe_dump(_spec(info, data_dir)))
    up_done = lingering = False
    state = tmp_path / ".decice"
    outputs: list[str] = []
    try:
        record = _decice(tmp_path, "up", outputs=outputs)
        up_done = True
        assert record["status"] == "ok", record
        status = json.loads(run_decice(tmp_path, "status", "--json", timeout=120).stdout)
        kubectl = Kubectl(state, status["sim"]["kubectl"])

        # the endpoint file for the node agent and the token: 0600, the token nowhere else
        token_file = state / "interlink" / f"{NODE}.token"
        sim_file = state / "sim" / "interlink.json"
        for private in (token_file, sim_file):
            assert private.stat().st_mode & 0o777 == 0o600, private
        url = json.loads(sim_file.read_text())["nodes"][NODE]["url"]
        assert json.loads(sim_file.read_text()) == {
            "nodes": {NODE: {"url": url, "token_file": str(token_file)}}
        }
        token = token_file.read_text().strip()
        assert _get(f"{url}/ping", token) == 200
        assert _get(f"{url}/ping", None) == 401

        # rootless: the plugin runs as the lab user, its files are private to it, the venv
        # has no pip; a second up changes nothing; a dead plugin is started by the next up
        ps = ssh(info, login, "ps -o user=,args= -u $(id -u) | grep '[d]ecice-interlink-slurm s'")
        assert ps.split()[0] == user, ps
        home = f"/home/{user}/.local/share/decice-interlink/{NODE}"
        modes = ssh(info, login, f"stat -c '%a %U' {home} {home}/token {data_dir}")
        assert modes.splitlines() == [f"700 {user}", f"600 {user}", f"700 {user}"], modes
        ssh(info, login, f"test ! -e {home}/venv/bin/pip")
        again = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        assert _changed(again) == 0, again["stats"]
        ssh(info, login, f"kill $(cat {home}/plugin.pid)")
        wait_for("the plugin to stop", lambda: _get(f"{url}/ping", token) != 200, timeout=20)
        restarted = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        assert _changed(restarted) > 0, restarted["stats"]
        assert _get(f"{url}/ping", token) == 200

        # the user lingers now (a login host with pam_systemd): the next up moves the plugin
        # from the supervised process into a systemd --user unit, which restarts it when it
        # dies; the pods below run with the unit until the user stops lingering
        ssh(info, info.nodes[0].name, f"loginctl enable-linger {user}")
        lingering = True
        wait_for(
            "the user's systemd manager",
            lambda: (
                ssh(info, login, f"{USER_ENV} systemctl --user is-system-running", check=False)
                in ("running", "degraded")
            ),
            timeout=30,
        )
        moved = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        assert _changed(moved) > 0, moved["stats"]
        assert ssh(info, login, f"{USER_ENV} systemctl --user is-active {UNIT}") == "active"
        assert ssh(info, login, f"{USER_ENV} systemctl --user is-enabled {UNIT}") == "enabled"
        unit_mode = ssh(info, login, f"stat -c '%a %U' ~/.config/systemd/user/{UNIT}")
        assert unit_mode == f"600 {user}", unit_mode
        main_pid = _unit_pid(info, login)
        plugins = _plugin_pids(info, login)
        assert plugins == [main_pid], (plugins, main_pid)  # the old process is gone
        assert _get(f"{url}/ping", token) == 200
        steady = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        assert _changed(steady) == 0, steady["stats"]

        # the plugin backs hpc-0: its capacity is what SLURM's partition offers
        node = json.loads(kubectl("get", "node", NODE, "-o", "json"))
        assert node["status"]["capacity"]["cpu"] != "64", node["status"]["capacity"]

        ok = _pod("hpc-ok", "echo hello from $(hostname); sleep 8; echo done")
        fail = _pod("hpc-fail", "echo failing; exit 3")
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": [ok, fail]}),
        )
        wait_for(
            "both pods bound to the virtual node",
            lambda: all(
                kubectl.pod(n)["spec"].get("nodeName") == NODE for n in ("hpc-ok", "hpc-fail")
            ),
            timeout=60,
        )
        wait_for("a job in squeue", lambda: "decice-" in _squeue(info, user), timeout=60)
        # kubectl logs -f streams: the first line comes while the job still runs, the rest
        # when it is written, and the stream ends by itself once the pod has ended
        wait_for(
            "hpc-ok Running",
            lambda: kubectl.pod("hpc-ok")["status"].get("phase") == "Running",
            timeout=120,
        )
        first, phase_then, rest = kubectl.follow("hpc-ok")
        assert first.startswith("hello from node"), (first, rest)
        assert phase_then == "Running", "the job ended before the first line was read"
        assert rest.rstrip().endswith("done"), rest
        done_ok = wait_for("hpc-ok terminal", lambda: kubectl.terminated("hpc-ok"), timeout=120)
        assert done_ok["status"]["phase"] == "Succeeded", done_ok["status"]
        ended = done_ok["status"]["containerStatuses"][0]["state"]["terminated"]
        assert ended["exitCode"] == 0, ended
        logs = kubectl("logs", "hpc-ok")
        assert "hello from node" in logs and logs.rstrip().endswith("done"), logs
        done_fail = wait_for(
            "hpc-fail terminal", lambda: kubectl.terminated("hpc-fail"), timeout=120
        )
        assert done_fail["status"]["phase"] == "Failed", done_fail["status"]
        term = done_fail["status"]["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == 3, term

        # pods the plugin cannot run fail with its reason and submit no job: one without
        # limits (placed by decice-scheduler) and one asking more cpus than any node of the
        # partition has (bound directly: decice-scheduler, like kube-scheduler, keeps a pod
        # larger than the node's capacity Pending)
        huge = _pod("hpc-huge", "true")
        huge["spec"]["nodeName"] = NODE
        huge["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "999", "memory": "64Mi"},
            "limits": {"cpu": "999", "memory": "64Mi"},
        }
        as_root = _pod("hpc-asroot", "true")
        as_root["spec"]["securityContext"] = {"runAsUser": 0}  # SLURM: --uid is root's alone
        refused = [as_root, huge]
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": refused}),
        )
        for name, why in (("hpc-asroot", "runAsUser 0: jobs run as"), ("hpc-huge", "asks for 999")):
            failed = wait_for(
                f"{name} Failed",
                lambda name=name: (
                    (pod := kubectl.pod(name))["status"].get("phase") == "Failed" and pod
                ),
                timeout=60,
            )
            assert failed["spec"]["nodeName"] == NODE, failed["spec"]
            assert failed["status"]["reason"] == "Unrunnable", failed["status"]
            assert why in failed["status"]["message"], failed["status"]
            jobs = ssh(info, login, "squeue --me -h -t all -o %j")
            assert failed["metadata"]["uid"] not in jobs, jobs
        kubectl("delete", "pod", "hpc-asroot", "hpc-huge", "--wait=true", "--timeout=60s")

        # deleting a running pod cancels its job, also after the plugin was restarted
        # mid-job: systemd restarts the killed plugin, which finds the job again in its
        # store; the pod stays Running meanwhile
        kubectl("apply", "-f", "-", stdin=json.dumps(_pod("hpc-long", "sleep 600")))
        running = wait_for(
            "hpc-long Running",
            lambda: kubectl.pod("hpc-long")["status"].get("phase") == "Running",
            timeout=120,
        )
        assert running
        main_pid = _unit_pid(info, login)
        ssh(info, login, f"kill -KILL {main_pid}")
        wait_for(
            "systemd to restart the killed plugin",
            lambda: (
                _unit_pid(info, login) not in ("0", main_pid) and _get(f"{url}/ping", token) == 200
            ),
            timeout=30,
        )
        for _ in range(3):  # the node agent polls /status every second
            time.sleep(1)
            long_pod = kubectl.pod("hpc-long")
            assert long_pod["status"].get("phase") == "Running", long_pod["status"]
        assert "running" in long_pod["status"]["containerStatuses"][0]["state"]
        jobs_before = {
            line.split()[0]
            for line in _squeue(info, user).splitlines()
            if line.split()[2] in ("RUNNING", "PENDING")
        }
        assert jobs_before, _squeue(info, user)
        kubectl("delete", "pod", "hpc-long", "--wait=true", "--timeout=60s")
        wait_for(
            "the deleted pod's job gone from squeue",
            lambda: (
                not any(
                    line.split()[2] in ("RUNNING", "PENDING")
                    for line in _squeue(info, user).splitlines()
                )
            ),
            timeout=30,
        )

        # down with a job still running: cancelled, plugin stopped, nothing left
        kubectl("apply", "-f", "-", stdin=json.dumps(_pod("hpc-left", "sleep 600")))
        wait_for(
            "hpc-left Running",
            lambda: kubectl.pod("hpc-left")["status"].get("phase") == "Running",
            timeout=120,
        )
        kubectl("delete", "pod", "hpc-ok", "hpc-fail", "--wait=true", "--timeout=60s")

        # the user stops lingering: the next up goes back to the supervised process and
        # takes the unit away (the ssh session's own user manager would start it again);
        # the job keeps running and is tracked by the new process
        ssh(info, info.nodes[0].name, f"loginctl disable-linger {user}")
        lingering = False
        back = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        assert _changed(back) > 0, back["stats"]
        ssh(info, login, f"test ! -e ~/.config/systemd/user/{UNIT}")
        pid = ssh(info, login, f"cat {home}/plugin.pid")
        plugins = _plugin_pids(info, login)
        assert plugins == [pid], (plugins, pid)
        assert _get(f"{url}/ping", token) == 200
        assert kubectl.pod("hpc-left")["status"].get("phase") == "Running"

        down = _decice(tmp_path, "down", outputs=outputs)
        assert down["status"] == "ok", down
        queue = _squeue(info, user)
        assert not any(line.split()[2] in ("RUNNING", "PENDING") for line in queue.splitlines()), (
            queue
        )
        left = ssh(
            info,
            login,
            "pgrep -u \"$(id -u)\" -f '[d]ecice-interlink-slurm' || true; "
            f"ls -A ~/.local/share/decice-interlink {data_dir} 2>/dev/null || true",
        )
        assert left == "", left
        unit_left = ssh(
            info,
            login,
            f"ls -A ~/.config/systemd/user 2>/dev/null; "
            f"{USER_ENV} systemctl --user is-active {UNIT} || true",
        )
        assert unit_left.split() == ["inactive"], unit_left  # no unit file, no running unit

        # `decice verify` checks the login host too: clean now; a planted install directory
        # of the plugin is named (exit 1), and once it is gone verify is clean again
        clean = run_decice(tmp_path, "verify", "--only", "cluster", "--json", timeout=300)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        root = home.rsplit("/", 1)[0]
        root_there = ssh(info, login, f"test -d {root} && echo yes || true") == "yes"
        ssh(info, login, f"mkdir -p {home}")
        try:
            dirty = run_decice(tmp_path, "verify", "--only", "cluster", "--json", timeout=300)
            assert dirty.returncode == 1, dirty.stdout + dirty.stderr
            failures = json.loads(dirty.stdout)["failures"]
            shown = " ".join(f["message"] for f in failures)
            assert "not clean" in shown and home in shown, failures
        finally:
            ssh(info, login, f"rm -rf {home}" + ("" if root_there else f" && rmdir {root}"))
        again = run_decice(tmp_path, "verify", "--only", "cluster", "--json", timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert not sim_file.exists() and not token_file.parent.exists()
        assert _get(f"{url}/ping", token) == 0
        assert not any(token in text for text in outputs)
        for path in state.rglob("*"):  # records, runner artifacts, logs
            if path.is_file() and not path.is_symlink():
                assert token.encode() not in path.read_bytes(), path
    finally:
        if up_done:
            run_decice(tmp_path, "down", timeout=900)
        if lingering:  # the session's lab as it was
            ssh(info, info.nodes[0].name, f"loginctl disable-linger {user}", check=False)
        run_decice(tmp_path, "reset", "--yes", timeout=900)
        subprocess.run(
            [
                "ssh",
                "-F",
                info.ssh_config,
                "-o",
                "BatchMode=yes",
                login,
                f"scancel --me --quiet; rm -rf {data_dir}",
            ],
            capture_output=True,
            timeout=60,
            check=False,
        )
