"""decice-interlink-slurm run on the SLURM lab's node1 as user ``decice``, called over
HTTP with a bearer token as decice's own clients do (interLink's way is
interlink_conformance.py): a staged copy of the package under ``/shared/<name>``, its
data dir ``/shared/<name>/data``; the pod helpers of the plugin tests."""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from decice import lab
from tests.integration.labsupport import ssh, stage_plugin
from tests.support import wait_for

LAB_UID = 1500


@dataclass
class Plugin:
    info: lab.LabInfo
    host: str
    token: str
    base: str  # /shared/<name> on every node
    port: int = 4000
    flags: str = ""  # serve's further flags

    @property
    def data(self) -> str:
        return f"{self.base}/data"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        resp = conn.getresponse()
        raw = resp.read().decode()
        conn.close()
        json_body = resp.getheader("Content-Type", "").startswith("application/json")
        return resp.status, json.loads(raw) if json_body else raw

    def sh(self, command: str) -> str:
        return ssh(self.info, "decice@node1", command)

    def start(self) -> None:
        self.sh(
            f"cd {self.base} || exit 1; PYTHONPATH={self.base}/app setsid nohup "
            "python3 -m decice.interlink serve "
            f"--data-dir {self.data} --listen tcp:0.0.0.0:{self.port} "
            f"--token-file {self.base}/token --pidfile {self.base}/plugin.pid {self.flags} "
            f">>{self.base}/plugin.log 2>&1 </dev/null &"
        )
        wait_for("the plugin to answer", self._answers, timeout=20, every=0.3)

    def _answers(self) -> bool:
        try:
            return self.call("GET", "/ping")[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        pidfile = f"{self.base}/plugin.pid"
        self.sh(f"[ -e {pidfile} ] && kill $(cat {pidfile}) || true")
        wait_for(
            "the plugin to exit",
            lambda: self.sh(f"[ -e {pidfile} ] && echo up || echo down") == "down",
            timeout=15,
        )

    def cancel_all(self) -> str:
        return self.sh(
            f"PYTHONPATH={self.base}/app python3 -m decice.interlink cancel-all "
            f"--data-dir {self.data}"
        )

    def active_jobs(self) -> dict[str, str]:
        """squeue's pending/running jobs of user decice: job id -> name."""
        out = self.sh("squeue --me -h -o '%i %j'")
        return dict(line.split() for line in out.splitlines() if line.strip())


@contextlib.contextmanager
def running_plugin(info: lab.LabInfo, name: str, port: int, flags: str = "") -> Iterator[Plugin]:
    """A plugin staged under /shared/<name>, serving on node1's ``port``; at the end
    stopped, its jobs cancelled, its tree removed."""
    root = stage_plugin(info, name)
    for path in [root, *root.rglob("*")]:
        shutil.chown(path, LAB_UID, LAB_UID)
    token = uuid.uuid4().hex
    p = Plugin(info, info.nodes[0].ip, token, f"/shared/{name}", port, flags)
    p.sh(f"umask 077 && printf '%s\\n' {token} > {p.base}/token")
    p.start()
    try:
        yield p
    finally:
        p.stop()
        p.cancel_all()
        shutil.rmtree(root, ignore_errors=True)


def pod(name: str, script: str, resources: dict | None = None) -> dict:
    res = {"limits": {"cpu": "1", "memory": "32Mi"}} if resources is None else resources
    container = {"name": "main", "image": "busybox", "command": ["sh", "-c", script]}
    container["resources"] = res  # type: ignore[assignment]
    meta = {"name": name, "namespace": "hpc", "uid": str(uuid.uuid4())}
    return {"metadata": meta, "spec": {"containers": [container]}}


def create(p: Plugin, spec: dict) -> str:
    code, body = p.call("POST", "/create", {"pod": spec, "container": [{"name": "main"}]})
    assert code == 200, body
    assert body["PodUID"] == spec["metadata"]["uid"]
    return str(body["PodJID"])


def state(p: Plugin, spec: dict) -> dict:
    code, body = p.call("GET", "/status", [spec])
    assert code == 200, body
    return body[0]["containers"][0]["state"] if body else {}


def terminated(p: Plugin, spec: dict, timeout: float = 60) -> dict:
    return wait_for("the pod to terminate", lambda: state(p, spec).get("terminated"), timeout)


def log(p: Plugin, spec: dict, **opts: Any) -> str:
    meta = spec["metadata"]
    body = {
        "Namespace": meta["namespace"],
        "PodUID": meta["uid"],
        "PodName": meta["name"],
        "ContainerName": "main",
        "Opts": opts,
    }
    code, text = p.call("GET", "/getLogs", body)
    assert code == 200, text
    return str(text)
