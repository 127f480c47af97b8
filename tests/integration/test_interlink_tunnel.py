"""decice-interlink-slurm's ssh tunnel (``serve --tunnel``) between two real lab nodes.

On a real cluster the interLink API in the virtual node's pod calls the plugin at
``http://localhost:3000``, which the chart's ssh bastion in that pod forwards to the
plugin's unix socket on the login host. The bastion's image cannot run here (no
registry); lab node2's own sshd plays it, with the key authorized the way decice
authorizes it on the bastion (``restrict,port-forwarding,permitlisten=...``). The plugin
runs on node1 as the lab user, as on a login host. Asserted: a ping on node2's loopback
port reaches the plugin; the key opens no other port; a dropped tunnel comes back; the
plugin's ssh ends with the plugin (SIGTERM, and SIGKILL); an unknown host key is
refused without a prompt, and the plugin keeps trying.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from decice import lab
from tests.integration.labsupport import ssh, stage_plugin
from tests.support import tunnel_key_options, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons]

BASE = "/shared/ilt"  # on every node
LAB_UID = 1500
PORT = 3000
# matches the tunnel ssh's argv, not the shell that runs pgrep with this pattern
KEY_ARG = f"IdentityFile=[{BASE[0]}]{BASE[1:]}/key"
KEY_OPTIONS = tunnel_key_options(PORT)  # exactly what the role authorizes on the bastion
PING = (
    "python3 -c 'import urllib.request; "
    f'print(urllib.request.urlopen("http://127.0.0.1:{PORT}/ping", timeout=5).read().decode())'
    "' 2>/dev/null || true"
)


@dataclass
class Tunnelled:
    info: lab.LabInfo

    def on(self, host: str, command: str, *, check: bool = True) -> str:
        return ssh(self.info, f"decice@{host}", command, check=check)

    def start(self, known_hosts: str = f"{BASE}/known_hosts") -> None:
        self.on(
            "node1",
            f"cd {BASE} || exit 1; PYTHONPATH={BASE}/app setsid nohup "
            "python3 -m decice.interlink serve "
            f"--data-dir {BASE}/data --pidfile {BASE}/plugin.pid --tunnel decice@node2 "
            f"--tunnel-key {BASE}/key --tunnel-known-hosts {known_hosts} "
            f"--tunnel-remote-port {PORT} >>{BASE}/plugin.log 2>&1 </dev/null &",
        )
        wait_for("the plugin's pidfile", lambda: self.plugin_pid() or None, timeout=20, every=0.2)

    def plugin_pid(self) -> str:
        return self.on("node1", f"cat {BASE}/plugin.pid 2>/dev/null || true")

    def ssh_pids(self) -> list[str]:
        """The tunnel's ssh processes on node1 (their argv names the key)."""
        out = self.on("node1", f"pgrep -u decice -f '{KEY_ARG}' || true")
        return out.split()

    def ping(self) -> dict | None:
        out = self.on("node2", PING)
        return json.loads(out) if out else None

    def log(self) -> str:
        return self.on("node1", f"cat {BASE}/plugin.log")


@pytest.fixture(scope="module")
def tunnelled(
    slurm_cluster: lab.LabInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tunnelled]:
    info = slurm_cluster
    root = stage_plugin(info, "ilt")
    keys = tmp_path_factory.mktemp("tunnel-key")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "decice-tunnel", "-f", keys / "key"],
        check=True,
    )
    shutil.copy2(keys / "key", root / "key")
    (root / "key").chmod(0o600)
    shutil.copy2(info.known_hosts, root / "known_hosts")
    (root / "empty_known_hosts").write_text("")
    for path in [root, *root.rglob("*")]:
        shutil.chown(path, LAB_UID, LAB_UID)
    t = Tunnelled(info)
    line = f"{KEY_OPTIONS} {(keys / 'key.pub').read_text().strip()}"
    t.on("node2", f"cp ~/.ssh/authorized_keys {BASE}/authorized_keys.saved")
    t.on("node2", f"echo '{line}' >> ~/.ssh/authorized_keys")
    try:
        yield t
    finally:
        pid = t.plugin_pid()
        if pid:
            t.on("node1", f"kill {pid} || true")
        t.on("node1", f"pkill -u decice -f '{KEY_ARG}' || true")
        t.on("node2", f"cp {BASE}/authorized_keys.saved ~/.ssh/authorized_keys")
        shutil.rmtree(root, ignore_errors=True)


def test_ping_through_the_tunnel_and_nothing_else(tunnelled: Tunnelled) -> None:
    t = tunnelled
    t.start()
    answer = wait_for("the plugin through the tunnel", t.ping, timeout=30, every=0.5)
    assert answer["status"] == "ok" and {"cpu", "memory", "pods"} <= set(answer["resources"])
    assert len(t.ssh_pids()) == 1
    # the key allows this one forward: another port is refused (ExitOnForwardFailure)
    other = t.on(
        "node1",
        f"ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes "
        f"-o UserKnownHostsFile={BASE}/known_hosts -o IdentitiesOnly=yes -i {BASE}/key "
        f"-o ExitOnForwardFailure=yes -N -R 127.0.0.1:{PORT + 1}:{BASE}/data/plugin.sock "
        "decice@node2; echo exit=$?",
        check=False,
    )
    assert other.endswith("exit=255"), other
    ssh_key = (
        f"ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes "
        f"-o UserKnownHostsFile={BASE}/known_hosts -o IdentitiesOnly=yes -i {BASE}/key"
    )
    # no forward into the bastion's network: -L to node1's sshd is refused
    local = t.on(
        "node1",
        f"{ssh_key} -o ExitOnForwardFailure=yes -N -f -L 127.0.0.1:{PORT + 2}:node1:22 "
        f"decice@node2; sleep 1; timeout 5 head -c 4 </dev/tcp/127.0.0.1/{PORT + 2}; echo; "
        f"pkill -u decice -f '[-]L 127.0.0.1:{PORT + 2}'; true",
        check=False,
    )
    assert "SSH-" not in local, local
    assert _banner_through_unrestricted_forward(t.info) == b"SSH-"  # the control
    # no command, no shell: the forced command runs instead and fails
    command = t.on("node1", f"{ssh_key} decice@node2 echo reached; echo exit=$?", check=False)
    assert "reached" not in command and command.endswith("exit=1"), command


def _banner_through_unrestricted_forward(info: lab.LabInfo) -> bytes:
    """The same -L through node2's sshd with the lab's own (unrestricted) key, from the
    controller: the first bytes node1's sshd sends (b"SSH-" when forwarding works)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    forward = subprocess.Popen(
        [
            "ssh",
            "-F",
            info.ssh_config,
            "-o",
            "BatchMode=yes",
            "-o",
            "ExitOnForwardFailure=yes",
            "-N",
            "-L",
            f"127.0.0.1:{port}:node1:22",
            "decice@node2",
        ]
    )
    try:

        def banner() -> bytes | None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                    return conn.recv(4)
            except OSError:
                return None

        return wait_for("the control forward", banner, timeout=20, every=0.3)
    finally:
        forward.terminate()
        forward.wait(10)


def test_a_dropped_tunnel_comes_back(tunnelled: Tunnelled) -> None:
    t = tunnelled
    (before,) = t.ssh_pids()
    t.on("node1", f"kill {before}")
    wait_for("a new tunnel", lambda: t.ssh_pids() not in ([], [before]), timeout=20)
    assert wait_for("the plugin through the new tunnel", t.ping, timeout=30, every=0.5)
    assert "tunnel to decice@node2:22" in t.log() and "ended (ssh exit" in t.log()


def test_the_tunnel_ends_with_the_plugin(tunnelled: Tunnelled) -> None:
    t = tunnelled
    t.on("node1", f"kill {t.plugin_pid()}")  # SIGTERM: the plugin stops its ssh
    wait_for("no tunnel ssh after SIGTERM", lambda: t.ssh_pids() == [], timeout=15)
    assert t.ping() is None
    t.start()
    assert wait_for("the plugin through the tunnel", t.ping, timeout=30, every=0.5)
    t.on("node1", f"kill -9 {t.plugin_pid()}")  # SIGKILL: the kernel ends its ssh
    wait_for("no tunnel ssh after SIGKILL", lambda: t.ssh_pids() == [], timeout=15)
    t.on("node1", f"rm -f {BASE}/plugin.pid")


def test_an_unknown_host_key_is_refused_without_a_prompt(tunnelled: Tunnelled) -> None:
    t = tunnelled
    t.on("node1", f": > {BASE}/plugin.log")
    t.start(known_hosts=f"{BASE}/empty_known_hosts")
    wait_for(
        "ssh's refusal in the plugin's log",
        lambda: "Host key verification failed" in t.log(),
        timeout=30,
    )
    assert t.ping() is None
    wait_for("a second try", lambda: t.log().count("Host key verification failed") >= 2, timeout=20)
    t.on("node1", f"kill {t.plugin_pid()}")
    wait_for("no tunnel ssh left", lambda: t.ssh_pids() == [], timeout=15)
