"""The spec's ``addons.interlink.endpoints``: defaults, rules, errors with file:line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from decice import spec, starter
from tests.support import assert_plan_refuses

pytestmark = pytest.mark.unit

HEAD = "name: x\naddons:\n  interlink:\n    endpoints:\n"
GOOD = (
    "      - node: hpc-0\n"
    "        login_host: login1\n"
    "        partition: batch\n"
    "        data_dir: /shared/il\n"
)


def _issues(text: str) -> list[spec.SpecIssue]:
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(text, "s.yaml")
    return caught.value.issues


def test_defaults_of_an_endpoint() -> None:
    parsed, _ = spec.parse(HEAD + GOOD, "s.yaml")
    (endpoint,) = parsed.addons.interlink.endpoints
    assert endpoint.node == "hpc-0"
    assert endpoint.login_host == "login1"
    assert endpoint.user is None
    assert endpoint.port == 4000
    assert endpoint.account is None
    assert endpoint.runtime == "auto"
    assert (endpoint.default_cpu, endpoint.default_memory) == ("1", None)
    assert endpoint.mpi_launcher == "mpiexec"
    assert endpoint.data_dir == "/shared/il"
    assert endpoint.bastion_port is None and endpoint.bastion_host is None
    assert parsed.addons.interlink.enabled is True


def test_every_field_given_reaches_the_plays() -> None:
    text = (
        HEAD
        + GOOD
        + (
            "        user: alice\n        port: 4100\n"
            "        account: proj1\n        runtime: bare\n"
            "        default_cpu: 500m\n        default_memory: 2Gi\n"
            "        mpi_launcher: srun --mpi=pmix\n"
            "        bastion_port: 31500\n        bastion_host: 10.0.0.5\n"
        )
    )
    parsed, _ = spec.parse(text, "s.yaml")
    dumped = parsed.model_dump(mode="json")["addons"]["interlink"]["endpoints"][0]
    assert dumped == {
        "node": "hpc-0",
        "login_host": "login1",
        "user": "alice",
        "port": 4100,
        "partition": "batch",
        "account": "proj1",
        "data_dir": "/shared/il",
        "runtime": "bare",
        "default_cpu": "500m",
        "default_memory": "2Gi",
        "mpi_launcher": "srun --mpi=pmix",
        "bastion_port": 31500,
        "bastion_host": "10.0.0.5",
        "mode": "job",
        "pilot": None,
    }


def test_no_endpoints_by_default() -> None:
    parsed, _ = spec.parse("name: x\n", "s.yaml")
    assert parsed.addons.interlink.endpoints == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("node", "HPC_0", "DNS label"),
        ("login_host", "'-x'", "login_host"),
        ("user", "'bad user'", "not a login name"),
        ("port", "70000", "not a port number"),
        ("partition", "'a b'", "not a SLURM name"),
        ("account", "'a;b'", "not a SLURM name"),
        ("data_dir", "shared/il", "not an absolute path"),
        ("runtime", "docker", "'auto', 'apptainer' or 'bare'"),
        ("default_cpu", "'0'", "not above 0"),
        ("default_memory", "lots", "is not a quantity"),
        ("mpi_launcher", "'-np 4'", "not a command"),
        ("mpi_launcher", "'mpiexec; rm -rf ~'", "not a command"),
        ("bastion_port", "4000", "NodePort range 30000-32767"),
        ("bastion_host", "'a b'", "address"),
    ],
)
def test_bad_field_names_its_line(field: str, value: str, message: str) -> None:
    base = {
        "node": "hpc-0",
        "login_host": "login1",
        "partition": "batch",
        "data_dir": "/shared/il",
    }
    base[field] = value
    body = "".join(
        f"{'      - ' if i == 0 else '        '}{k}: {v}\n" for i, (k, v) in enumerate(base.items())
    )
    (issue,) = _issues(HEAD + body)
    line = 5 + list(base).index(field)
    assert issue.line == line
    assert issue.field == f"addons.interlink.endpoints[0].{field}"
    assert message in issue.render()
    assert "fix:" in issue.render()


@pytest.mark.parametrize("missing", ["node", "login_host", "partition", "data_dir"])
def test_required_fields(missing: str) -> None:
    body = "".join(
        line
        for line in GOOD.replace("      - ", "        ").splitlines(keepends=True)
        if not line.strip().startswith(f"{missing}:")
    )
    body = "      - " + body.lstrip()
    (issue,) = _issues(HEAD + body)
    assert f"required key '{missing}' is missing" in issue.render()
    assert issue.line == 5


def test_unknown_key_suggests_the_field() -> None:
    (issue,) = _issues(HEAD + GOOD + "        datadir: /x\n")
    assert issue.line == 9
    assert "did you mean 'data_dir'?" in issue.render()


def test_duplicate_nodes_are_refused() -> None:
    other = GOOD.replace("/shared/il", "/shared/other").replace("login1", "login2")
    (issue,) = _issues(HEAD + GOOD + other)
    assert issue.line == 4
    assert "endpoints[1].node 'hpc-0' repeats endpoints[0].node" in issue.render()
    assert "unique" in issue.render()


def test_bastion_ports_are_unique_after_their_defaults() -> None:
    second = GOOD.replace("hpc-0", "hpc-1")
    parsed, _ = spec.parse(HEAD + GOOD + second, "s.yaml")
    assert [e.bastion_port for e in parsed.addons.interlink.endpoints] == [None, None]
    clash = second + "        bastion_port: 31022\n"  # endpoint 0's default
    (issue,) = _issues(HEAD + GOOD + clash)
    assert "endpoints[1].bastion_port 31022 repeats the bastion port of endpoints[0]" in (
        issue.render()
    )
    assert "fix: give each endpoint its own bastion_port" in issue.render()


def test_the_starter_documents_every_field() -> None:
    text = starter.render("lab")
    fields = ("node", "login_host", "user", "port", "partition", "account", "data_dir")
    extra = ("default_cpu", "default_memory", "mpi_launcher", "bastion_port", "bastion_host")
    extra += ("mode", "pilot")
    for field in (*fields, *extra):
        assert f"#   {field}: " in text or f"# - {field}: " in text, field
    assert "auto | apptainer | bare" in text
    parsed, _ = spec.parse(text, "starter.yaml")
    assert parsed.addons.interlink.endpoints == []


def test_bad_endpoint_through_the_cli_exits_2_and_touches_nothing(tmp_path: Path) -> None:
    path = tmp_path / "decice.yaml"
    path.write_text(HEAD + GOOD.replace("/shared/il", "relative/dir"))
    assert_plan_refuses(path, tmp_path, 8, "not an absolute path")


def _inventory(tmp_path: Path, text: str) -> dict[str, Any]:
    from decice import inventory

    (tmp_path / "decice.yaml").write_text(text)
    loaded = spec.load(None, cwd=tmp_path)
    return inventory.build(loaded, inventory.allocate(loaded))


def test_sim_inventory_reaches_the_login_hosts_with_the_ssh_config(tmp_path: Path) -> None:
    import shlex

    (tmp_path / "ssh_config").write_text("Host login1\n  HostName 192.0.2.5\n")
    second = GOOD.replace("hpc-0", "hpc-1").replace("/shared/il", "/shared/il1")
    text = HEAD + GOOD + second + "allocation: {ssh_config: ssh_config}\n"
    inv = _inventory(tmp_path, text)
    hosts = inv["all"]["hosts"]
    children = inv["all"]["children"]
    assert list(children["decice_interlink"]["hosts"]) == ["login1"]
    args = shlex.split(hosts["login1"]["ansible_ssh_common_args"])
    assert args[:2] == ["-F", str(tmp_path / "ssh_config")]
    assert "StrictHostKeyChecking=yes" in args and "BatchMode=yes" in args
    assert not any(children[g]["hosts"] for g in ("decice_hpc", "kube_node", "decice_edge"))


def test_disabled_interlink_adds_no_login_host(tmp_path: Path) -> None:
    text = HEAD.replace("  interlink:\n", "  interlink:\n    enabled: false\n") + GOOD
    inv = _inventory(tmp_path, text)
    assert list(inv["all"]["hosts"]) == ["localhost"]


def test_a_login_host_of_the_allocation_keeps_its_groups(tmp_path: Path) -> None:
    text = (
        "name: x\ntarget: static\nhosts:\n"
        "  - {name: a, address: 10.1.0.1, roles: [control_plane, etcd]}\n"
        "  - {name: login1, address: 10.1.0.9, roles: [hpc]}\n"
        "addons:\n  interlink:\n    endpoints:\n" + GOOD
    )
    inv = _inventory(tmp_path, text)
    children = inv["all"]["children"]
    assert list(children["decice_hpc"]["hosts"]) == ["login1"]
    assert not children["decice_interlink"]["hosts"]
    assert inv["all"]["hosts"]["login1"]["ansible_host"] == "10.1.0.9"


def test_spec_pilot_mode_defaults_and_fields() -> None:
    parsed, _ = spec.parse(HEAD + GOOD, "s.yaml")
    (endpoint,) = parsed.addons.interlink.endpoints
    assert (endpoint.mode, endpoint.pilot) == ("job", None)
    text = HEAD + GOOD + "        mode: pilot\n        pilot: {nodes: 2, time: '4:00:00'}\n"
    parsed, _ = spec.parse(text, "s.yaml")
    dumped = parsed.model_dump(mode="json")["addons"]["interlink"]["endpoints"][0]
    assert dumped["mode"] == "pilot"
    assert dumped["pilot"] == {
        "nodes": 2,
        "time": "4:00:00",
        "partition": None,
        "account": None,
        "max_pilots": 1,
        "idle_release": 300,
        "withdraw": 60,
    }


@pytest.mark.parametrize(
    ("extra", "line", "says"),
    [
        ("        pilot: {nodes: 2}\n", 5, "pilot is set but mode is job"),
        ("        mode: pilot\n        pilot: {time: soon}\n", 10, "not a SLURM time limit"),
        ("        mode: pilot\n        pilot: {nodes: 0}\n", 10, "greater than or equal to 1"),
        ("        mode: pilot\n        pilot: {partition: 'a b'}\n", 10, "not a SLURM name"),
        ("        mode: batch\n", 9, "'job' or 'pilot'"),
    ],
)
def test_spec_bad_pilot_fields_name_their_line(extra: str, line: int, says: str) -> None:
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(HEAD + GOOD + extra, "s.yaml")
    (issue,) = caught.value.issues
    assert says in issue.render(), issue.render()
    assert f"s.yaml:{line}:" in issue.render(), issue.render()
