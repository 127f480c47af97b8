"""The scheduler role's placement-score settings, from the spec to the rendered unit and
Deployment, without a cluster: the CLI's play variables (``lifecycle.play_vars``) feed the
role's defaults, whose flags must equal the sim target's
(``decice.sim.scheduler_service.placement_flags``). One ansible-playbook run renders the
role's templates for every case; the objects on a real API server are in
test_scheduler_deploy.py.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from decice import lifecycle, paths, spec
from decice.sim.scheduler_service import placement_flags
from decice.targets import registry
from tests.support import BIN, REPO, run_captured, sim_spec

pytestmark = pytest.mark.local

ROLE = paths.collection_dir() / "roles" / "scheduler"
OPTIONS = (
    "scheduler_placement_scores_enabled",
    "scheduler_placement_scores_namespace",
    "scheduler_placement_scores_name",
    "scheduler_placement_scores_interval",
)
LOCAL = {"ansible_python_interpreter": "{{ ansible_playbook_python }}"}
CASES = {
    "custom": (
        "scheduler:\n  placement_scores:\n"
        "    enabled: true\n    namespace: ocm-scores\n    name: gpu-score\n    interval: 12.5\n"
    ),
    "defaults": "scheduler:\n  placement_scores: {enabled: true}\n",
    "disabled": "scheduler: {name: plain}\n",
}


def _loaded(tmp_path: Path, case: str) -> spec.LoadedSpec:
    directory = tmp_path / case
    directory.mkdir()
    text = sim_spec(case, ("w", 1, 'cpu: "1", memory: 1Gi')) + CASES[case]
    (directory / "decice.yaml").write_text(text)
    return spec.load(directory / "decice.yaml")


def _render_play(case: str, play_vars: dict[str, Any], out: Path) -> dict[str, Any]:
    template = "{{ lookup('ansible.builtin.template', role_path ~ '/templates/%s') }}"
    return {
        "name": f"render {case}",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [
            str(ROLE.parent / "common" / "defaults" / "main.yml"),
            str(ROLE / "defaults" / "main.yml"),
            str(ROLE / "vars" / "main.yml"),
        ],
        "vars": {"role_path": str(ROLE), **LOCAL, **play_vars},
        "tasks": [
            {
                "name": f"Render the {what}",
                "ansible.builtin.copy": {
                    "content": template % source,
                    "dest": str(out / f"{case}.{what}"),
                    "mode": "0600",
                },
            }
            for what, source in (
                ("unit", "decice-scheduler.service.j2"),
                ("manifests", "manifests.yaml.j2"),
            )
        ],
    }


def _preflight_play(out: Path) -> dict[str, Any]:
    """The role's own check of the settings, with a namespace that is not a DNS label."""
    return {
        "name": "bad placement-score settings",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {
            **LOCAL,
            "scheduler_hosts": ["cp-0"],
            "scheduler_placement_scores_enabled": True,
            "scheduler_placement_scores_namespace": "Not_A_Label",
        },
        "tasks": [
            {
                "name": "Run the preflight",
                "block": [
                    {
                        "name": "Check",
                        "ansible.builtin.include_role": {
                            "name": "decice.hybrid.scheduler",
                            "tasks_from": "preflight.yml",
                        },
                    }
                ],
                "rescue": [
                    {
                        "name": "Keep the message",
                        "ansible.builtin.copy": {
                            "content": "{{ ansible_failed_result.msg }}",
                            "dest": str(out / "preflight.msg"),
                            "mode": "0600",
                        },
                    }
                ],
            }
        ],
    }


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per case: its loaded spec, the unit's ExecStart argv and the manifests' objects."""
    tmp_path = tmp_path_factory.mktemp("sched-role-flags")
    out = tmp_path / "out"
    out.mkdir()
    loaded = {case: _loaded(tmp_path, case) for case in CASES}
    plays = [
        _render_play(case, lifecycle.play_vars(spec_, registry.get("sim")), out)
        for case, spec_ in loaded.items()
    ]
    plays.append(_preflight_play(out))
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = run_captured(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)],
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    cases: dict[str, Any] = {"preflight": (out / "preflight.msg").read_text()}
    for case, spec_ in loaded.items():
        unit = (out / f"{case}.unit").read_text()
        exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        objects = [o for o in yaml.safe_load_all((out / f"{case}.manifests").read_text()) if o]
        cases[case] = {
            "spec": spec_.spec.scheduler,
            "unit": shlex.split(exec_start.removeprefix("ExecStart=")),
            "objects": objects,
        }
    return cases


def _args(objects: list[dict[str, Any]]) -> list[str]:
    deploy = next(o for o in objects if o["kind"] == "Deployment")
    args: list[str] = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _flags_of(argv: list[str]) -> list[str]:
    start = argv.index("--placement-scores")
    return argv[start : start + 7]


def _placement_rbac(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["kind"]: o
        for o in objects
        if o["kind"] in ("Role", "RoleBinding")
        and o["metadata"]["name"].endswith("-placement-scores")
    }


@pytest.mark.parametrize("case", ["custom", "defaults"])
def test_enabled_passes_the_specs_flags_in_both_modes(rendered: dict[str, Any], case: str) -> None:
    got = rendered[case]
    expected = placement_flags(got["spec"])  # what the sim target passes
    assert expected  # enabled
    assert _flags_of(got["unit"]) == expected
    assert _flags_of(_args(got["objects"])) == expected
    if case == "custom":
        assert expected[1:] == [
            "--placement-scores-namespace",
            "ocm-scores",
            "--placement-scores-name",
            "gpu-score",
            "--placement-scores-interval",
            "12.5",
        ]
    else:  # the role's defaults are the spec's
        assert expected[2::2] == ["default", "resource-usage-score", "30"]


def test_enabled_deployment_may_publish_only_its_own_score(rendered: dict[str, Any]) -> None:
    rbac = _placement_rbac(rendered["custom"]["objects"])
    role, binding = rbac["Role"], rbac["RoleBinding"]
    assert role["metadata"] == {
        "name": "decice-scheduler-placement-scores",
        "namespace": "ocm-scores",
        "labels": {
            "app.kubernetes.io/name": "decice-scheduler",
            "app.kubernetes.io/instance": "decice-scheduler",
            "app.kubernetes.io/managed-by": "decice",
        },
    }
    group = ["cluster.open-cluster-management.io"]
    assert role["rules"] == [
        {"apiGroups": group, "resources": ["addonplacementscores"], "verbs": ["create"]},
        {
            "apiGroups": group,
            "resources": ["addonplacementscores"],
            "resourceNames": ["gpu-score"],
            "verbs": ["get"],
        },
        {
            "apiGroups": group,
            "resources": ["addonplacementscores/status"],
            "resourceNames": ["gpu-score"],
            "verbs": ["patch"],
        },
    ]
    assert binding["metadata"]["namespace"] == "ocm-scores"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "decice-scheduler", "namespace": "kube-system"}
    ]
    # the cluster-wide role gains nothing for the scores
    cluster_role = next(o for o in rendered["custom"]["objects"] if o["kind"] == "ClusterRole")
    assert "addonplacementscores" not in json.dumps(cluster_role)


def test_disabled_renders_no_flags_and_no_placement_rbac(rendered: dict[str, Any]) -> None:
    off = rendered["disabled"]
    assert placement_flags(off["spec"]) == []
    assert off["unit"][off["unit"].index("--scheduler-name") + 1] == "plain"  # the spec is read
    assert not [a for a in off["unit"] if a.startswith("--placement-scores")]
    assert not [a for a in _args(off["objects"]) if a.startswith("--placement-scores")]
    assert _placement_rbac(off["objects"]) == {}


def test_bad_settings_are_refused_by_the_roles_preflight(rendered: dict[str, Any]) -> None:
    message = rendered["preflight"]
    assert "bad placement-score settings (namespace Not_A_Label" in message
    assert "scheduler.placement_scores" in message


def test_both_entry_points_document_the_options() -> None:
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    for entry in ("main", "uninstall"):
        options = specs["argument_specs"][entry]["options"]
        for name in OPTIONS:
            assert options[name]["default"] == defaults[name], (entry, name)
    types = {n: specs["argument_specs"]["main"]["options"][n]["type"] for n in OPTIONS}
    assert list(types.values()) == ["bool", "str", "str", "float"]
