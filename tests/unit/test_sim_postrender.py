"""decice-sim-postrender: the real mirror charts rendered by helm go through it; only
what Kubernetes 1.20 refuses changes, every change is reported, the rest keeps its bytes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from decice.sim import postrender
from decice.sim.binaries.resolve import describe_binaries
from tests.support import BIN, REPO, crd_manifest, require, run_captured

pytestmark = pytest.mark.unit

MIRROR = Path(os.environ.get("DECICE_TEST_MIRROR", str(REPO.parent / "shared" / "mirror")))
SCRIPT = "decice-sim-postrender"
# chart file -> rewrites per rule, measured against the sim's kube-apiserver v1.20.2
# (default values; helm template --include-crds, so crds/ files are in the stream)
MEASURED = {
    "volcano-1.15.1.tgz": {
        "empty-string-default": 132,
        "list-map-key-required": 4,
        "unknown-schema-field": 1,
    },
    "kubeflow-trainer-2.3.0.tgz": {  # + its jobset subchart's crds/
        "empty-string-default": 123,
        "list-map-key-required": 4,
        "unknown-schema-field": 47,
    },
    "jobset-0.12.0.tgz": {
        "empty-string-default": 33,
        "list-map-key-required": 1,
        "unknown-schema-field": 8,
    },
    "lws-v0.8.0.tgz": {"empty-string-default": 66, "list-map-key-required": 2},
    "cloudcore-1.23.0.tgz": {"empty-string-default": 7},
    "sedna-0.1.0.tgz": {"empty-string-default": 432, "list-map-key-required": 18},
    "edgemesh-0.1.0.tgz": {},
    "edgemesh-gateway-0.1.0.tgz": {},
    "interlink-0.6.1.tgz": {},
}


# ---------------------------------------------------------------- helpers


def helm_path() -> Path:
    """helm from the sim's binaries (cache or explicit dir; nothing is built), else PATH."""
    try:
        planned = describe_binaries(names=["helm"]).path("helm")
    except Exception:  # a bad $DECICE_K8S_BIN_DIR: fall back to PATH
        planned = None
    if planned is not None and os.access(planned, os.X_OK):
        return planned
    found = shutil.which("helm")
    require(found is not None, "helm is not in the sim binary cache nor on PATH")
    return Path(str(found))


def chart(name: str) -> Path:
    path = MIRROR / "charts" / name
    require(path.is_file(), f"mirror chart {path} (set DECICE_TEST_MIRROR)")
    return path


def helm_template(tgz: Path, *extra: str) -> str:
    proc = run_captured(
        [str(helm_path()), "template", "r", str(tgz), "--include-crds", *extra], timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def naive_documents(text: str) -> list[str]:
    """Documents split on separator lines, independent of the module's own splitter."""
    return [d for d in re.split(r"(?m)^---[ \t]*\n", text) if d.strip()]


def load(doc: str) -> Any:
    return yaml.load(doc, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def is_crd(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "CustomResourceDefinition"


def schemas(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict]]:
    """Every JSONSchemaProps in a CRD (by walking properties/items/... below the roots)."""
    spec = obj.get("spec") or {}
    roots = []
    if (spec.get("validation") or {}).get("openAPIV3Schema"):
        roots.append(
            (("spec", "validation", "openAPIV3Schema"), spec["validation"]["openAPIV3Schema"])
        )
    for i, v in enumerate(spec.get("versions") or ()):
        if (v.get("schema") or {}).get("openAPIV3Schema"):
            roots.append(
                (
                    ("spec", "versions", i, "schema", "openAPIV3Schema"),
                    v["schema"]["openAPIV3Schema"],
                )
            )
    stack = list(roots)
    while stack:
        where, node = stack.pop()
        yield where, node
        for key in ("properties", "patternProperties", "definitions"):
            for name, sub in (node.get(key) or {}).items():
                stack.append(((*where, key, name), sub))
        for key in ("items", "additionalProperties", "not"):
            sub = node.get(key)
            if isinstance(sub, dict):
                stack.append(((*where, key), sub))
        for key in ("allOf", "oneOf", "anyOf"):
            for i, sub in enumerate(node.get(key) or ()):
                stack.append(((*where, key, i), sub))


def resolve(obj: Any, pointer: str) -> Any:
    """The value at an RFC 6901 JSON Pointer."""
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


# ---------------------------------------------------------------- the real charts


@dataclass(frozen=True)
class Rendered:
    """One chart's helm template output before and after the post-renderer, parsed once."""

    name: str
    result: postrender.Result
    before: list[str]
    after: list[str]
    before_objs: list[Any]
    after_objs: list[Any]


@pytest.fixture(scope="module", params=sorted(MEASURED))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    name = str(request.param)
    text = helm_template(chart(name))
    result = postrender.adapt_stream(text)
    before, after = naive_documents(text), naive_documents(result.text)
    return Rendered(
        name, result, before, after, [load(d) for d in before], [load(d) for d in after]
    )


def keyed(objs: list[Any]) -> dict[tuple[str, str], Any]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs if isinstance(o, dict)}


def test_real_chart_rewrites_are_the_measured_ones(rendered):
    assert dict(Counter(r.rule for r in rendered.result.rewrites)) == MEASURED[rendered.name]


def test_no_empty_string_default_nor_unknown_field_remains(rendered):
    crds = [o for o in rendered.after_objs if is_crd(o)]
    for crd in crds:
        for where, node in schemas(crd):
            assert node.get("default") != "" or node.get("nullable") is True, where
            assert set(node) <= postrender.SCHEMA_FIELDS, (crd["metadata"]["name"], where)
            if node.get("x-kubernetes-list-type") == "map":
                props = node["items"].get("properties") or {}
                for key in node.get("x-kubernetes-list-map-keys") or ():
                    assert "default" in props.get(key, {}) or key in node["items"].get(
                        "required", []
                    ), (crd["metadata"]["name"], where, key)


def test_objects_without_rewrites_keep_their_bytes(rendered):
    changed = {(r.kind, r.name) for r in rendered.result.rewrites}
    assert len(rendered.before) == len(rendered.after)
    kept = 0
    for old, new, obj in zip(rendered.before, rendered.after, rendered.before_objs, strict=True):
        if isinstance(obj, dict) and (obj.get("kind"), obj["metadata"]["name"]) in changed:
            assert is_crd(obj)  # only CRDs are rewritten in the real charts
            assert new.startswith(postrender._leading_comments(old))
            continue
        assert new == old
        kept += 1
    assert kept >= 1


def test_report_lists_each_rewrite_at_its_path(rendered):
    result = rendered.result
    before, after = keyed(rendered.before_objs), keyed(rendered.after_objs)
    empty_defaults = validations = 0
    for obj in before.values():
        for _where, node in schemas(obj) if is_crd(obj) else ():
            empty_defaults += node.get("default") == "" and node.get("nullable") is not True
            validations += "x-kubernetes-validations" in node
    counts = Counter(r.rule for r in result.rewrites)
    assert counts["empty-string-default"] == empty_defaults
    assert counts["unknown-schema-field"] == validations
    for rewrite in result.rewrites:
        old, new = before[(rewrite.kind, rewrite.name)], after[(rewrite.kind, rewrite.name)]
        if rewrite.rule == "empty-string-default":
            assert resolve(old, rewrite.path) == ""
            with pytest.raises(KeyError):
                resolve(new, rewrite.path)
        elif rewrite.rule == "unknown-schema-field":
            assert rewrite.path.endswith("/x-kubernetes-validations")
            assert resolve(old, rewrite.path)
            with pytest.raises(KeyError):
                resolve(new, rewrite.path)
        else:
            assert rewrite.rule == "list-map-key-required"
            assert resolve(new, rewrite.path) == "name"  # imagePullSecrets[].name
    data = postrender.report(result)
    assert len(data["rewrites"]) == len(result.rewrites)
    assert sum(s["count"] for s in data["summary"]) == len(result.rewrites)


def test_chart_crds_keeps_only_crds_directory_files():
    text = helm_template(chart("kubeflow-trainer-2.3.0.tgz"))
    result = postrender.adapt_stream(text, chart_crds_only=True)
    objs = [o for o in map(load, naive_documents(result.text)) if isinstance(o, dict)]
    # the trainer's own CRDs are templates (post-rendered by helm install); jobset's are crds/
    assert [o["metadata"]["name"] for o in objs] == ["jobsets.jobset.x-k8s.io"]
    assert {r.name for r in result.rewrites} == {"jobsets.jobset.x-k8s.io"}
    sedna = postrender.adapt_stream(helm_template(chart("sedna-0.1.0.tgz")), chart_crds_only=True)
    assert sedna.objects == 11
    volcano = helm_template(chart("volcano-1.15.1.tgz"))
    assert postrender.adapt_stream(volcano, chart_crds_only=True).objects == 0


def test_chart_crds_leaves_out_a_crd_the_templates_render_too():
    """helm installs a CRD its templates render (through the post-renderer): --chart-crds
    keeps only what crds/ alone holds, as the add-on engine's crds.yml applies it."""

    def crd(name: str) -> dict[str, Any]:
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name}}  # fmt: skip

    text = "".join(
        f"---\n# Source: c/{path}\n{yaml.safe_dump(doc)}"
        for path, doc in [
            ("crds/both.yaml", crd("both.x.io")),
            ("crds/only.yaml", crd("only.x.io")),
            ("charts/sub/crds/sub.yaml", crd("sub.x.io")),
            ("templates/both.yaml", crd("both.x.io")),
            ("templates/cm.yaml", {"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "CustomResourceDefinition"}}),
        ]
    )  # fmt: skip
    result = postrender.adapt_stream(text, chart_crds_only=True, as_text=False)
    assert [d["metadata"]["name"] for d in result.documents] == ["only.x.io", "sub.x.io"]
    assert result.objects == 2


def test_json_output_is_the_yaml_output_as_data_and_skips_writing_the_yaml():
    """--json (the add-on engine's CRD gathering) gives the documents the YAML output holds,
    comment-only and dropped documents left out, without writing the YAML."""
    # Trainer's JobSet CRD (rewritten for 1.20): Sedna's 10.8 MB would take 3 parses here
    text = helm_template(chart("kubeflow-trainer-2.3.0.tgz"))
    as_yaml = postrender.adapt_stream(text, chart_crds_only=True)
    as_data = postrender.adapt_stream(text, chart_crds_only=True, as_text=False)
    assert as_data.text == ""
    assert as_data.rewrites == as_yaml.rewrites and as_data.rewrites
    expected = [o for o in map(load, naive_documents(as_yaml.text)) if o is not None]
    assert [o["metadata"]["name"] for o in expected] == ["jobsets.jobset.x-k8s.io"]
    cli = run_captured([str(BIN / SCRIPT), "--chart-crds", "--json"], input=text, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == expected == as_data.documents
    dropped = "# only a comment\n---\n" + yaml.safe_dump(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "p"},
        }
    )
    assert postrender.adapt_stream(dropped, as_text=False).documents == []


def test_no_report_for_a_stream_without_objects(tmp_path):
    """A chart without crds/ through --chart-crds: an empty list and no report (the record
    lists no adaptation of CRDs that do not exist)."""
    report = tmp_path / "report.json"
    text = "---\n# Source: c/templates/cm.yaml\n" + yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    )
    args = [str(BIN / SCRIPT), "--chart-crds", "--json", "--report", str(report)]
    cli = run_captured(args, input=text, timeout=60)
    assert (cli.returncode, cli.stdout) == (0, "[]\n"), cli.stderr
    assert not report.exists()
    cli = run_captured([args[0], *args[2:]], input=text, timeout=60)  # no --chart-crds
    assert cli.returncode == 0, cli.stderr
    assert json.loads(report.read_text())["objects"] == 1


def test_helm_runs_it_as_post_renderer_and_it_writes_the_report(tmp_path):
    script = BIN / SCRIPT
    require(script.exists(), f"{script}: reinstall the package (pip install -e .)")
    report = tmp_path / "report.json"
    env = {**os.environ, postrender.REPORT_ENV: str(report)}
    proc = run_captured(
        [
            str(helm_path()),
            "template",
            "r",
            str(chart("volcano-1.15.1.tgz")),
            "--post-renderer",
            str(script),
        ],
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert 'default: ""' not in proc.stdout and "default: ''" not in proc.stdout
    data = json.loads(report.read_text())
    assert data["target"] == "v1.20" and data["objects"] >= 30
    first = data["rewrites"][0]
    assert set(first) == {"kind", "name", "namespace", "path", "rule", "change"}
    assert first["kind"] == "CustomResourceDefinition" and first["path"].startswith("/spec/")
    names = {s["name"] for s in data["summary"]}
    assert {"jobs.batch.volcano.sh", "hypernodes.topology.volcano.sh"} <= names
    assert "queues.scheduling.volcano.sh" not in names  # nothing 1.20 refuses in it


def test_console_script_is_declared():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[SCRIPT] == "decice.sim.postrender:main"


# ---------------------------------------------------------------- hand-made cases


def crd_with(prop: dict, version_extra: dict | None = None) -> dict:
    spec = {"type": "object", "properties": {"f": prop}}
    schema = {"type": "object", "properties": {"spec": spec}}
    return crd_manifest("example.com", "Thing", "things", schema, **(version_extra or {}))


def adapt_one(obj: dict) -> tuple[dict | None, list[postrender.Rewrite]]:
    result = postrender.adapt_stream(yaml.safe_dump(obj))
    docs = naive_documents(result.text)
    return (load(docs[0]) if docs else None), result.rewrites


F = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/f"


def test_empty_string_defaults_go_other_defaults_stay():
    out, rewrites = adapt_one(crd_with({"type": "string", "default": ""}))
    assert "default" not in resolve(out, F)
    assert [(r.path, r.rule) for r in rewrites] == [(f"{F}/default", "empty-string-default")]
    for prop in (
        {"type": "string", "default": "x"},
        {"type": "integer", "default": 0},
        {"type": "boolean", "default": False},
        {"type": "string", "nullable": True, "default": ""},  # 1.20 accepts this one
    ):
        out, rewrites = adapt_one(crd_with(prop))
        assert rewrites == [] and resolve(out, F) == prop


def test_empty_strings_inside_an_object_default_are_pruned():
    prop = {
        "type": "object",
        "default": {"a": "", "b": "keep", "c": {"d": ""}, "e": ["", "x"]},
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
    }
    out, rewrites = adapt_one(crd_with(prop))
    assert resolve(out, F)["default"] == {"b": "keep", "c": {}}
    assert sorted(r.path for r in rewrites) == [
        f"{F}/default/a",
        f"{F}/default/c/d",
        f"{F}/default/e",
    ]
    out, rewrites = adapt_one(
        crd_with({"type": "array", "items": {"type": "string"}, "default": [""]})
    )
    assert "default" not in resolve(out, F) and len(rewrites) == 1


def test_list_map_key_without_default_becomes_required():
    prop = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name", "port"],
        "items": {
            "type": "object",
            "required": ["port"],
            "properties": {
                "name": {"type": "string", "default": ""},
                "port": {"type": "integer"},
            },
        },
    }
    out, rewrites = adapt_one(crd_with(prop))
    assert resolve(out, F)["items"]["required"] == ["port", "name"]
    assert [r.rule for r in rewrites] == ["empty-string-default", "list-map-key-required"]
    assert rewrites[1].path == f"{F}/items/required/1"


def test_fields_unknown_to_1_20_are_removed():
    prop = {"type": "string", "x-kubernetes-validations": [{"rule": "self != ''"}]}
    out, rewrites = adapt_one(crd_with(prop, {"selectableFields": [{"jsonPath": ".spec.f"}]}))
    assert resolve(out, F) == {"type": "string"}
    assert "selectableFields" not in out["spec"]["versions"][0]
    assert {(r.path, r.rule) for r in rewrites} == {
        ("/spec/versions/0/selectableFields", "unknown-crd-version-field"),
        (f"{F}/x-kubernetes-validations", "unknown-schema-field"),
    }


@pytest.mark.parametrize(
    ("kind", "newer", "older", "gone"),
    [
        ("PodDisruptionBudget", "policy/v1", "policy/v1beta1", "unhealthyPodEvictionPolicy"),
        ("CronJob", "batch/v1", "batch/v1beta1", "timeZone"),
        ("HorizontalPodAutoscaler", "autoscaling/v2", "autoscaling/v2beta2", None),
    ],
)
def test_newer_api_versions_get_the_one_1_20_serves(kind, newer, older, gone):
    spec = {"x": 1, **({gone: "v"} if gone else {})}
    obj = {
        "apiVersion": newer,
        "kind": kind,
        "metadata": {"name": "n", "namespace": "ns"},
        "spec": spec,
    }
    out, rewrites = adapt_one(obj)
    assert out["apiVersion"] == older and out["spec"] == {"x": 1}
    assert [(r.path, r.rule) for r in rewrites] == [("/apiVersion", "api-version")] + (
        [(f"/spec/{gone}", "unknown-field")] if gone else []
    )
    assert rewrites[0].namespace == "ns"
    already = {**obj, "apiVersion": older}
    assert adapt_one(already)[1] == []


def test_kinds_without_api_in_1_20_are_left_out():
    text = (
        "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
        "metadata: {name: p}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    )
    result = postrender.adapt_stream(text)
    assert [load(d)["kind"] for d in naive_documents(result.text)] == ["ConfigMap"]
    assert [(r.kind, r.rule) for r in result.rewrites] == [
        ("ValidatingAdmissionPolicy", "dropped-object")
    ]


def test_stream_details_survive():
    text = (
        "# Source: c/templates/a.yaml\n--- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n"
        "---\n# Source: c/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n"
        "data:\n  when: 2024-01-02\n  on: yes\n"
        "---\n---\n# only a comment\n"
    )
    result = postrender.adapt_stream(text)
    assert result.objects == 2 and result.rewrites == []
    objs = [d for d in naive_documents(result.text) if isinstance(load(d), dict)]
    assert load(objs[0]) == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    b_doc = text.split("---\n")[1]
    assert b_doc.startswith("# Source: c/templates/b.yaml") and objs[1] == b_doc  # same bytes


def test_crd_rewrite_keeps_source_comment_and_leaves_timestamps_as_strings():
    crd = crd_with({"type": "string", "default": "", "example": "2024-01-02"})
    text = "---\n# Source: c/crds/things.yaml\n" + yaml.safe_dump(crd, sort_keys=False)
    out = postrender.adapt_stream(text).text
    assert out.startswith("---\n# Source: c/crds/things.yaml\n")
    assert "example: '2024-01-02'" in out


def test_cli_report_from_env_or_flag_and_none_without(tmp_path):
    text = yaml.safe_dump(crd_with({"type": "string", "default": ""}))
    argv = [sys.executable, "-m", "decice.sim.postrender"]
    env = {k: v for k, v in os.environ.items() if k != postrender.REPORT_ENV}

    def run(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        return run_captured(
            [*argv, *args], input=text, cwd=tmp_path, env={**env, **extra_env}, timeout=60
        )

    plain = run()
    assert plain.returncode == 0 and 'default: ""' not in plain.stdout
    assert list(tmp_path.iterdir()) == []  # no report without the variable or flag
    via_env = run(**{postrender.REPORT_ENV: str(tmp_path / "env.json")})
    assert via_env.stdout == plain.stdout
    assert json.loads((tmp_path / "env.json").read_text())["rewrites"][0]["rule"] == (
        "empty-string-default"
    )
    run("--report", str(tmp_path / "flag.json"))
    assert json.loads((tmp_path / "flag.json").read_text())["objects"] == 1
    bad = run_captured(argv, input="a: [\n", env=env, timeout=60)
    assert bad.returncode == 1 and "not YAML" in bad.stderr and bad.stdout == ""


def test_webhook_match_conditions_and_grpc_probes_are_removed():
    text = yaml.safe_dump_all(
        [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "m"},
                "webhooks": [
                    {"name": "a.example.org", "sideEffects": "None"},
                    {
                        "name": "b.example.org",
                        "matchConditions": [{"name": "c", "expression": "true"}],
                    },
                ],
            },
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d", "namespace": "n"},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "db",
                                    "livenessProbe": {"grpc": {"port": 9090}},
                                    "readinessProbe": {"tcpSocket": {"port": 9090}},
                                }
                            ]
                        }
                    }
                },
            },
        ]
    )
    result = postrender.adapt_stream(text)
    hook, deployment = (load(d) for d in naive_documents(result.text))
    assert hook["webhooks"] == [
        {"name": "a.example.org", "sideEffects": "None"},
        {"name": "b.example.org"},
    ]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "livenessProbe" not in container
    assert container["readinessProbe"] == {"tcpSocket": {"port": 9090}}
    assert [(r.rule, r.path) for r in result.rewrites] == [
        ("webhook-match-conditions", "/webhooks/1/matchConditions"),
        ("probe-grpc", "/spec/template/spec/containers/0/livenessProbe"),
    ]


def test_service_ports_get_their_protocol_for_server_side_apply_only():
    text = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s", "namespace": "n"},
            "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]},
        }
    )
    assert postrender.adapt_stream(text).rewrites == []
    result = postrender.adapt_stream(text, server_side=True)
    (service,) = (load(d) for d in naive_documents(result.text))
    assert service["spec"]["ports"] == [
        {"port": 80, "protocol": "TCP"},
        {"port": 53, "protocol": "UDP"},
    ]
    assert [(r.rule, r.path) for r in result.rewrites] == [
        ("port-protocol", "/spec/ports/0/protocol")
    ]
    cli = run_captured([str(BIN / SCRIPT), "--server-side"], input=text, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "protocol: TCP" in cli.stdout
