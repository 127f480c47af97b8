"""Node containers: start them, give them the lab's SSH key, wait until they are usable."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from decice.lab.errors import LabError
from decice.lab.host import ensure_commands, run
from decice.lab.model import LabNode
from decice.lab.podman import Podman

log = logging.getLogger("decice.lab")

BOOT_TIMEOUT = 180.0
SSH_TIMEOUT = 60.0
HOST_KEY = "ssh_host_ed25519_key"
NODE_SSH_DIR = "/etc/ssh"


def make_ssh_key(path: Path, comment: str) -> str:
    """A fresh ed25519 key pair at ``path`` (private key 0600); returns the public key."""
    ensure_commands({"ssh-keygen": "openssh-client", "ssh": "openssh-client"}, "lab SSH access")
    public = path.with_suffix(".pub")
    for p in (path, public):
        p.unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    path.chmod(0o600)
    return public.read_text().strip()


def make_host_key(directory: Path, node: LabNode) -> str:
    """The SSH host key of ``node``, made here (``<directory>/<node>/ssh_host_ed25519_key``,
    0600 in 0700 directories) and bind-mounted into it by :func:`start_container`;
    returns the public key for the lab's known_hosts."""
    for path in (directory, directory / node.name):
        path.mkdir(mode=0o700, exist_ok=True)
        path.chmod(0o700)
    return make_ssh_key(host_key_path(directory, node), f"root@{node.name}")


def host_key_path(directory: Path, node: LabNode) -> Path:
    return directory / node.name / HOST_KEY


def host_key_mounts(directory: Path, node: LabNode) -> list[str]:
    """Read-only bind mounts of ``node``'s host key pair: its sshd never makes its own."""
    private = host_key_path(directory, node)
    return [
        f"{private}:{NODE_SSH_DIR}/{HOST_KEY}:ro",
        f"{private.with_suffix('.pub')}:{NODE_SSH_DIR}/{HOST_KEY}.pub:ro",
    ]


def start_container(
    podman: Podman,
    node: LabNode,
    *,
    image: str,
    network: str,
    labels: Sequence[str],
    hosts: Sequence[LabNode],
    mounts: Sequence[str] = (),
    volumes: Sequence[str] = (),
    init_args: Sequence[str] = (),
) -> None:
    """``podman run`` one systemd node with a fixed IP and every lab name in /etc/hosts."""
    argv = [
        "run",
        "-d",
        "--systemd=always",
        "--privileged",
        "--network",
        network,
        "--ip",
        node.ip,
        "--hostname",
        node.name,
        "--name",
        node.container,
    ]
    for label in labels:
        argv += ["--label", label]
    for other in hosts:
        if other.name != node.name:
            argv += ["--add-host", f"{other.name}:{other.ip}"]
    for mount in mounts:
        argv += ["--volume", mount]
    for volume in volumes:  # anonymous volumes, removed with the container
        argv += ["--volume", volume]
    podman(*argv, image, "/sbin/init", *init_args)


def install_authorized_key(podman: Podman, container: str, public_key: str) -> None:
    script = (
        "install -d -m 700 /root/.ssh && cat > /root/.ssh/authorized_keys"
        " && chmod 600 /root/.ssh/authorized_keys"
    )
    podman.exec(container, ["sh", "-c", script], input_bytes=public_key.encode())


def wait_booted(podman: Podman, container: str, timeout: float = BOOT_TIMEOUT) -> None:
    """Wait for systemd to finish booting; a degraded boot is an error naming the units.

    Right after start, systemd's bus may not exist yet ("Failed to connect to bus"):
    that is retried until the deadline, as is a container that is not running yet.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = max(1, int(deadline - time.monotonic()))
        proc = podman(
            "exec",
            container,
            "timeout",
            str(left),
            "systemctl",
            "is-system-running",
            "--wait",
            check=False,
            timeout=left + 30,
        )
        state = proc.stdout.strip()
        if state == "running":
            return
        early = not state and "Failed to connect to bus" in proc.stderr
        if not early or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    failed = podman.exec(
        container, ["systemctl", "list-units", "--failed", "--plain", "--no-legend"]
    ).stdout.strip()
    raise LabError(
        f"{container} booted to '{state or proc.stderr.strip()}' instead of 'running'; "
        f"failed units: {failed or 'none'}; inspect with `podman exec {container} journalctl -b`"
    )


def wait_ssh(ssh_config: Path, host: str, timeout: float = SSH_TIMEOUT) -> None:
    """Retry ``ssh host true`` until it works."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        proc = run(
            [
                "ssh",
                "-F",
                str(ssh_config),
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=5",
                host,
                "true",
            ],
            check=False,
            timeout=30,
        )
        if proc.returncode == 0:
            return
        last = proc.stderr.strip()
        time.sleep(0.5)
    raise LabError(f"SSH to {host} did not work within {timeout:.0f} s: {last}")


def wait_all(podman: Podman, ssh_config: Path, nodes: Sequence[LabNode]) -> None:
    """Boot + SSH probe of every node, in parallel."""

    def one(node: LabNode) -> None:
        wait_booted(podman, node.container)
        wait_ssh(ssh_config, node.name)

    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        for future in [pool.submit(one, n) for n in nodes]:
            future.result()
