"""The edge join contract on lab nodes: decice.hybrid.edge through the real up/down playbooks.

node1 is the control plane (cloudcore's address); node2 is the edge host. A stand-in
``keadm`` - served from a test mirror as ``keadm/keadm-v1.23.1-linux-<arch>.tar.gz`` with
a SHA256SUMS line, so the role's resolve, checksum and install run for real - records its
argv and environment on node2, starts a transient ``edgecore`` unit on ``join`` and stops
it on ``reset edge``. It also prints the token it got, as a keadm that logged it would.
The join token is a real Secret (``tokensecret``, key ``tokendata``) on the session's sim
control plane, read by the role with k8s_info; cloudcore itself is not installed
(``kubeedge_enabled: false``), its ports on node1 are plain listeners.

Runs go through decice's runner with a run record (decice.tracking), as `decice up` does.
The token must appear in none of: the command lines of Ansible's processes (sampled while
they run), the runner's artifacts (events, stdout, command), the run records. keadm's own
argv holds it - that is where keadm v1.23 takes it - and that is asserted too.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import platform
import secrets
import tarfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from decice import addons, lab, records
from decice.mirror import sha256_file
from decice.records import PhaseRecord, RunRecord, RunStore
from decice.runner import HostResult, PlaybookRun, run_playbook
from decice.sim.controlplane.loopback import ControlPlaneInfo
from decice.tracking import PhaseTracker, conclude
from tests.integration.labsupport import ssh
from tests.procwatch import ProcWatch
from tests.support import BIN, REPO, run_captured

pytestmark = pytest.mark.lab

EDGE, CLOUD = "node2", "node1"
NAMESPACE = "decice-edge-join-test"  # not kubeedge: the sim's add-on tests own that one
VERSION = "v1.23.1"
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
ARCHIVE = f"keadm-{VERSION}-linux-{ARCH}.tar.gz"
MEMBER = f"keadm-{VERSION}-linux-{ARCH}/keadm/keadm"
COLLECTION = REPO / "ansible_collections" / "decice" / "hybrid"
CALLS = "/var/log/decice-keadm-standin.log"
LABELS = {"decice.io/test": "edge", "zone": "lab"}
PORTS = (10000, 10002, 10004)
# no CRI socket on the lab nodes: keadm's default endpoint
RUNTIME = "unix:///run/containerd/containerd.sock"
CONTAINERD = "/etc/containerd/config.toml"

STANDIN = f"""#!/bin/bash
# stand-in keadm: records argv and environment (base64, shell builtins: no process gets
# the arguments), fakes edgecore
{{ printf 'argv'; for a in "$@"; do printf ' %s' "$(printf '%s' "$a" | base64 -w0)"; done
   printf ' env %s\\n' "$(env -0 | base64 -w0)"; }} >> {CALLS}
case "$1 $2" in
  "join "*)
    for arg in "$@"; do
      case "$arg" in --token=*) echo "stand-in keadm: got ${{arg#--token=}}";; esac
    done
    mkdir -p /etc/kubeedge/config && echo stand-in > /etc/kubeedge/config/edgecore.yaml
    systemd-run --quiet --unit=edgecore sleep infinity ;;
  "reset edge")
    systemctl stop edgecore 2>/dev/null; rm -rf /etc/kubeedge ;;
esac
"""


def _archive(dest: Path) -> str:
    """The stand-in packed as keadm's release archive; returns its sha256."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = STANDIN.encode()
        info = tarfile.TarInfo(MEMBER)
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(buf.getvalue())
    return sha256_file(dest)


def _mirror(root: Path, *, listed: bool) -> Path:
    digest = _archive(root / "keadm" / ARCHIVE)
    sums = f"{digest}  {ARCHIVE}\n" if listed else f"{'0' * 64}  some-other-file.tar.gz\n"
    (root / "keadm" / "SHA256SUMS").write_text(sums)
    return root


def _inventory(info: lab.LabInfo, path: Path) -> Path:
    data = yaml.safe_load(Path(info.inventory).read_text())
    root = data["all"]
    root["hosts"]["localhost"] = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    }
    root["hosts"][EDGE]["node_labels"] = LABELS
    root["children"] = {
        "kube_control_plane": {"hosts": {CLOUD: None}},
        "etcd": {"hosts": {CLOUD: None}},
        "kube_node": {"hosts": {CLOUD: None}},
        "k8s_cluster": {"children": {"kube_control_plane": None, "kube_node": None}},
        "decice_edge": {"hosts": {EDGE: None}},
        "decice_hpc": {"hosts": {}},
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    path.chmod(0o600)
    return path


def _listen(info: lab.LabInfo, ports: tuple[int, ...]) -> None:
    for port in ports:
        unit = f"decice-test-cc{port}"
        ssh(info, CLOUD, f"systemctl is-active --quiet {unit} || systemd-run --quiet "
            f"--unit={unit} python3 -m http.server {port} --bind 0.0.0.0")  # fmt: skip
    wanted = " ".join(f":{p} " for p in ports)
    ssh(
        info,
        CLOUD,
        f'for i in $(seq 50); do ok=1; for p in {wanted}; do ss -Hltn | grep -q "$p" || ok=0;'
        " done; [ $ok = 1 ] && exit 0; sleep 0.2; done; exit 1",
    )


def _stop_listeners(info: lab.LabInfo) -> None:
    units = " ".join(f"decice-test-cc{p}" for p in PORTS)
    ssh(info, CLOUD, f"systemctl stop {units} 2>/dev/null; systemctl reset-failed; true")


def _calls(info: lab.LabInfo) -> list[dict[str, Any]]:
    """The stand-in's calls: argv and environment of each."""
    calls = []
    for line in ssh(info, EDGE, f"cat {CALLS} 2>/dev/null || true").splitlines():
        words = line.split()
        if not words or words[0] != "argv":
            continue
        cut = words.index("env")
        argv = [base64.b64decode(w).decode() for w in words[1:cut]]
        raw = base64.b64decode(words[cut + 1]).decode() if len(words) > cut + 1 else ""
        env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
        calls.append({"argv": argv, "env": env})
    return calls


@pytest.fixture(scope="module")
def env(
    lab_nodes: lab.LabInfo,
    sim_control_plane: ControlPlaneInfo,
    sim_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("edge-join")
    token = f"decicetokedge{secrets.token_hex(12)}.{secrets.token_hex(16)}"
    core = client.CoreV1Api(sim_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    core.create_namespaced_secret(
        NAMESPACE,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="tokensecret"),
            data={"tokendata": base64.b64encode(token.encode()).decode()},
        ),
    )
    # the runtime's cgroup driver is the one keadm must be given: containerd set to systemd
    planted = ssh(lab_nodes, EDGE, f"test -e {CONTAINERD} && echo kept || echo planted")
    if planted == "planted":
        ssh(lab_nodes, EDGE, f"mkdir -p /etc/containerd && printf '%s\\n' "
            "'[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]' "
            f"'  SystemdCgroup = true' > {CONTAINERD}")  # fmt: skip
    try:
        yield {
            "info": lab_nodes,
            "tmp": tmp,
            "token": token,
            "state": tmp / "state",
            "kubeconfig": str(sim_control_plane.kubeconfig),
            "inventory": _inventory(lab_nodes, tmp / "inventory.yml"),
            "cloud_ip": next(n.ip for n in lab_nodes.nodes if n.name == CLOUD),
        }
    finally:
        _stop_listeners(lab_nodes)
        if planted == "planted":
            ssh(lab_nodes, EDGE, f"rm -f {CONTAINERD}; rmdir /etc/containerd", check=False)
        ssh(
            lab_nodes,
            EDGE,
            "systemctl stop edgecore 2>/dev/null; systemctl reset-failed;"
            f" rm -rf /etc/kubeedge /usr/local/bin/keadm /run/decice-edge {CALLS}",
            check=False,
        )
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(NAMESPACE)


def _run(env: Mapping[str, Any], command: str, mirror: Path) -> tuple[RunRecord, str, ProcWatch]:
    """``command``.yml's addons phase through decice's runner, recorded like `decice up`."""
    state: Path = env["state"]
    state.mkdir(mode=0o700, exist_ok=True)
    store = RunStore(state)
    record = RunRecord(
        id=records.new_run_id(), command=command, argv=[command], pid=os.getpid(),
        host="test", spec="test_edge_join", spec_sha256="", target="lab",
        phases=[PhaseRecord(name="addons")],
    )  # fmt: skip
    run_dir = store.create(record)
    extravars = {
        "decice_state_dir": str(state),
        "decice_kubeconfig": env["kubeconfig"],
        "decice_mirror": str(mirror),
        "decice_spec": {
            "target": "lab",
            "addons": {name: {"enabled": name == "kubeedge"} for name in addons.names()},
        },
        # cloudcore is not installed here: the Secret and node1's listeners stand in for it
        "kubeedge_enabled": False,
        "edge_namespace": NAMESPACE,
        "preflight_cloudcore_timeout": 2,
    }
    run = PlaybookRun(
        playbook=COLLECTION / "playbooks" / f"{command}.yml",
        inventory=env["inventory"],
        private_data_dir=run_dir / "ansible",
        extravars=extravars,
        tags=("addons",),
        verbosity=1,  # every result printed: a token that escaped no_log would show
        ident="addons",
    )  # fmt: skip
    tracker = PhaseTracker(record, ["addons"])
    messages: list[str] = []
    with ProcWatch(os.getpid()) as watch:
        for event in run_playbook(run):
            tracker.apply(event)
            if isinstance(event, HostResult) and event.message:
                messages.append(f"{event.host} {event.task}: {event.message}")
    conclude(record)
    store.save(record)
    stdout = "\n".join(p.read_text() for p in (run_dir / "ansible").rglob("stdout"))
    return record, stdout + "\n".join(messages), watch


def _no_token(env: Mapping[str, Any], out: str, watch: ProcWatch) -> None:
    token: str = env["token"]
    assert token not in out
    ansible_side = [cmd for cmd in watch.members.values() if token in cmd]
    assert ansible_side == [], "the token was on a command line of Ansible's processes"
    # the only process ever seen with it is keadm itself, on the edge host (keadm v1.23
    # takes the token as --token only)
    elsewhere = [c for c in watch.cmdlines if token in c and "/usr/local/bin/keadm join" not in c]
    assert elsewhere == []
    hits = [
        str(path)
        for path in env["state"].rglob("*")
        if path.is_file() and not path.is_symlink() and token.encode() in path.read_bytes()
    ]
    assert hits == [], "the token is in the state dir (records, artifacts)"
    assert list(env["state"].rglob("env/extravars")) == []


def test_closed_cloudcore_port_is_named_and_nothing_is_joined(env: dict[str, Any]) -> None:
    start = time.monotonic()
    mirror = _mirror(env["tmp"] / "mirror", listed=True)
    _listen(env["info"], PORTS[:2])  # 10004 (the tunnel) stays closed
    record, out, watch = _run(env, "up", mirror)
    assert record.status == "failed", out[-4000:]
    rows = [line.split() for line in out.splitlines() if "cloudcore_ports  fail" in line]
    assert [EDGE, "cloudcore_ports", "fail", "closed:", "10004", "at", env["cloud_ip"]] in [
        r[:7] for r in rows
    ], out[-4000:]
    assert "preflight: cloudcore is not reachable from 1 edge host(s)" in out
    assert _calls(env["info"]) == [], "keadm ran although a port was closed"
    _no_token(env, out, watch)
    print(f"closed-port run: {time.monotonic() - start:.1f}s")


def test_keadm_without_a_sha256_is_refused_naming_versions_yml(tmp_path: Path) -> None:
    """keadm's pin in versions.yml is empty: no mirror, or a mirror whose SHA256SUMS does
    not list the archive, means nothing is downloaded (controller only, no lab needed)."""
    playbook = tmp_path / "keadm.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Resolve keadm",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars_files": [
                        str(COLLECTION / "roles" / "common" / "vars" / "main" / "versions.yml")
                    ],
                    "tasks": [
                        {
                            "name": "Resolve keadm",
                            "ansible.builtin.include_role": {
                                "name": "decice.hybrid.edge",
                                "tasks_from": "keadm.yml",
                            },
                            "vars": {"edge__keadm_arch": ARCH},
                        }
                    ],
                }
            ]
        )
    )
    unlisted = _mirror(tmp_path / "mirror", listed=False)
    ansible_env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    ansible_env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    for mirror, why in (("", "and no mirror is set"), (str(unlisted), "is not listed")):
        result = run_captured(
            [str(BIN / "ansible-playbook"), "-i", "inventories/local", str(playbook),
             "-e", json.dumps({"decice_mirror": mirror, "decice_state_dir": str(tmp_path / "s")})],
            cwd=REPO,
            timeout=300,
            env=ansible_env,
        )  # fmt: skip
        out = " ".join((result.stdout + result.stderr).split())
        assert result.returncode != 0, out[-3000:]
        assert f"keadm {ARCHIVE}: no sha256 to check it against" in out, out[-3000:]
        assert (
            f"roles/common/vars/main/versions.yml kubeedge.keadm.sha256.{ARCH} is empty" in out
            and why in out
        )
        assert "Nothing was joined." in out
        assert not (tmp_path / "s" / "artifacts" / "keadm").exists(), "nothing was fetched"


def test_join_contract_token_never_logged_idempotent_and_reset(env: dict[str, Any]) -> None:
    start = time.monotonic()
    info, token = env["info"], env["token"]
    mirror = _mirror(env["tmp"] / "mirror", listed=True)
    _listen(info, PORTS)  # the listeners of the tests before keep running

    record, out, watch = _run(env, "up", mirror)
    assert record.status == "ok", (record.failures, out[-4000:])
    calls = _calls(info)
    assert [c["argv"] for c in calls] == [
        [
            "join",
            f"--cloudcore-ipport={env['cloud_ip']}:10000",
            f"--kubeedge-version={VERSION}",
            f"--edgenode-name={EDGE}",
            "--cgroupdriver=systemd",  # containerd's SystemdCgroup (planted by the fixture)
            f"--remote-runtime-endpoint={RUNTIME}",
            "--labels=" + ",".join(f"{k}={v}" for k, v in LABELS.items()),
            f"--token={token}",
        ]
    ]
    assert all(token not in v for v in calls[0]["env"].values()), "the token was in keadm's env"
    assert "stand-in keadm: got <token>" in out, "keadm's output is shown with the token replaced"
    assert ssh(info, EDGE, "systemctl is-active edgecore") == "active"
    assert ssh(info, EDGE, "test -e /run/decice-edge && echo left || echo gone") == "gone"
    assert ssh(info, EDGE, "stat -c %a /usr/local/bin/keadm") == "755"
    # keadm writes the token into edgecore.yaml 0644: the role makes it 0600
    assert ssh(info, EDGE, "stat -c %a /etc/kubeedge/config/edgecore.yaml") == "600"
    assert "joined node2; already joined none" in " ".join(record.verified["edge_join"].split())
    _no_token(env, out, watch)
    first = time.monotonic() - start

    # up again: the joined host is skipped, keadm not run
    record, out, watch = _run(env, "up", mirror)
    assert record.status == "ok", (record.failures, out[-4000:])
    assert len(_calls(info)) == 1
    assert "joined none; already joined node2" in " ".join(record.verified["edge_join"].split())
    _no_token(env, out, watch)

    # down: keadm reset edge --force, then decice's keadm goes
    record, out, watch = _run(env, "down", mirror)
    assert record.status == "ok", (record.failures, out[-4000:])
    assert [c["argv"] for c in _calls(info)][1:] == [["reset", "edge", "--force"]]
    assert ssh(info, EDGE, "systemctl is-active edgecore", check=False) != "active"
    assert ssh(info, EDGE, "test -e /usr/local/bin/keadm && echo yes || echo no") == "no"
    _no_token(env, out, watch)
    print(f"join run: {first:.1f}s; whole contract: {time.monotonic() - start:.1f}s")
