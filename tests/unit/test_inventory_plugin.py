"""The decice.hybrid.allocation inventory plugin gives the groups decice's own code gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from decice.allocation import Machine, slurm
from decice.inventory import GROUPS, assign_roles
from decice.spec_model import AllocationSpec
from tests.support import load_file

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "ansible_collections" / "decice" / "hybrid"
PLUGIN = COLLECTION / "plugins" / "inventory" / "allocation.py"
ANSIBLE_INVENTORY = Path(sys.executable).with_name("ansible-inventory")


def inventory_list(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SLURM_", "PBS_"))
    }
    clean.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **env)
    return subprocess.run(
        [str(ANSIBLE_INVENTORY), "-i", str(config), "--list"],
        capture_output=True,
        text=True,
        env=clean,
        cwd="/tmp",  # the plugin must not depend on the working directory
        timeout=120,
        check=False,
    )


def groups_of(listing: dict) -> dict[str, list[str]]:
    return {group: listing.get(group, {}).get("hosts", []) for group in GROUPS}


def plain(value: object) -> object:
    """Inventory plugin values come back marked unsafe (never templated): unwrap them."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def parsed(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Failed to parse" not in result.stderr, result.stderr
    return plain(json.loads(result.stdout))


def test_static_config_matches_assign_roles(tmp_path: Path) -> None:
    (tmp_path / "more-hosts").write_text("w3 10.0.0.13  # from the hosts file\n")
    config = tmp_path / "allocation.yml"
    config.write_text(
        "plugin: decice.hybrid.allocation\n"
        "source: static\n"
        "hosts:\n"
        "  - {name: c1, address: 10.0.0.1}\n"
        "  - {name: c2, address: 10.0.0.2}\n"
        "  - {name: c3, address: 10.0.0.3, vars: {ansible_user: alice}}\n"
        "  - w1\n"
        "  - {name: e1, address: 10.0.0.21}\n"
        "  - login01\n"
        "hosts_file: more-hosts\n"
        "control_plane: 3\n"
        "edge: [e1]\n"
        "hpc_endpoints: [login01]\n"
    )
    listing = parsed(inventory_list(config))
    machines = tuple(Machine(name) for name in ("c1", "c2", "c3", "w1", "e1", "login01", "w3"))
    rules = AllocationSpec(control_plane=3, edge=["e1"], hpc_endpoints=["login01"])
    expected = assign_roles(machines, rules)
    assert groups_of(listing) == expected
    assert expected["kube_control_plane"] == ["c1", "c2", "c3"]  # sanity of the comparison
    assert listing["k8s_cluster"]["children"] == ["kube_control_plane", "kube_node"]
    hostvars = listing["_meta"]["hostvars"]
    trust = hostvars["c3"].pop("ansible_ssh_common_args")  # decice.inventory.trust_options
    assert trust.endswith("-o StrictHostKeyChecking=yes -o BatchMode=yes")
    assert hostvars["c3"] == {"ansible_host": "10.0.0.3", "ansible_user": "alice"}  # no `ip`
    assert hostvars["w3"]["ansible_host"] == "10.0.0.13"
    assert "localhost" not in hostvars


def test_slurm_nodelist_matches_assign_roles(tmp_path: Path) -> None:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host node*\n  User root\n")
    config = tmp_path / "allocation.yml"
    config.write_text(
        "plugin: decice.hybrid.allocation\n"
        "source: slurm\n"
        "edge: [node7]\n"
        "ssh_config: ssh_config\n"
        "jump_host: login01\n"
    )
    env = {"SLURM_JOB_NODELIST": "node[1-3,7]", "SLURM_JOB_ID": "42"}
    listing = parsed(inventory_list(config, **env))
    allocation = slurm.from_environment(env)
    expected = assign_roles(allocation.machines, AllocationSpec(edge=["node7"]))
    assert groups_of(listing) == expected
    assert expected["decice_edge"] == ["node7"] and expected["kube_node"] == ["node2", "node3"]
    args = listing["_meta"]["hostvars"]["node1"]["ansible_ssh_common_args"]
    assert args.startswith(f"-F {ssh_config} -o ProxyJump=login01 -o ")  # + host-key trust


def test_outside_a_job_fails_with_decice_message(tmp_path: Path) -> None:
    config = tmp_path / "allocation.yml"
    config.write_text("plugin: decice.hybrid.allocation\nsource: slurm\n")
    result = inventory_list(config)
    assert "SLURM_JOB_NODELIST is not set (not inside a SLURM job)" in result.stderr
    assert "node" not in json.loads(result.stdout).get("_meta", {}).get("hostvars", {})


def test_invalid_rules_are_reported_by_field(tmp_path: Path) -> None:
    config = tmp_path / "allocation.yml"
    config.write_text(
        "plugin: decice.hybrid.allocation\nsource: static\nhosts: [a, b, c]\ncontrol_plane: 2\n"
    )
    result = inventory_list(config)
    assert "control_plane: etcd runs on the control-plane hosts" in result.stderr


def test_example_inventory_reads_the_job(tmp_path: Path) -> None:
    example = REPO / "inventories" / "slurm" / "allocation.yml"
    listing = parsed(inventory_list(example, SLURM_JOB_NODELIST="cn[001-004]"))
    assert groups_of(listing)["kube_control_plane"] == ["cn001"]
    assert groups_of(listing)["kube_node"] == ["cn002", "cn003", "cn004"]
    # group_vars next to the file still apply
    assert listing["_meta"]["hostvars"]["cn002"]["ansible_become"] is True


def test_missing_decice_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.errors import AnsibleParserError

    module = load_file(PLUGIN, "decice_allocation_plugin")
    for name in [n for n in sys.modules if n == "decice" or n.startswith("decice.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "decice", None)  # makes `import decice...` fail
    with pytest.raises(AnsibleParserError, match="needs the decice Python package"):
        module._import_decice()


def test_a_decice_of_another_contract_is_named_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ansible.errors import AnsibleParserError

    from decice import hybrid_api

    module = load_file(PLUGIN, "decice_allocation_plugin")
    assert module._import_decice() is hybrid_api
    monkeypatch.setattr(hybrid_api, "API_VERSION", module.DECICE_API + 1)
    with pytest.raises(AnsibleParserError, match="install the decice release this collection"):
        module._import_decice()


def test_the_collection_plugins_call_decice_only_through_its_entry_point() -> None:
    """The plugins (Python under plugins/) import decice.hybrid_api and no other decice
    module, so decice's internals can change without breaking a collection (#28)."""
    import ast

    seen = set()
    for path in (COLLECTION / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            seen.update((path.name, n) for n in names if n.split(".")[0] == "decice")
    assert seen == {("kubespray.py", "decice.hybrid_api"), ("allocation.py", "decice.hybrid_api")}


def test_hostile_values_are_refused_or_kept_as_data(tmp_path: Path) -> None:
    config = tmp_path / "allocation.yml"
    config.write_text(
        "plugin: decice.hybrid.allocation\nsource: static\nhosts:\n"
        "  - {name: c1, address: 10.0.0.1, vars: {note: \"{{ lookup('pipe', 'id') }}\"}}\n"
    )
    result = inventory_list(config)
    assert result.returncode == 0, result.stderr
    hostvars = json.loads(result.stdout)["_meta"]["hostvars"]["c1"]
    # marked unsafe: Ansible shows it as data and never templates it
    assert hostvars["note"] == {"__ansible_unsafe": "{{ lookup('pipe', 'id') }}"}
    assert hostvars["ansible_host"] == {"__ansible_unsafe": "10.0.0.1"}

    config.write_text(
        "plugin: decice.hybrid.allocation\nsource: static\nhosts: ['../x']\n"
        "jump_host: 'login01 -E /tmp/x'\n"
    )
    result = inventory_list(config)
    assert "Failed to parse" in result.stderr
    assert "hosts.0.name: '../x': a host name has no empty labels" in result.stderr
    assert "jump_host: 'login01 -E /tmp/x'" in result.stderr


def test_hostile_nodelist_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "allocation.yml"
    config.write_text("plugin: decice.hybrid.allocation\nsource: slurm\n")
    result = inventory_list(config, SLURM_JOB_NODELIST="node1,$(id)")
    assert "SLURM_JOB_NODELIST: host name '$(id)'" in result.stderr
    assert "$(id)" not in json.loads(result.stdout).get("_meta", {}).get("hostvars", {})
