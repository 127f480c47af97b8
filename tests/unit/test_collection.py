"""The decice.hybrid collection: syntax, build, lint, phase contract and a real local run.

The real run uses ``inventories/local`` (this machine over a local connection) for
the host-level phases preflight, baseline and verify. It writes only below pytest's
``tmp_path``: the state directory and the tracked paths the test changes.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.support import checkout_ansible_env, harmless_sysctl, load_file, require

pytestmark = pytest.mark.lint

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "ansible_collections" / "decice" / "hybrid"
BIN = Path(sys.executable).parent
PLAYBOOKS = ("up", "down", "reset", "verify")
PHASES = {
    "up": ["preflight", "baseline", "prepare", "kubernetes", "addons", "scheduler"],
    "down": ["scheduler", "addons"],
    "reset": ["kubernetes", "restore", "verify"],
    "verify": ["cluster", "verify"],
}
# Sections that other work on a shared test machine does not move: apt, services, and the
# labs the other test worker starts meanwhile (podman turns ip_forward on, a lab node's
# prepare loads br_netfilter: sysctls) do.
STABLE_SECTIONS = ["hostname", "swap", "fstab", "paths"]


def _tool(name: str) -> str:
    path = BIN / name
    require(path.exists(), f"{name} is not installed next to {sys.executable}")
    return str(path)


def _env() -> dict[str, str]:
    env = checkout_ansible_env(
        ANSIBLE_FORCE_COLOR="0",
        # one JSON line per result: messages are not re-wrapped, so substrings can be asserted
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
    )
    env["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _playbook(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return _run(
        _tool("ansible-playbook"), "-i", "inventories/local", f"playbooks/{name}.yml", *extra
    )


def _recap(output: str, host: str = "localhost") -> dict[str, int]:
    match = re.search(rf"^{re.escape(host)}\s*:\s*(.*)$", output.split("PLAY RECAP")[-1], re.M)
    assert match, f"no recap for {host}:\n{output[-3000:]}"
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _load_filter(name: str) -> ModuleType:
    return load_file(COLLECTION / "plugins" / "filter" / f"{name}.py", f"decice_filter_{name}")


# --- collections named by FQCN ---------------------------------------------------------

_NAME = r"[a-z_][a-z0-9_]*"
_FQCN = re.compile(rf"({_NAME}\.{_NAME})\.{_NAME}")
# a filter, a test, a lookup or query inside a Jinja expression
_JINJA_USE = re.compile(
    rf"(?:\|\s*|\bis\s+(?:not\s+)?|\b(?:lookup|query|q)\(\s*['\"])({_NAME}\.{_NAME})\.{_NAME}"
)
_PYTHON_IMPORT = re.compile(rf"\bansible_collections\.({_NAME}\.{_NAME})\.")
# ansible-core's own collections and this one: never dependencies
_NOT_DEPENDENCIES = {"ansible.builtin", "ansible.legacy", "decice.hybrid"}


def _collection_of(value: object) -> Iterator[str]:
    """The collection of a role or playbook named by FQCN (``ns.coll.name...``), if any."""
    match = _FQCN.match(value) if isinstance(value, str) else None
    if match:
        yield match.group(1)


def _yaml_collections(node: object, in_list: bool = False) -> Iterator[str]:
    """Collections a YAML document uses: a task's module or action (an FQCN key of a list
    item, so sysctl names like ``net.ipv4.ip_forward`` in dicts do not count), roles
    (``roles:``, ``role:``, ``include_role``/``import_role``), ``import_playbook`` and
    ``collections:``."""
    if isinstance(node, list):
        for item in node:
            yield from _yaml_collections(item, in_list=True)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        name = str(key)
        if in_list:
            match = _FQCN.fullmatch(name)
            if match:
                yield match.group(1)
            if name == "role":
                yield from _collection_of(value)
        if name == "roles" and isinstance(value, list):
            for role in value:
                yield from _collection_of(role)
        if name.endswith(("include_role", "import_role")) and isinstance(value, dict):
            yield from _collection_of(value.get("name"))
        if name.endswith("import_playbook"):
            yield from _collection_of(value)
        if name == "collections" and isinstance(value, list):
            yield from (str(c) for c in value)
        yield from _yaml_collections(value)


def _collections_used(root: Path) -> dict[str, set[str]]:
    """Collection -> files (relative to ``root``) of the roles, playbooks and plugins that
    name it by FQCN, leaving out ansible-core's own and ``decice.hybrid``."""
    used: dict[str, set[str]] = {}
    paths = [
        p for part in ("roles", "playbooks", "plugins") for p in sorted((root / part).rglob("*"))
    ]
    for path in (p for p in paths if p.is_file()):
        text = path.read_text(errors="replace")
        names: list[str] = []
        if path.suffix in {".yml", ".yaml"}:
            for document in yaml.safe_load_all(text):
                names.extend(_yaml_collections(document))
        if path.suffix in {".yml", ".yaml", ".j2"}:
            names.extend(m.group(1) for m in _JINJA_USE.finditer(text))
        if path.suffix == ".py":
            names.extend(m.group(1) for m in _PYTHON_IMPORT.finditer(text))
        for name in set(names) - _NOT_DEPENDENCIES:
            used.setdefault(name, set()).add(str(path.relative_to(root)))
    return used


def _declared_dependencies() -> dict[str, str]:
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    return {str(k): str(v) for k, v in (galaxy.get("dependencies") or {}).items()}


# --- static checks -------------------------------------------------------------------


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_wrapper_playbook_syntax(name: str) -> None:
    result = _playbook(name, "--syntax-check")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_phase_contract(name: str) -> None:
    """Plays are named "<phase>: ..." and tagged with exactly that phase, in order."""
    plays = yaml.safe_load((COLLECTION / "playbooks" / f"{name}.yml").read_text())
    phases = [play["name"].split(":", 1)[0] for play in plays]
    assert phases == PHASES[name]
    for play in plays:
        phase = play["name"].split(":", 1)[0]
        assert play["tags"] == [phase], play["name"]
        # the shared role first: versions, the add-on registry, state dir, kubeconfig
        assert play["roles"][0] == {"role": "decice.hybrid.common"}, play["name"]
        assert "vars_files" not in play, play["name"]


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_phase_contract_as_ansible_sees_it(name: str) -> None:
    """--list-tags through the wrapper: each play carries its phase tag and no 'always'."""
    result = _playbook(name, "--list-tags")
    assert result.returncode == 0, result.stdout + result.stderr
    plays = re.findall(r"play #\d+ \(.*?\): (\w+): .*?TAGS: \[(.*?)\]", result.stdout)
    assert [phase for phase, _ in plays] == PHASES[name]
    assert all(tags == phase for phase, tags in plays)


@pytest.mark.parametrize("target", ["playbooks/up.yml", "decice.hybrid.up"])
def test_versions_resolve_when_imported_and_when_run_directly(target: str) -> None:
    """The common role's versions resolve through the wrapper and as a collection playbook;
    interlink without endpoints says plainly that it installed nothing."""
    versions = yaml.safe_load(
        (COLLECTION / "roles" / "common" / "vars" / "main" / "versions.yml").read_text()
    )["decice_versions"]
    result = _run(
        _tool("ansible-playbook"),
        "-i",
        "inventories/local",
        target,
        "--tags",
        "addons",
        # the real add-ons need a cluster; this test is about the pins and interlink's message
        "-e",
        '{"volcano_enabled": false, "kubeflow_enabled": false, "kubeedge_enabled": false,'
        ' "sedna_enabled": false}',
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert versions["interlink"]["version"]
    # interlink is on, with no endpoints: it says so and changes nothing
    expected = (
        "decice.hybrid.interlink: no addons.interlink.endpoints in the spec - nothing to install"
    )
    assert expected in result.stdout
    assert _recap(result.stdout)["changed"] == 0


def test_every_role_is_complete() -> None:
    roles = sorted(p for p in (COLLECTION / "roles").iterdir() if p.is_dir())
    assert roles
    for role in roles:
        for part in (
            "defaults/main.yml",
            "meta/main.yml",
            "meta/argument_specs.yml",
            "tasks/main.yml",
            "README.md",
        ):
            if role.name == "common" and part == "tasks/main.yml":
                continue  # variables only: it costs a play nothing but its argument check
            assert (role / part).is_file(), f"{role.name}: {part} missing"


def test_one_common_layer() -> None:
    """Every role depends on decice.hybrid.common, which alone derives the state directory,
    the kubeconfig and the target from their inputs; add-on namespaces have one home, the
    registry; the common defaults resolve to what they say."""
    from ansible.template import Templar, trust_as_template

    roles = COLLECTION / "roles"
    for role in sorted(p for p in roles.iterdir() if p.is_dir() and p.name != "common"):
        meta = yaml.safe_load((role / "meta/main.yml").read_text())
        assert {"role": "decice.hybrid.common"} in meta["dependencies"], role.name
    derived = re.compile(
        r"decice_state_dir \||decice_kubeconfig \||decice_target \||decice_spec\.target"
    )
    offenders = [
        f"{path.relative_to(COLLECTION)}:{n}"
        for path in [*roles.rglob("*.yml"), *(COLLECTION / "playbooks").rglob("*.yml")]
        if path.parent != roles / "common" / "defaults"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "{{" in line and derived.search(line)
    ]
    assert offenders == []
    common = roles / "common"
    versions = yaml.safe_load((common / "vars/main/versions.yml").read_text())["decice_versions"]
    assert [k for k, v in versions.items() if isinstance(v, dict) and "namespace" in v] == []
    registry = yaml.safe_load((common / "vars/main/addons.yml").read_text())["decice_addons"]
    for entry in registry:
        defaults = roles / entry["name"] / "defaults/main.yml"
        value = yaml.safe_load(defaults.read_text())[f"{entry['name']}_namespace"]
        assert value == "{{ decice__addon_namespaces." + entry["name"] + " }}", entry
    raw = yaml.safe_load((common / "defaults/main.yml").read_text())
    values = {name: trust_as_template(text) for name, text in raw.items()}
    given = {"decice_state_dir": "/tmp/s", "decice_addons": registry}
    templar = Templar(loader=None, variables={**given, **values})
    resolve = lambda name: templar.template(values[name])  # noqa: E731
    assert resolve("decice__kubeconfig") == "/tmp/s/kubeconfig"
    assert resolve("decice__api_baseline") == "/tmp/s/addons/api-baseline.json"
    assert resolve("decice__addon_namespaces") == {e["name"]: e["namespace"] for e in registry}


def test_every_tasks_from_entry_has_an_argument_spec() -> None:
    """Each role entry point another file calls with tasks_from is in that role's
    meta/argument_specs.yml (so Ansible checks what it is given)."""
    pattern = re.compile(r"name: (?:decice\.hybrid\.)?(\w+)\n\s+tasks_from: ([\w./]+)")
    files = [*COLLECTION.rglob("*.yml"), *(REPO / "playbooks").glob("*.yml")]
    calls = {
        (m.group(1), m.group(2).removesuffix(".yml"))
        for path in files
        for m in pattern.finditer(path.read_text())
    }
    assert ("addon_engine", "apply_crds") in calls  # the scan sees the calls
    missing = []
    for role, entry in sorted(calls):
        specs = yaml.safe_load(
            (COLLECTION / "roles" / role / "meta/argument_specs.yml").read_text()
        )
        if entry not in specs["argument_specs"]:
            missing.append(f"{role} tasks_from {entry}")
    assert missing == []


def test_plugins_python_needs_are_in_requirements_txt() -> None:
    """Every package outside the standard library and Ansible that a plugin imports is in
    the collection's requirements.txt, which meta/execution-environment.yml names."""
    import sys

    distributions = {"yaml": "pyyaml"}
    listed = {
        re.split(r"[<>=\[ ]", line.strip(), maxsplit=1)[0].lower()
        for line in (COLLECTION / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    imported: dict[str, str] = {}
    for path in (COLLECTION / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in {
                    "ansible",
                    "ansible_collections",
                    "__future__",
                }:
                    imported.setdefault(distributions.get(top, top), str(path))
    assert "kubernetes" in imported  # the scan sees the plugins' imports
    missing = {d: where for d, where in imported.items() if d not in listed}
    assert missing == {}
    ee = yaml.safe_load((COLLECTION / "meta/execution-environment.yml").read_text())
    assert ee["dependencies"]["python"] == "requirements.txt"


def test_collection_builds(tmp_path: Path) -> None:
    result = _run(
        _tool("ansible-galaxy"),
        "collection",
        "build",
        str(COLLECTION),
        "--output-path",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (tarball,) = tmp_path.glob("decice-hybrid-*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    for required in (
        "MANIFEST.json",
        "meta/runtime.yml",
        "roles/common/vars/main/versions.yml",
        "roles/common/vars/main/addons.yml",
        "plugins/filter/snapshot.py",
        "roles/baseline/tasks/snapshot.yml",
        *(f"playbooks/{name}.yml" for name in PLAYBOOKS),
    ):
        assert required in names, f"{required} missing from {tarball.name}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


@pytest.mark.unit
def test_collection_scan_finds_fqcns_in_tasks_roles_and_jinja(tmp_path: Path) -> None:
    tasks = tmp_path / "roles" / "r" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(
        """---
- name: A block
  vars:
    sysctls: {net.ipv4.ip_forward: "1"}
    keys: [kernel.keys.root_maxbytes]
  block:
    - name: Firewall
      community.general.ufw: {state: enabled}
  rescue:
    - name: Filter and lookup
      ansible.builtin.debug:
        msg: "{{ x | ansible.utils.ipaddr }} {{ lookup('community.hashi_vault.vault', 'k') }}"
      when: x is not ansible.netcommon.resolvable
- name: A role
  ansible.builtin.include_role:
    name: containers.podman.thing
- name: This collection
  ansible.builtin.include_role:
    name: decice.hybrid.baseline
"""
    )
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "p.yml").write_text(
        "- name: P\n  hosts: all\n  roles: [kubernetes.core.helm_role, {role: ansible.posix.r}]\n"
    )
    used = _collections_used(tmp_path)
    assert set(used) == {
        "community.general",
        "ansible.utils",
        "community.hashi_vault",
        "ansible.netcommon",
        "containers.podman",
        "kubernetes.core",
        "ansible.posix",
    }
    assert used["kubernetes.core"] == {"playbooks/p.yml"}


@pytest.mark.unit
def test_every_collection_used_is_declared_in_galaxy_yml() -> None:
    """Every collection a role, playbook or plugin names by FQCN is a dependency, and every
    dependency is named somewhere."""
    declared = _declared_dependencies()
    missing = {
        name: sorted(files)
        for name, files in _collections_used(COLLECTION).items()
        if name not in declared
    }
    assert not missing, f"used but not in galaxy.yml dependencies: {missing}"
    unused = sorted(set(declared) - set(_collections_used(COLLECTION)))
    assert not unused, f"galaxy.yml declares dependencies nothing uses: {unused}"


def test_declared_dependencies_are_installed_in_range() -> None:
    """The collections galaxy.yml declares are installed (the `ansible` package) in range."""
    result = _run(_tool("ansible-galaxy"), "collection", "list", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    installed: dict[str, str] = {}
    for collections in json.loads(result.stdout).values():
        for name, info in collections.items():
            installed.setdefault(name, str(info["version"]))
    declared = _declared_dependencies()
    assert declared, "galaxy.yml declares no dependencies"
    for name, spec in declared.items():
        assert name in installed, f"{name} is declared in galaxy.yml but not installed"
        specifiers = SpecifierSet(spec.replace(" ", ""))
        assert Version(installed[name]) in specifiers, f"{name} {installed[name]} not in {spec}"


def test_ansible_lint_production_is_clean() -> None:
    result = _run(_tool("ansible-lint"), "--nocolor", "--profile", "production", timeout=900)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]


# --- filters (pure Python) -------------------------------------------------------------


@pytest.mark.unit
def test_snapshot_filters_normalise_and_diff() -> None:
    snapshot = _load_filter("snapshot")
    raw = {
        "packages": {
            "bash": [{"version": "5.2", "arch": "amd64"}],
            "kernel": [{"version": "6.1", "release": "3.el9", "epoch": 1}],
        },
        "services": {
            "ssh.service": {"state": "running", "status": "enabled"},
            "apt-daily.service": {"state": "running", "status": "static"},
        },
        "ignore_services": ["^apt-daily"],
        "ss_lines": ['tcp LISTEN 0 128 0.0.0.0:22 0.0.0.0:* users:(("sshd"))'],
        "slurped": [
            {
                "item": "/proc/swaps",
                "content": _b64("Filename Type Size Used Priority\n/swap file 100 5 -2\n"),
            },
            {"item": "/etc/hostname", "failed": True, "msg": "file not found"},
        ],
        "sysctl_keys": ["vm.swappiness", "net.bridge.bridge-nf-call-iptables"],
        "sysctl_lines": ["vm.swappiness = 60"],
        "paths": ["/etc/kubernetes", "/etc/cni"],
        "stat_lines": ["/etc/cni\tdirectory"],
    }
    snap = snapshot.host_snapshot(raw)
    assert snap["packages"] == ["bash=5.2 (amd64)", "kernel=1:6.1-3.el9"]
    assert snap["services"] == ["ssh.service running enabled"]
    assert snap["ports"] == ["tcp 0.0.0.0:22"]
    assert snap["swap"] == ["/swap file size=100 priority=-2"]
    assert "/etc/hostname=<absent>" in snap["hostname"]
    assert snap["sysctls"] == ["net.bridge.bridge-nf-call-iptables=<absent>", "vm.swappiness=60"]
    assert snap["paths"] == ["/etc/cni directory", "/etc/kubernetes absent"]

    later = {**snap, "paths": ["/etc/cni directory", "/etc/kubernetes directory"]}
    assert snapshot.snapshot_diff(snap, snap) == {}
    assert snapshot.snapshot_diff(snap, later) == {
        "paths": {"added": ["/etc/kubernetes directory"], "removed": ["/etc/kubernetes absent"]}
    }
    assert snapshot.snapshot_diff(snap, later, ["swap"]) == {}
    with pytest.raises(ValueError, match="unknown snapshot sections"):
        snapshot.snapshot_diff(snap, later, ["nope"])


@pytest.mark.unit
def test_text_table_aligns_columns() -> None:
    report = _load_filter("report")
    table = report.text_table(
        [{"host": "node1", "check": "vcpus", "found": 1, "expected": ">= 2"}],
        ["host", "check", "found", "expected"],
    )
    assert table.splitlines() == [
        "HOST   CHECK  FOUND  EXPECTED",
        "-----  -----  -----  --------",
        "node1  vcpus  1      >= 2",
    ]


# --- a real run on this machine --------------------------------------------------------


@pytest.mark.cleanslate
def test_local_up_baseline_then_verify(tmp_path: Path) -> None:
    state = tmp_path / "state"
    tracked = tmp_path / "tracked"
    tracked.mkdir()
    # Track paths inside tmp_path only, so the test can change one safely.
    settings = json.dumps(
        {
            "decice_state_dir": str(state),
            "baseline_paths": [str(tracked / "etc-kubernetes"), str(tracked / "var-lib-kubelet")],
        }
    )
    strict = json.dumps({"verify_sections": STABLE_SECTIONS})

    # verify before any baseline: a clear failure naming the file
    result = _playbook("verify", "-e", settings)
    assert result.returncode != 0
    assert f"{state}/baseline/localhost.json does not exist" in result.stdout

    # up, host-level phases only: preflight passes, the baseline is written 0600 in a 0700 dir
    first = _playbook("up", "--tags", "preflight,baseline", "-e", settings)
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-3000:]
    summary = re.search(r"preflight: (\d+) of (\d+) checks passed", first.stdout)
    assert summary, first.stdout[-3000:]
    assert "check(s) failed" not in first.stdout
    baseline = state / "baseline" / "localhost.json"
    assert stat.S_IMODE(baseline.stat().st_mode) == 0o600
    assert stat.S_IMODE(baseline.parent.stat().st_mode) == 0o700
    document = json.loads(baseline.read_text())
    assert document["host"] == "localhost"
    assert set(document["sections"]) == set(_load_filter("snapshot").SECTIONS)
    assert "root" in document["sections"]["users"]
    assert "lo" in document["sections"]["interfaces"]
    assert document["sections"]["packages"], "no packages observed"
    assert document["sections"]["paths"] == sorted(
        f"{tracked / name} absent" for name in ("etc-kubernetes", "var-lib-kubelet")
    )

    # taken once: the second run changes nothing and leaves the file as it was
    before = baseline.read_bytes()
    second = _playbook("up", "--tags", "preflight,baseline", "-e", settings)
    assert second.returncode == 0, second.stdout[-5000:]
    assert _recap(second.stdout)["changed"] == 0
    assert "a baseline is never overwritten" in second.stdout
    assert baseline.read_bytes() == before

    # every section is compared and reported (report only: a shared machine moves on)
    report = _playbook("verify", "-e", settings, "-e", '{"verify_fail_on_difference": false}')
    assert report.returncode == 0, report.stdout[-5000:]
    assert "verify: " in report.stdout

    # the sections nothing else touches are back to (still at) the baseline
    clean = _playbook("verify", "-e", settings, "-e", strict)
    assert clean.returncode == 0, clean.stdout[-5000:]
    assert "verify: clean slate" in clean.stdout
    assert _recap(clean.stdout)["changed"] == 0

    # a later change of baseline_paths: verify snapshots with the baseline's own settings,
    # so nothing differs; with verify_use_baseline_settings false (the way for baselines that
    # did not record them) it snapshots with the settings as set, and the path left out shows
    fewer = json.dumps({"baseline_paths": [str(tracked / "etc-kubernetes")]})
    own = _playbook("verify", "-e", settings, "-e", strict, "-e", fewer)
    assert own.returncode == 0, own.stdout[-5000:]
    as_set = _playbook(
        "verify", "-e", settings, "-e", strict, "-e", fewer,
        "-e", '{"verify_use_baseline_settings": false}',
    )  # fmt: skip
    assert as_set.returncode != 0
    assert f"paths removed {tracked / 'var-lib-kubelet'}" in as_set.stdout, as_set.stdout[-3000:]

    # a tracked path appears: verify sees it and fails
    (tracked / "etc-kubernetes").mkdir()
    dirty = _playbook("verify", "-e", settings, "-e", strict)
    assert dirty.returncode != 0
    # (counted over every compared kind: the machine may move on in another while tests run)
    assert re.search(
        r"localhost differs from its baseline in \d+ item\(s\) of \d+ kind\(s\) \([^)]*paths",
        dirty.stdout,
    ), dirty.stdout[-3000:]
    assert f"paths changed {tracked / 'etc-kubernetes'} (absent -> directory)" in dirty.stdout


@pytest.mark.local
def test_preflight_reports_a_host_that_cannot_become_root(tmp_path: Path) -> None:
    """A become that fails is a `become` row of the table with the fix, not a crash."""
    result = _playbook(
        "up",
        "--tags",
        "preflight",
        "-e",
        json.dumps(
            {
                "decice_state_dir": str(tmp_path / "state"),
                # become to another user through a missing program: fails like a refused sudo
                "ansible_become_user": "nobody",
                "ansible_become_exe": str(tmp_path / "no-such-sudo"),
            }
        ),
    )
    assert result.returncode != 0
    assert "preflight: 1 check(s) failed on 1 host(s)" in result.stdout, result.stdout[-5000:]
    assert re.search(r"localhost\s+become\s+fail\s+cannot become root: ", result.stdout)
    assert "fix become on localhost: connect as root (ansible_user: root)" in result.stdout
    assert _recap(result.stdout)["changed"] == 0


# --- prepare needs a baseline first --------------------------------------------------------


def _two_local_hosts(tmp_path: Path) -> Path:
    """node-a and node-b: this machine twice, over a local connection, in k8s_cluster."""
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    }
    path = tmp_path / "hosts.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"node-a": local, "node-b": local},
                    "children": {
                        "k8s_cluster": {"hosts": {"node-a": None, "node-b": None}},
                        "decice_edge": {},
                        "decice_hpc": {},
                    },
                }
            }
        )
    )
    return path


def _harmless_prepare(tmp_path: Path, state: Path) -> Path:
    """Settings under which prepare changes nothing of this machine, even if it runs: one
    per-namespace sysctl set to the value it has, its files in tmp_path, no modules, no swap,
    no kernel-wide change, no packages."""
    sysctl, current = harmless_sysctl()
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {
                "decice_state_dir": str(state),
                "prepare_kernel_wide": False,
                "prepare_swap_off": False,
                "prepare_modules": [],
                "prepare_packages": [],
                "prepare_sysctls": {sysctl: current},
                "prepare_sysctl_file": str(tmp_path / "90-decice.conf"),
                "prepare_modules_file": str(tmp_path / "decice.conf"),
            }
        )
    )
    return path


@pytest.mark.local
def test_prepare_refuses_hosts_without_baseline_and_changes_nothing(tmp_path: Path) -> None:
    inventory = str(_two_local_hosts(tmp_path))
    state = tmp_path / "state"
    settings = f"@{_harmless_prepare(tmp_path, state)}"
    planted = state / "baseline" / "node-a.json"
    planted.parent.mkdir(parents=True)
    planted.write_text("{}\n")  # prepare looks for the file; verify reads it later

    def prepare(*extra: str) -> subprocess.CompletedProcess[str]:
        return _run(
            _tool("ansible-playbook"), "-i", inventory, "playbooks/up.yml", "-e", settings, *extra
        )

    # node-b has no baseline: refused once for the play, naming it and the fix; node-a
    # (which has one) is not prepared either; check mode says the same
    for extra in (("--tags", "prepare"), ("--tags", "prepare", "--check")):
        refused = prepare(*extra)
        assert refused.returncode != 0, refused.stdout[-3000:]
        assert (
            f"prepare: refused - no baseline for node-b ({state}/baseline/<host>.json "
            "does not exist)"
        ) in refused.stdout, refused.stdout[-3000:]
        assert "Nothing was changed." in refused.stdout
        assert "fix: run `decice up --only baseline` first" in refused.stdout
        assert re.findall(r"^fatal: \[(.*?)\]", refused.stdout, re.M) == ["node-a"]  # once
        assert _recap(refused.stdout, "node-a")["changed"] == 0
        assert "prepare_gather" not in refused.stdout
        assert not (state / "prepare").exists()
        assert not (tmp_path / "90-decice.conf").exists()
    # a tag of one step of the role does not skip the check
    one_step = prepare("--tags", "prepare_sysctls")
    assert one_step.returncode != 0 and "no baseline for node-b" in one_step.stdout
    assert not (tmp_path / "90-decice.conf").exists()

    # both have one: prepare runs and records what it did (its idempotence with the check
    # in place: molecule's idempotence step, tests/integration/test_host_roles.py)
    (state / "baseline" / "node-b.json").write_text("{}\n")
    first = prepare("--tags", "prepare")
    assert first.returncode == 0, first.stdout[-5000:]
    assert sorted(p.name for p in (state / "prepare").iterdir()) == ["node-a.json", "node-b.json"]
    assert planted.read_text() == "{}\n"


@pytest.mark.local
def test_check_mode_prepare_counts_the_baseline_play_of_the_same_run(tmp_path: Path) -> None:
    """`up --check` from scratch: the baseline play would take them, so prepare is not refused."""
    state = tmp_path / "state"
    result = _playbook(
        "up",
        "--check",
        "--tags",
        "baseline,prepare",
        "-e",
        f"@{_harmless_prepare(tmp_path, state)}",
        "-e",
        json.dumps({"baseline_paths": [str(tmp_path / "tracked")]}),
    )
    assert result.returncode == 0, result.stdout[-5000:]
    assert "prepare: refused" not in result.stdout
    assert "prepare: localhost ready for Kubernetes" in result.stdout
    assert not state.exists(), "check mode wrote to the state directory"
    assert not (tmp_path / "90-decice.conf").exists()


@pytest.mark.local
def test_baseline_require_names_the_hosts_a_controller_play_delegates_to(tmp_path: Path) -> None:
    """A play on the controller names the hosts it changes: the check is about them."""
    state = tmp_path / "state"
    (state / "baseline").mkdir(parents=True)
    (state / "baseline" / "cp1.json").write_text("{}\n")
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "A controller play that would change cp1 and cp2",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Require their baselines",
                            "ansible.builtin.include_role": {
                                "name": "decice.hybrid.baseline",
                                "tasks_from": "require.yml",
                            },
                            "vars": {
                                "baseline_state_dir": str(state),
                                "baseline_require_phase": "scheduler",
                                "baseline_require_hosts": ["cp1", "cp2"],
                            },
                        }
                    ],
                }
            ]
        )
    )
    refused = _run(_tool("ansible-playbook"), "-i", "inventories/local", str(play))
    assert refused.returncode != 0
    assert "scheduler: refused - no baseline for cp2 (" in refused.stdout, refused.stdout[-3000:]
    (state / "baseline" / "cp2.json").write_text("{}\n")
    passed = _run(_tool("ansible-playbook"), "-i", "inventories/local", str(play))
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert _recap(passed.stdout)["changed"] == 0


@pytest.mark.parametrize(
    "module", sorted((COLLECTION / "plugins" / "modules").glob("*.py")), ids=lambda p: p.stem
)
def test_module_documentation_is_yaml(module: Path) -> None:
    """ansible-doc and ansible-lint read these blocks as YAML (a ': ' in prose breaks them)."""
    source = module.read_text()
    blocks = dict(
        re.findall(r'^(DOCUMENTATION|EXAMPLES|RETURN) = r"""(.*?)"""', source, re.M | re.S)
    )
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, module.name
    docs = {name: yaml.safe_load(text) for name, text in blocks.items()}
    assert docs["DOCUMENTATION"]["module"] == module.stem
    assert docs["DOCUMENTATION"]["short_description"]
