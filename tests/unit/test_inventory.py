"""Allocation sources and role rules -> inventory groups."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from decice import inventory, spec
from decice.allocation import Machine, checks, listfile, pbs, slurm, static
from decice.errors import InputError
from decice.spec_model import AllocationSpec

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("nodelist", "expected"),
    [
        ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
        ("gpu[01-04],cpu[1-2]", ["gpu01", "gpu02", "gpu03", "gpu04", "cpu1", "cpu2"]),
        ("login", ["login"]),
        ("n[1-2],n[2-3]", ["n1", "n2", "n3"]),
    ],
)
def test_slurm_nodelists(nodelist: str, expected: list[str]) -> None:
    alloc = slurm.from_environment({"SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_ID": "42"})
    assert [m.name for m in alloc.machines] == expected
    assert alloc.job_id == "42"


def test_slurm_outside_a_job_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="not inside a SLURM job"):
        slurm.from_environment({})


def test_pbs_nodefile_deduplicated(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("cn01\ncn01\ncn02\ncn01\ncn03\n")
    alloc = pbs.from_environment({"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "7.server"})
    assert [m.name for m in alloc.machines] == ["cn01", "cn02", "cn03"]


def test_pbs_empty_nodefile(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("\n")
    with pytest.raises(InputError, match="lists no hosts"):
        pbs.from_environment({"PBS_NODEFILE": str(nodefile)})


def test_hosts_file_errors_name_the_line(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("a 10.0.0.1\n# comment\nb\na\n")
    with pytest.raises(InputError, match=r"hosts:4: host 'a' is listed twice"):
        static.read_hosts_file(hosts)


def _machines(*names: str) -> tuple[Machine, ...]:
    return tuple(Machine(n) for n in names)


def test_first_k_are_control_plane_rest_workers() -> None:
    groups = inventory.assign_roles(
        _machines("n1", "n2", "n3", "n4", "n5"), AllocationSpec(control_plane=3, edge=["n5"])
    )
    assert groups["kube_control_plane"] == ["n1", "n2", "n3"]
    assert groups["etcd"] == ["n1", "n2", "n3"]
    assert groups["kube_node"] == ["n4"]
    assert groups["decice_edge"] == ["n5"]


def test_single_host_is_control_plane_and_worker() -> None:
    groups = inventory.assign_roles(_machines("solo"), AllocationSpec())
    assert groups["kube_control_plane"] == ["solo"]
    assert groups["kube_node"] == ["solo"]


def test_even_etcd_from_explicit_roles_is_refused() -> None:
    machines = (Machine("a", roles=("control_plane", "etcd")), Machine("b", roles=("etcd",)))
    with pytest.raises(InputError, match="odd number"):
        inventory.assign_roles(machines, AllocationSpec())


def test_unknown_edge_host_is_refused() -> None:
    with pytest.raises(InputError, match=r"allocation.edge: ghost not among"):
        inventory.assign_roles(_machines("n1", "n2"), AllocationSpec(edge=["ghost"]))


def test_too_few_hosts_for_control_plane() -> None:
    with pytest.raises(InputError, match="3 control-plane hosts wanted"):
        inventory.assign_roles(_machines("n1", "n2"), AllocationSpec(control_plane=3))


def _built(tmp_path: Path, text: str) -> tuple[spec.LoadedSpec, dict[str, Any]]:
    """The spec ``text`` (written to tmp_path/decice.yaml) loaded, and its inventory."""
    (tmp_path / "decice.yaml").write_text(text)
    loaded = spec.load(None, cwd=tmp_path)
    return loaded, inventory.build(loaded, inventory.allocate(loaded))


def test_static_inventory_with_jump_host(tmp_path: Path) -> None:
    text = (
        "name: x\ntarget: static\nallocation: {jump_host: login01}\nhosts:\n"
        "  - {name: a, address: 10.1.0.1, roles: [control_plane, etcd]}\n"
        "  - {name: b, address: 10.1.0.2, roles: [worker]}\n"
    )
    loaded, inv = _built(tmp_path, text)
    hosts = inv["all"]["hosts"]
    assert hosts["a"]["ansible_host"] == "10.1.0.1"
    trust = shlex.join(inventory.trust_options(loaded))
    assert hosts["b"]["ansible_ssh_common_args"] == f"-o ProxyJump=login01 {trust}"
    assert inventory.host_roles(inv)["a"] == ["kube_control_plane", "etcd"]
    assert inventory.host_roles(inv)["b"] == ["kube_node"]
    sha = inventory.write(inv, tmp_path / "run" / "inventory.yml")
    assert len(sha) == 64
    assert (tmp_path / "run" / "inventory.yml").stat().st_mode & 0o777 == 0o600


def test_sim_inventory_has_only_localhost(tmp_path: Path) -> None:
    loaded = spec.load(None, cwd=tmp_path)
    inv = inventory.build(loaded, inventory.allocate(loaded))
    assert list(inv["all"]["hosts"]) == ["localhost"]
    assert all(not body.get("hosts") for body in inv["all"]["children"].values())


def test_allocation_vars_apply_to_every_host_and_host_vars_win(tmp_path: Path) -> None:
    text = (
        "name: x\ntarget: static\nallocation:\n"
        "  vars: {ansible_user: hpc, prepare_kernel_wide: false}\n"
        "hosts:\n  - {name: a, roles: [control_plane, etcd], vars: {ansible_user: root}}\n"
        "  - {name: b, roles: [worker]}\n"
    )
    _, inv = _built(tmp_path, text)
    hosts = inv["all"]["hosts"]
    assert hosts["a"]["ansible_user"] == "root"
    assert hosts["b"]["ansible_user"] == "hpc"
    assert hosts["a"]["prepare_kernel_wide"] is False


def test_user_values_enter_the_inventory_unsafe(tmp_path: Path) -> None:
    text = (
        "name: x\ntarget: static\nallocation:\n  vars: {site: \"{{ lookup('pipe', 'id') }}\"}\n"
        "hosts:\n  - name: a\n    address: 10.1.0.1\n    roles: [control_plane, etcd]\n"
        "    vars: {nested: {k: ['{{ 7 * 7 }}', 3]}, ansible_connection: local}\n"
    )
    _, inv = _built(tmp_path, text)
    path = tmp_path / "inventory.yml"
    inventory.write(inv, path)
    written = path.read_text()
    assert "site: !unsafe '{{ lookup(''pipe'', ''id'') }}'" in written
    assert "- !unsafe '{{ 7 * 7 }}'" in written and "- 3" in written
    assert "ansible_host: !unsafe '10.1.0.1'" in written
    back = inventory.read(path)
    assert back == inv
    hosts = back["all"]["hosts"]
    assert isinstance(hosts["a"]["site"], inventory.Unsafe)
    assert isinstance(hosts["a"]["nested"]["k"][0], inventory.Unsafe)
    assert not isinstance(hosts["localhost"]["ansible_python_interpreter"], inventory.Unsafe)


def test_unsafe_stays_tagged_in_any_safe_dump() -> None:
    # Kubespray's hosts.yml is written by another module with yaml.safe_dump
    assert yaml.safe_dump({"ip": inventory.Unsafe("{{ x }}")}) == "ip: !unsafe '{{ x }}'\n"
    assert inventory.unsafe(("a", {"b": 1})) == ["a", {"b": 1}]


def test_ssh_options_are_quoted_arguments(tmp_path: Path) -> None:
    config = tmp_path / "my ssh config"
    config.write_text("Host *\n")
    text = (
        "name: x\ntarget: static\n"
        "allocation: {jump_host: 'hpc@login01:2222,[fd00::1]:22', ssh_config: my ssh config}\n"
        "hosts:\n  - {name: a, roles: [control_plane, etcd]}\n"
    )
    loaded, inv = _built(tmp_path, text)
    args = inv["all"]["hosts"]["a"]["ansible_ssh_common_args"]
    assert shlex.split(args) == [
        "-F",
        str(config),
        "-o",
        "ProxyJump=hpc@login01:2222,[fd00::1]:22",
        *inventory.trust_options(loaded),
    ]


@pytest.mark.parametrize(
    "name", ["node1", "cn001.cluster.example", "Node-02", "a", "1", "a" * 63, "x.y.z"]
)
def test_valid_host_names(name: str) -> None:
    assert checks.host_name_problem(name) is None


@pytest.mark.parametrize(
    "name", ["", ".", "a..b", "a.", "-a", "a-", "a_b", "a b", "a/b", "a" * 64, "n\u043ede", "a\0"]
)
def test_invalid_host_names(name: str) -> None:
    assert checks.host_name_problem(name)


# (what a check accepts: True, refuses: False) for each check of one inventory value
_ACCEPTS: dict[Callable[[Any], str | None], list[tuple[object, bool]]] = {
    checks.address_problem: [
        ("10.0.0.1", True),
        ("fd00::1", True),
        ("fe80::1%eth0", True),
        ("login01.example.org", True),
        ("256.0.0.1", False),
        ("fe80::1%eth0;id", False),
        ("10.0.0.1 -p 22", False),
        ("::g", False),
        ("{{ x }}", False),
    ],
    checks.jump_host_problem: [
        ("login01", True),
        ("hpc@login01:2222", True),
        ("a@[fd00::1]:22,b.example", True),
        ("10.0.0.1", True),
        ("", False),
        ("@login01", False),
        ("login01:0", False),
        ("[fd00::1]x", False),
        ("login01 -E /tmp/x", False),
        ("-oProxyCommand=x", False),
    ],
    checks.port_problem: [(22, True), ("2222", True), (True, False), (0, False), (65536, False)],
}


@pytest.mark.parametrize(
    ("check", "value", "ok"),
    [
        pytest.param(check, value, ok, id=f"{check.__name__}-{value!r}")
        for check, cases in _ACCEPTS.items()
        for value, ok in cases
    ],
)
def test_address_jump_host_and_port_checks(
    check: Callable[[Any], str | None], value: object, ok: bool
) -> None:
    assert (check(value) is None) is ok


@pytest.mark.parametrize(
    ("variables", "found"),
    [
        ({"ansible_user": "hpc", "x_1": "{{ anything }}"}, None),
        ({"1x": 1}, "not a variable name"),
        ({"None": 1}, "keyword"),
        ({"ansible_ssh_user": "a b"}, "not a login name"),
        ({"ansible_ssh_host": "-x"}, "does not start with '-'"),
    ],
)
def test_vars(variables: dict[str, object], found: str | None) -> None:
    problem = checks.vars_problem(variables)
    assert (problem is None) if found is None else (problem is not None and found in problem[0])


def test_old_slurm_nodelist_variable_is_named() -> None:
    with pytest.raises(InputError, match=r"^SLURM_NODELIST: host name 'a;b'"):
        slurm.from_environment({"SLURM_NODELIST": "a;b"})


def test_nodefile_must_be_a_small_regular_text_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InputError, match="is not a regular file"):
        pbs.read_nodefile(tmp_path)
    big = tmp_path / "nodes"
    big.write_text("cn01\n" * 10)
    monkeypatch.setattr(listfile, "MAX_BYTES", 20)
    with pytest.raises(InputError, match=r"larger than .*\n    fix: run decice inside a PBS job"):
        pbs.read_nodefile(big)


def test_hosts_file_host_also_in_spec_is_refused(tmp_path: Path) -> None:
    (tmp_path / "more").write_text("a 10.0.0.9\n")
    text = (
        "name: x\ntarget: static\nallocation: {hosts_file: more}\n"
        "hosts:\n  - {name: a, roles: [control_plane, etcd]}\n"
    )
    (tmp_path / "decice.yaml").write_text(text)
    loaded = spec.load(None, cwd=tmp_path)
    with pytest.raises(InputError, match="host 'a' is also in hosts:"):
        inventory.allocate(loaded)
