"""The cluster side of interLink on a real cluster, through the interlink role's tasks.

The REAL chart (``../shared/mirror/charts/interlink-0.6.1.tgz``) is installed as the role
installs it on a Kubespray cluster - plain helm, no sim adaptation - on the session's
kube-apiserver: one release per virtual node, each with its bastion NodePort and the
node's tunnel key authorized for the one forward. The release's pod runs on a simulated
node (its images cannot run here). The virtual kubelet's side effects are made by this
test as the real one makes them (a stand-in, since its image cannot run): its Node, and
a serving-certificate request made *as its service account* (impersonated), so the
chart's own RBAC decides whether it may. Then: decice approves that request and refuses
one asking for another node's name, leaves another requester's alone; `down` removes the
releases without their hook (no Job), the Nodes, the requests, the ``-wstunnel``
namespaces and the keys - nothing left by an independent diff over discovery.
Not here: reading the bastion's host key (needs a running ssh-bastion container) and
the node becoming Ready by itself (needs the virtual kubelet's image).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from tests.integration.simsupport import AddonNodes
from tests.support import MIRROR, require, run_tasks, tunnel_key_options

pytestmark = [pytest.mark.addons, pytest.mark.sim]

NS = "interlink"
NODES = ("hpc-0", "hpc-1")
KEY_OPTIONS = tunnel_key_options()
REFUSED = ("vk-hpc-1-other", "vk-hpc-1-ip", "vk-hpc-1-dns", "vk-hpc-1-org")


def _spec(nodes: tuple[str, ...]) -> dict[str, Any]:
    endpoint = {"login_host": "login1", "partition": "batch", "data_dir": "/shared/il"}
    endpoints = [
        {**endpoint, "node": "hpc-0", "bastion_host": "10.0.0.5"},
        {**endpoint, "node": "hpc-1"},
    ]
    return {
        "target": "lab",
        "addons": {
            "interlink": {
                "endpoints": [e for e in endpoints if e["node"] in nodes],
                # the virtual kubelet's tunnel option: down then removes "-wstunnel" namespaces
                "values": {"virtualNode": {"network": {"enableTunnel": True}}},
            }
        },
    }


def _play(
    env: dict[str, Any],
    *steps: str,
    nodes: tuple[str, ...] = NODES,
    tasks: list[dict[str, Any]] | None = None,
    name: str = "",
) -> tuple[int, str, dict[str, int]]:
    playbook = env["tmp"] / f"play-{name or '-'.join(Path(s).stem for s in steps)}.yml"
    tasks = [
        {
            "name": f"interlink {step}",
            "ansible.builtin.include_role": {"name": "decice.hybrid.interlink", "tasks_from": step},
        }
        for step in steps
    ] + (tasks or [])
    varfile = env["tmp"] / "vars.json"
    varfile.write_text(
        json.dumps(
            {
                "decice_kubeconfig": str(env["kubeconfig"]),
                "decice_state_dir": str(env["tmp"] / "state"),
                "decice_helm": str(env["helm"]),
                "decice_mirror": str(MIRROR),
                "decice_spec": _spec(nodes),
                "interlink_bastion_host": "10.9.9.9",
                "interlink_timeout": 120,
            }
        )
    )
    return run_tasks("inventories/local", playbook, tasks, "-e", f"@{varfile}")


INSTALL = ("bastions.yml", "cluster_install.yml")


@pytest.fixture(scope="module")
def env(addon_nodes: AddonNodes) -> Iterator[dict[str, Any]]:
    require((MIRROR / "charts" / "interlink-0.6.1.tgz").is_file(), f"the mirror {MIRROR}")
    group = {"name_prefix": "ilc", "count": 2, "capacity": {"cpu": "8", "memory": "16Gi"}}
    with addon_nodes("interlink-cluster", [group]) as env:
        from tests.integration.simsupport import api_objects

        env["before"] = api_objects(env["api"], [NS])
        yield env


def _csr(
    kubeconfig: Path,
    name: str,
    requester: str | None,
    common_name: str,
    ips: list[str],
    *,
    dns: str = "",
    org: str = "system:nodes",
) -> None:
    """A kubelet-serving request for ``common_name`` and ``ips`` (and DNS name ``dns``),
    made as ``requester`` (impersonated) - the virtual kubelet asks for its pod's IP."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    names += [x509.DNSName(dns)] if dns else []
    san = x509.SubjectAlternativeName(names)
    pem = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(san, critical=False)
        .sign(key, hashes.SHA256())
    )
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(pem.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": "kubernetes.io/kubelet-serving",
            "usages": ["digital signature", "key encipherment", "server auth"],
        },
    }
    as_requester = config.new_client_from_config(str(kubeconfig))
    if requester:
        as_requester.set_default_header("Impersonate-User", requester)
    client.CertificatesV1Api(as_requester).create_certificate_signing_request(body)


def _jobs_added_since(api: client.ApiClient, rv: str) -> list[str]:
    """Every Job added in the add-on's namespace since ``rv`` (a hook's Job would be),
    replayed by the API server's watch from that version."""
    return [
        event["object"].metadata.name
        for event in watch.Watch().stream(
            client.BatchV1Api(api).list_namespaced_job,
            NS,
            resource_version=rv,
            timeout_seconds=2,
        )
        if event["type"] == "ADDED"
    ]


def _conditions(api: client.ApiClient, name: str) -> list[str]:
    csr = client.CertificatesV1Api(api).read_certificate_signing_request(name)
    return [c.type for c in (csr.status.conditions or [])]


def test_install_one_release_per_virtual_node(env: dict[str, Any]) -> None:
    rc, out, _ = _play(env, *INSTALL)
    assert rc == 0, out[-4000:]
    api = env["api"]
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    state = env["tmp"] / "state" / "interlink"
    for index, node in enumerate(NODES):
        deploy = apps.read_namespaced_deployment(f"{node}-node", NS)
        images = {c.name: c.image for c in deploy.spec.template.spec.containers}
        assert set(images) == {"interlink", "vk", "ssh-bastion"}
        assert not any(i.endswith(":latest") for i in images.values()), images
        assert images["vk"] == "ghcr.io/interlink-hq/interlink/virtual-kubelet-inttw:0.6.2"
        config_map = core.read_namespaced_config_map(f"{node}-interlink-config", NS)
        il = yaml.safe_load(config_map.data["InterLinkConfig.yaml"])
        assert (il["SidecarURL"], il["SidecarPort"]) == ("http://localhost", "3000")
        service = core.read_namespaced_service(f"ssh-bastion-{node}", NS)
        assert service.spec.type == "NodePort"
        assert service.spec.ports[0].node_port == 31022 + index
        public = (state / f"{node}.tunnel.pub").read_text().strip()
        secret = core.read_namespaced_secret(f"{node}-ssh-keys", NS)
        authorized = base64.b64decode(secret.data["authorized_keys"]).decode().strip()
        assert authorized == f"{KEY_OPTIONS} {public}"
        assert public.endswith(f"decice-interlink-{node}")
        private = state / f"{node}.tunnel"
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_a_second_install_changes_nothing(env: dict[str, Any]) -> None:
    rc, out, stats = _play(env, *INSTALL)
    assert rc == 0, out[-4000:]
    assert stats.get("changed") == 0, out[-4000:]


def test_serving_certificates_approved_for_their_node_only(env: dict[str, Any]) -> None:
    api = env["api"]
    core = client.CoreV1Api(api)
    for node in NODES:  # the virtual kubelets' Nodes (stand-in), created Ready
        core.create_node(
            {
                "metadata": {
                    "name": node,
                    "labels": {"virtual-node.interlink/type": "virtual-kubelet"},
                },
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    sa = "system:serviceaccount:interlink:"
    kubeconfig = env["kubeconfig"]
    ip = {n: _pod_ip(core, n) for n in NODES}
    _csr(kubeconfig, "vk-hpc-0", sa + "hpc-0", "system:node:hpc-0", [ip["hpc-0"]])
    _csr(kubeconfig, "vk-hpc-1", sa + "hpc-1", "system:node:hpc-1", [ip["hpc-1"]])
    # refused: another node's name, another pod's IP, a DNS name, another organization
    _csr(kubeconfig, "vk-hpc-1-other", sa + "hpc-1", "system:node:ilc-0", [ip["hpc-1"]])
    _csr(kubeconfig, "vk-hpc-1-ip", sa + "hpc-1", "system:node:hpc-1", [ip["hpc-0"]])
    _csr(kubeconfig, "vk-hpc-1-dns", sa + "hpc-1", "system:node:hpc-1", [], dns="api.corp")
    _csr(kubeconfig, "vk-hpc-1-org", sa + "hpc-1", "system:node:hpc-1", [], org="system:masters")
    _csr(kubeconfig, "bystander", None, "system:node:hpc-0", [ip["hpc-0"]])  # the admin's
    rc, out, _ = _play(env, "bastions.yml", "cluster_nodes.yml")
    assert rc == 0, out[-4000:]
    assert _conditions(api, "vk-hpc-0") == ["Approved"]
    assert _conditions(api, "vk-hpc-1") == ["Approved"]
    for refused in REFUSED:
        assert _conditions(api, refused) == [], refused
    assert _conditions(api, "bystander") == []
    assert "asks for common name 'system:node:ilc-0', not 'system:node:hpc-1'" in out
    assert f"asks for IP addresses {ip['hpc-0']}, not among ['{ip['hpc-1']}']" in out
    assert "asks for names other than IP addresses: DNSName api.corp" in out
    assert "asks for organizations ['system:masters'], not ['system:nodes']" in out


def _pod_ip(core: client.CoreV1Api, node: str) -> str:
    (pod,) = core.list_namespaced_pod(NS, label_selector=f"app={node}").items
    return str(pod.status.pod_ip)


def test_the_bastion_host_key_step_stops_where_this_machine_does(env: dict[str, Any]) -> None:
    """cluster_bastion.yml finds the release's live pod and asks its ssh-bastion container
    for the host key; the sim's pods have no container to exec into (no kubelet), so the
    step must stop with its own message naming the fix, and write no known_hosts line."""
    play = env["tmp"] / "bastion.yml"
    task = {
        "name": "bastion",
        "ansible.builtin.include_role": {
            "name": "decice.hybrid.interlink",
            "tasks_from": "cluster_bastion.yml",
        },
        "vars": {"interlink__ep": {"node": "hpc-0"}, "interlink_bastion_key_retries": 1},
    }
    rc, out, _ = _play(env, "bastions.yml", tasks=[task], name=play.stem)
    assert rc != 0
    assert "Ask the ssh-bastion container for its host key: hpc-0" in out
    assert "hpc-0: no running pod of the release in interlink, or its" in out, out[-3000:]
    assert "error dialing backend" in out  # the API's own reason, passed on
    assert "fix: check the release's pod" in out
    assert not (env["tmp"] / "state" / "interlink" / "hpc-0.known_hosts").exists()


def test_up_removes_a_virtual_node_gone_from_the_spec(env: dict[str, Any]) -> None:
    api = env["api"]
    rc, out, _ = _play(env, *INSTALL, nodes=("hpc-0",))
    assert rc == 0, out[-4000:]
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    assert {d.metadata.name for d in apps.list_namespaced_deployment(NS).items} == {"hpc-0-node"}
    assert "hpc-1" not in {n.metadata.name for n in core.list_node().items}
    csrs = {
        c.metadata.name
        for c in client.CertificatesV1Api(api).list_certificate_signing_request().items
    }
    assert "vk-hpc-0" in csrs and not csrs & {"vk-hpc-1", *REFUSED}
    assert not list((env["tmp"] / "state" / "interlink").glob("hpc-1.*"))
    assert (env["tmp"] / "state" / "interlink" / "hpc-0.tunnel").is_file()
    rc, out, _ = _play(env, *INSTALL)  # both again, for down
    assert rc == 0, out[-4000:]


def test_down_leaves_nothing(env: dict[str, Any]) -> None:
    api = env["api"]
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "team-a-wstunnel"}})  # the VK's, per pod ns
    rv = client.BatchV1Api(api).list_namespaced_job(NS).metadata.resource_version
    # hpc-1 is no longer in the spec, but its release is in decice's namespace: it goes too
    rc, out, _ = _play(env, "cluster_uninstall.yml", nodes=("hpc-0",))
    assert rc == 0, out[-4000:]
    # the pre-delete hook's Job never ran (not even briefly): decice did its work
    assert _jobs_added_since(api, rv) == []
    csrs = client.CertificatesV1Api(api)
    names = {c.metadata.name for c in csrs.list_certificate_signing_request().items}
    assert "bystander" in names and not names & {"vk-hpc-0", "vk-hpc-1", *REFUSED}
    csrs.delete_certificate_signing_request("bystander")
    from tests.integration.simsupport import api_objects
    from tests.support import wait_for

    wait_for(
        "no leftovers",
        lambda: api_objects(api, [NS]) == env["before"],
        timeout=60,
    )
    assert not list((env["tmp"] / "state" / "interlink").glob("hpc-*"))
    rc, out, stats = _play(env, "cluster_uninstall.yml")  # again: nothing to do, no error
    assert rc == 0 and stats.get("changed") == 0, out[-4000:]
