"""Real mirror charts on the sim's kube-apiserver v1.20.2 through decice-sim-postrender:
the CRDs 1.20 refuses as upstream ships them are accepted once adapted, and a real
``helm install --post-renderer`` of Volcano (pre-install hook Job included) and of
Kubeflow Trainer with JobSet completes on a sim with the node agent."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from decice.sim import postrender
from decice.sim.binaries.resolve import BinarySet
from decice.sim.controlplane.loopback import ControlPlane, ControlPlaneInfo
from tests.integration.simsupport import start_agent, stop_process
from tests.support import BIN, REPO, require, wait_for

pytestmark = [
    pytest.mark.sim,
    pytest.mark.own_control_plane(
        reason="installs real charts whose CRDs and cluster-scoped objects would stay on "
        "a shared control plane, with an agent that ends Job pods after 1 s"
    ),
]

MIRROR = Path(os.environ.get("DECICE_TEST_MIRROR", str(REPO.parent / "shared" / "mirror")))
VOLCANO = "volcano-1.15.1.tgz"
TRAINER = "kubeflow-trainer-2.3.0.tgz"  # with its jobset subchart (crds/ file)
SCRIPT = BIN / "decice-sim-postrender"
GROUPS = [{"name_prefix": "chart", "count": 2, "capacity": {"cpu": "16", "memory": "64Gi"}}]


# ---------------------------------------------------------------- helpers


def chart(name: str) -> Path:
    path = MIRROR / "charts" / name
    require(path.is_file(), f"mirror chart {path} (set DECICE_TEST_MIRROR)")
    return path


def helm_env(tmp: Path, kubeconfig: Path | None = None, report: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != postrender.REPORT_ENV}
    env.update(
        HELM_CACHE_HOME=str(tmp / "helm-cache"),
        HELM_CONFIG_HOME=str(tmp / "helm-config"),
        HELM_DATA_HOME=str(tmp / "helm-data"),
    )
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    if report is not None:
        env[postrender.REPORT_ENV] = str(report)
    return env


def run(argv: list[str], env: dict, stdin: str | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, env=env, check=False, timeout=timeout
    )
    assert proc.returncode == 0, f"{' '.join(argv[:3])}: {proc.stderr[-3000:]}"
    return proc.stdout


def crds_of(binaries: BinarySet, tgz: Path, tmp: Path) -> list[dict[str, Any]]:
    """The chart's CRDs as upstream renders them (templates and crds/)."""
    text = run(
        [str(binaries.path("helm")), "template", "r", str(tgz), "--include-crds"], helm_env(tmp)
    )
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [
        d
        for d in yaml.load_all(text, Loader=loader)
        if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
    ]


def create_crd(ext: client.ApiextensionsV1Api, crd: dict, dry_run: bool = False) -> None:
    ext.create_custom_resource_definition(
        body=crd, dry_run="All" if dry_run else None, _preload_content=False
    )


def established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    raw = ext.read_custom_resource_definition(name, _preload_content=False)
    conds = json.loads(raw.data).get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conds)


def gone(ext: client.ApiextensionsV1Api, name: str) -> bool:
    try:
        ext.read_custom_resource_definition(name, _preload_content=False)
    except ApiException as exc:
        return exc.status == 404
    return False


# ---------------------------------------------------------------- CRDs on the session sim


@pytest.mark.parametrize("tgz", [VOLCANO, TRAINER])
def test_adapted_crds_are_accepted_by_1_20_and_the_raw_ones_are_not(
    tgz: str,
    sim_binaries: BinarySet,
    sim_control_plane: ControlPlaneInfo,
    sim_api: client.ApiClient,
    tmp_path: Path,
) -> None:
    require("helm" in sim_binaries, "helm binary")
    ext = client.ApiextensionsV1Api(sim_api)
    raw = crds_of(sim_binaries, chart(tgz), tmp_path)
    result = postrender.adapt_stream(yaml.safe_dump_all(raw))
    adapted = [d for d in yaml.safe_load_all(result.text) if isinstance(d, dict) and d.get("kind")]
    names = [c["metadata"]["name"] for c in adapted]
    assert names == [c["metadata"]["name"] for c in raw] and len(names) >= 4
    empty = {r.name for r in result.rewrites if r.rule == "empty-string-default"}
    refused = set()
    for crd in raw:
        try:
            create_crd(ext, crd, dry_run=True)
        except ApiException as exc:
            assert exc.status == 422, exc.body
            assert "in body must be of type string" in exc.body
            refused.add(crd["metadata"]["name"])
    assert refused == empty and refused  # exactly the CRDs with default: "" are refused
    try:
        for crd in adapted:
            create_crd(ext, crd)
        for name in names:
            wait_for(f"CRD {name} Established", lambda n=name: established(ext, n), timeout=60)
        if tgz == TRAINER:
            check_jobset_schema(sim_api)
    finally:
        for name in names:
            try:
                ext.delete_custom_resource_definition(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        for name in names:
            wait_for(f"CRD {name} deleted", lambda n=name: gone(ext, n), timeout=60)


def check_jobset_schema(api: client.ApiClient) -> None:
    """A JobSet is stored with the schema's remaining defaults applied (ports' TCP), and
    an imagePullSecrets entry without its map key is refused (the key is required now)."""
    custom = client.CustomObjectsApi(api)
    group, version, plural = "jobset.x-k8s.io", "v1alpha2", "jobsets"

    def jobset(name: str, pull: list[dict[str, str]]) -> dict[str, Any]:
        pod = {
            "restartPolicy": "Never",
            "imagePullSecrets": pull,
            "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}]}],
        }
        return {
            "apiVersion": f"{group}/{version}",
            "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {
                "replicatedJobs": [
                    {"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": pod}}}}
                ]
            },
        }

    stored = custom.create_namespaced_custom_object(
        group, version, "default", plural, jobset("js-ok", [{"name": "pull"}])
    )
    pod = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["ports"][0]["protocol"] == "TCP"
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            group, version, "default", plural, jobset("js-bad", [{}])
        )
    assert refused.value.status == 422 and "name" in refused.value.body
    custom.delete_namespaced_custom_object(group, version, "default", plural, "js-ok")


# ---------------------------------------------------------------- helm install on a sim


@pytest.fixture(scope="module")
def chart_sim(
    sim_binaries: BinarySet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlaneInfo]:
    """A control plane with kube-scheduler and the node agent (Job pods succeed after 1 s)."""
    require("kube-scheduler" in sim_binaries, "kube-scheduler binary")
    require("helm" in sim_binaries and "kubectl" in sim_binaries, "helm and kubectl binaries")
    require(SCRIPT.exists(), f"{SCRIPT}: reinstall the package (pip install -e .)")
    work = tmp_path_factory.mktemp("charts-sim")
    cp = ControlPlane(work / "cp", sim_binaries, scheduler=True, node_lifecycle=False)
    info = cp.start()
    proc = None
    try:
        proc, _status = start_agent(info, work, GROUPS, "--job-duration", "1s")
        yield info
    finally:
        if proc is not None:
            stop_process(proc)
        cp.stop()


def helm_install(
    binaries: BinarySet, info: ControlPlaneInfo, tmp: Path, release: str, tgz: str, ns: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``helm install --post-renderer decice-sim-postrender --wait``: the post-renderer's
    report and ``helm status -o json``."""
    report = tmp / f"{release}-report.json"
    env = helm_env(tmp, info.kubeconfig, report)
    run(
        [
            str(binaries.path("helm")),
            "install",
            release,
            str(chart(tgz)),
            "-n",
            ns,
            "--create-namespace",
            "--skip-crds",
            "--post-renderer",
            str(SCRIPT),
            "--wait",
            "--timeout",
            "240s",
        ],
        env,
    )
    status = json.loads(
        run([str(binaries.path("helm")), "status", release, "-n", ns, "-o", "json"], env)
    )
    assert status["info"]["status"] == "deployed"
    return dict(json.loads(report.read_text())), status


def test_helm_installs_volcano_with_its_hook_job(
    sim_binaries: BinarySet, chart_sim: ControlPlaneInfo, tmp_path: Path
) -> None:
    helm = str(sim_binaries.path("helm"))
    env = helm_env(tmp_path, chart_sim.kubeconfig)
    report, status = helm_install(
        sim_binaries, chart_sim, tmp_path, "volcano", VOLCANO, "volcano-system"
    )
    rules = {r["rule"] for r in report["rewrites"]}
    assert rules == {"empty-string-default", "list-map-key-required", "unknown-schema-field"}
    # the pre-install hook Job ran to completion: the agent ended its pod Succeeded
    jobs = [h for h in status["hooks"] if h["kind"] == "Job"]
    assert [(h["name"], h["last_run"]["phase"]) for h in jobs] == [
        ("volcano-admission-init", "Succeeded")
    ]
    apps = client.AppsV1Api(config.new_client_from_config(config_file=str(chart_sim.kubeconfig)))
    deployments = apps.list_namespaced_deployment("volcano-system").items
    assert {d.metadata.name for d in deployments} == {
        "volcano-admission",
        "volcano-controllers",
        "volcano-scheduler",
    }
    assert all(d.status.available_replicas == d.spec.replicas for d in deployments)
    run([helm, "uninstall", "volcano", "-n", "volcano-system", "--wait"], env)


def test_helm_installs_trainer_with_jobset_crds_created_first(
    sim_binaries: BinarySet, chart_sim: ControlPlaneInfo, tmp_path: Path
) -> None:
    helm, kubectl = str(sim_binaries.path("helm")), str(sim_binaries.path("kubectl"))
    env = helm_env(tmp_path, chart_sim.kubeconfig)
    # crds/ files bypass helm's post-renderer: adapted and created before the install
    rendered = run([helm, "template", "trainer", str(chart(TRAINER)), "--include-crds"], env)
    crds = run([str(SCRIPT), "--chart-crds"], env, stdin=rendered)
    run([kubectl, "create", "-f", "-"], env, stdin=crds)
    ext = client.ApiextensionsV1Api(config.new_client_from_config(str(chart_sim.kubeconfig)))
    wait_for("jobset CRD Established", lambda: established(ext, "jobsets.jobset.x-k8s.io"))
    # without the post-renderer, helm's own validation (the 1.20 OpenAPI) refuses the CRDs
    dry = ["--create-namespace", "--skip-crds", "--dry-run=server"]
    unadapted = subprocess.run(
        [helm, "install", "trainer", str(chart(TRAINER)), "-n", "kubeflow-system", *dry],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert unadapted.returncode != 0
    assert 'unknown field "x-kubernetes-validations"' in unadapted.stderr
    report, _status = helm_install(
        sim_binaries, chart_sim, tmp_path, "trainer", TRAINER, "kubeflow-system"
    )
    adapted = {s["name"] for s in report["summary"]}
    assert adapted == {
        "clustertrainingruntimes.trainer.kubeflow.org",
        "trainingruntimes.trainer.kubeflow.org",
        "trainjobs.trainer.kubeflow.org",
    }
    run([helm, "uninstall", "trainer", "-n", "kubeflow-system", "--wait"], env)
    run([kubectl, "delete", "crd", "jobsets.jobset.x-k8s.io"], env)
