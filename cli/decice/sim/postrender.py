"""Adapt rendered manifests to the sim's Kubernetes 1.20, and only what 1.20 refuses.

A Helm post-renderer (``helm install --post-renderer decice-sim-postrender``): reads a
multi-document YAML stream on stdin and writes it to stdout. A document that needs no
rewrite is written back exactly as it came (same bytes); one that does is written as
re-serialized YAML after its leading comment lines (``# Source: ...``).

Rewrites (each measured against the sim's kube-apiserver v1.20.2, and each reported):

- ``empty-string-default``: in a CustomResourceDefinition schema, 1.20 reads an empty
  string in a ``default`` as null and refuses the CRD (``default: Invalid value: "null":
  in body must be of type string``). A ``default: ""`` is removed (unless the schema is
  ``nullable``, which 1.20 accepts); inside an object default, the members whose value
  is ``""`` are removed; a list default holding ``""`` is removed.
- ``list-map-key-required``: 1.20 refuses a key of ``x-kubernetes-list-map-keys`` that
  has neither a default nor is required ("must have a default or be a required
  property"); once its ``default: ""`` is gone (``imagePullSecrets[].name`` in every
  PodSpec copy), the key is added to the item schema's ``required``.
- ``unknown-schema-field``: schema fields 1.20's ``JSONSchemaProps`` does not have
  (``x-kubernetes-validations``, CEL rules, 1.25+) are removed. Helm and kubectl
  validate manifests against the server's OpenAPI and refuse the CRD ("unknown field");
  the 1.20 apiserver itself would drop them unseen, so removing them loses nothing there.
- ``unknown-crd-version-field``: fields of a CRD version 1.20 does not have
  (``selectableFields``, 1.30+) are removed, for the same reason.
- ``api-version``: kinds whose API version came after 1.20 but whose older version 1.20
  serves with the same fields (PodDisruptionBudget ``policy/v1`` -> ``policy/v1beta1``,
  CronJob ``batch/v1`` -> ``batch/v1beta1``, HorizontalPodAutoscaler ``autoscaling/v2``
  -> ``autoscaling/v2beta2``) get that older version; fields newer than 1.20 in them
  are removed and reported (``unknown-field``).
- ``webhook-match-conditions``: ``matchConditions`` of a webhook (1.28+) is removed:
  1.20's server-side apply refuses the object ("field not declared in schema"), and
  without it the webhook is called for every request its rules match.
- ``probe-grpc``: a container probe by ``grpc`` (1.24+) is removed, the rest of the
  container kept (1.20 refuses the field; on the sim no container runs anyway).
- ``port-protocol`` (``--server-side`` only): a Service port without ``protocol`` gets
  the API default ``TCP``: 1.20's server-side apply needs every key of the ports
  list-map written out ("associative list with keys has an element that omits key
  field \"protocol\"").
- ``dropped-object``: objects of kinds 1.20 has no API for at all
  (ValidatingAdmissionPolicy and its Binding) are left out of the output.

Everything else passes through untouched, whatever its age: this is not a linter.

Helm 3 hands a post-renderer only the release's templates, not its hooks and not the
files of a chart's ``crds/`` directories, which ``helm install`` creates as they are.
For charts with ``crds/`` (JobSet in Kubeflow Trainer, cloudcore, Sedna, LWS): create
``helm template ... --include-crds | decice-sim-postrender --chart-crds`` first (only
the ``crds/`` documents no template renders too, adapted), then ``helm install
--skip-crds --post-renderer decice-sim-postrender``.

Report: when ``$DECICE_POSTRENDER_REPORT`` (or ``--report PATH``) names a file, a JSON
report of every rewrite is written there (see :func:`report`); without one, or when the
output holds no object (``--chart-crds`` of a chart without ``crds/``), no file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Container, Iterator, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from decice import atomicfile

REPORT_ENV = "DECICE_POSTRENDER_REPORT"
TARGET = "v1.20"

# JSONSchemaProps as Kubernetes 1.20's apiextensions.k8s.io/v1 (and v1beta1) define it
SCHEMA_FIELDS = frozenset(
    {
        "id",
        "$schema",
        "$ref",
        "description",
        "type",
        "format",
        "title",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "allOf",
        "oneOf",
        "anyOf",
        "not",
        "properties",
        "additionalProperties",
        "patternProperties",
        "dependencies",
        "additionalItems",
        "definitions",
        "externalDocs",
        "example",
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
    }
)
# CustomResourceDefinitionVersion in 1.20
CRD_VERSION_FIELDS = frozenset(
    {
        "name",
        "served",
        "storage",
        "deprecated",
        "deprecationWarning",
        "schema",
        "subresources",
        "additionalPrinterColumns",
    }
)
# kind -> (newer apiVersion, the version 1.20 serves, spec fields 1.20 lacks there)
OLDER_API = {
    "PodDisruptionBudget": ("policy/v1", "policy/v1beta1", ("unhealthyPodEvictionPolicy",)),
    "CronJob": ("batch/v1", "batch/v1beta1", ("timeZone",)),
    "HorizontalPodAutoscaler": ("autoscaling/v2", "autoscaling/v2beta2", ()),
}
NO_API = frozenset({"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})
WEBHOOK_CONFIGURATIONS = frozenset(
    {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
)
# kind -> where its pod template sits (Pod itself: the object)
POD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
CRD_KIND = "CustomResourceDefinition"

_SEPARATOR = re.compile(r"^---(?:[ \t].*)?\Z")
_SOURCE = re.compile(r"^#\s*Source:\s*(\S+)", re.MULTILINE)
# <chart>/crds/... or <chart>/charts/<subchart>/crds/... (files below crds/ at any depth)
_CRDS_DIR = re.compile(r"^[^/]+(?:/charts/[^/]+)*/crds/")


class PostRenderError(ValueError):
    """The input is not a stream of YAML documents."""


@dataclass(frozen=True)
class Rewrite:
    """One change to one object: where (JSON Pointer into the object) and what."""

    kind: str
    name: str
    path: str
    rule: str
    change: str
    namespace: str | None = None


@dataclass
class Result:
    """The adapted stream and what was changed to get it."""

    text: str
    objects: int = 0
    rewrites: list[Rewrite] = field(default_factory=list)
    # every document as parsed and adapted (mappings, or what else a document held), in
    # order, dropped objects left out: the stream as data, for JSON output
    documents: list[Any] = field(default_factory=list)


# ------------------------------------------------------------------ YAML


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """Safe loader that keeps timestamps as strings (as Kubernetes' YAML reader does)."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Dumper = yaml.CSafeDumper if hasattr(yaml, "CSafeDumper") else yaml.SafeDumper


def split_documents(text: str) -> list[str]:
    """The documents of a YAML stream, each with its own lines (separators dropped)."""
    docs: list[str] = []
    current: list[str] = []
    for line in text.splitlines(keepends=True):
        match = _SEPARATOR.match(line.rstrip("\r\n"))
        if match:
            docs.append("".join(current))
            rest = line[3:].strip()  # "--- {a: 1}": the document starts on this line
            current = [rest + "\n"] if rest and not rest.startswith("#") else []
        else:
            current.append(line)
    docs.append("".join(current))
    return [d for d in docs if d.strip()]


def _leading_comments(doc: str) -> str:
    lines = []
    for line in doc.splitlines(keepends=True):
        if line.strip() and not line.lstrip().startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


def _dump(obj: Any) -> str:
    return str(
        yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 16)
    )


# ------------------------------------------------------------------ JSON Pointer


def pointer(parts: Sequence[str | int]) -> str:
    """RFC 6901 JSON Pointer of ``parts``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


# ------------------------------------------------------------------ rules


class _Adapter:
    """The rewrites of one object, collected as they are made."""

    def __init__(self, obj: MutableMapping[str, Any]) -> None:
        self.obj = obj
        meta = obj.get("metadata") or {}
        self.kind = str(obj.get("kind") or "")
        self.name = str(meta.get("name") or "")
        ns = meta.get("namespace")
        self.namespace = str(ns) if ns else None
        self.rewrites: list[Rewrite] = []

    def note(self, parts: Sequence[str | int], rule: str, change: str) -> None:
        self.rewrites.append(
            Rewrite(self.kind, self.name, pointer(parts), rule, change, self.namespace)
        )

    def drop_unknown(
        self,
        obj: MutableMapping[str, Any],
        known: Container[str],
        where: list[str | int],
        rule: str,
        why: str,
    ) -> None:
        """Remove each key of ``obj`` not in ``known``, noting ``removed 'key': why``."""
        for key in [k for k in obj if k not in known]:
            del obj[key]
            self.note([*where, key], rule, f"removed {key!r}: {why}")

    # ---------------------------------------------------------- CRDs

    def crd(self) -> None:
        spec = self.obj.get("spec")
        if not isinstance(spec, dict):
            return
        validation = spec.get("validation")  # apiextensions.k8s.io/v1beta1
        if isinstance(validation, dict) and isinstance(validation.get("openAPIV3Schema"), dict):
            self.schema(validation["openAPIV3Schema"], ["spec", "validation", "openAPIV3Schema"])
        for i, version in enumerate(spec.get("versions") or ()):
            if not isinstance(version, dict):
                continue
            where: list[str | int] = ["spec", "versions", i]
            self.drop_unknown(
                version,
                CRD_VERSION_FIELDS,
                where,
                "unknown-crd-version-field",
                f"CustomResourceDefinitionVersion has no such field in Kubernetes {TARGET}",
            )
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(schema, dict):
                self.schema(schema, [*where, "schema", "openAPIV3Schema"])

    def schema(self, node: MutableMapping[str, Any], where: list[str | int]) -> None:
        """Fix one JSONSchemaProps and, recursively, every schema below it."""
        self.drop_unknown(
            node,
            SCHEMA_FIELDS,
            where,
            "unknown-schema-field",
            f"JSONSchemaProps has no such field in Kubernetes {TARGET} "
            "(client-side validation refuses it; the apiserver would drop it)",
        )
        if "default" in node:
            self.default(node, where)
        for key in ("properties", "patternProperties", "definitions"):
            members = node.get(key)
            if isinstance(members, dict):
                for name, sub in members.items():
                    if isinstance(sub, dict):
                        self.schema(sub, [*where, key, name])
        for key in ("items", "additionalProperties", "additionalItems", "not"):
            sub = node.get(key)
            if isinstance(sub, dict):
                self.schema(sub, [*where, key])
            elif isinstance(sub, list):
                for i, item in enumerate(sub):
                    if isinstance(item, dict):
                        self.schema(item, [*where, key, i])
        for key in ("allOf", "oneOf", "anyOf"):
            for i, item in enumerate(node.get(key) or ()):
                if isinstance(item, dict):
                    self.schema(item, [*where, key, i])
        deps = node.get("dependencies")
        if isinstance(deps, dict):
            for name, sub in deps.items():
                if isinstance(sub, dict):
                    self.schema(sub, [*where, "dependencies", name])
        if node.get("x-kubernetes-list-type") == "map":
            self.map_keys(node, where)

    def map_keys(self, node: MutableMapping[str, Any], where: list[str | int]) -> None:
        """1.20 wants every key of a list-type map to have a default or be required."""
        items = node.get("items")
        if not isinstance(items, dict):
            return
        props = items.get("properties") or {}
        required = items.get("required")
        for key in node.get("x-kubernetes-list-map-keys") or ():
            prop = props.get(key)
            if not isinstance(prop, dict) or "default" in prop:
                continue
            if isinstance(required, list) and key in required:
                continue
            if not isinstance(required, list):
                required = items["required"] = []
            required.append(key)
            self.note(
                [*where, "items", "required", len(required) - 1],
                "list-map-key-required",
                f"made {key!r} required: it is a key of x-kubernetes-list-map-keys without "
                f"a default, which Kubernetes {TARGET} refuses unless the key is required",
            )

    def default(self, node: MutableMapping[str, Any], where: list[str | int]) -> None:
        value = node["default"]
        here = [*where, "default"]
        why = f'Kubernetes {TARGET} reads "" in a default as null and refuses the CRD'
        if value == "":
            if node.get("nullable") is True:
                return  # 1.20 accepts a null default on a nullable schema
            del node["default"]
            self.note(here, "empty-string-default", f'removed default: "" ({why})')
        elif isinstance(value, dict):
            self._prune_empty(value, here, why)
        elif isinstance(value, list) and _holds_empty(value):
            del node["default"]
            self.note(here, "empty-string-default", f'removed a list default holding "" ({why})')

    def _prune_empty(
        self, value: MutableMapping[str, Any], where: list[str | int], why: str
    ) -> None:
        for key in list(value):
            member = value[key]
            if member == "":
                del value[key]
                self.note(
                    [*where, key], "empty-string-default", f'removed "" from the default ({why})'
                )
            elif isinstance(member, dict):
                self._prune_empty(member, [*where, key], why)
            elif isinstance(member, list) and _holds_empty(member):
                del value[key]
                self.note(
                    [*where, key],
                    "empty-string-default",
                    f'removed a list holding "" from the default ({why})',
                )

    # ---------------------------------------------------------- API versions

    def api_version(self) -> None:
        newer, older, gone_fields = OLDER_API[self.kind]
        if self.obj.get("apiVersion") != newer:
            return
        self.obj["apiVersion"] = older
        self.note(
            ["apiVersion"],
            "api-version",
            f"{newer} -> {older}: Kubernetes {TARGET} serves {self.kind} only as {older}",
        )
        spec = self.obj.get("spec")
        if isinstance(spec, dict):
            for key in gone_fields:
                if key in spec:
                    del spec[key]
                    self.note(
                        ["spec", key],
                        "unknown-field",
                        f"removed {key!r}: {self.kind} {older} has no such field",
                    )

    # ---------------------------------------------------------- fields newer than 1.20

    def webhooks(self) -> None:
        for i, hook in enumerate(self.obj.get("webhooks") or ()):
            if isinstance(hook, dict) and "matchConditions" in hook:
                del hook["matchConditions"]
                self.note(
                    ["webhooks", i, "matchConditions"],
                    "webhook-match-conditions",
                    f"removed 'matchConditions': webhooks have no such field in Kubernetes "
                    f"{TARGET} (the webhook is called for every request its rules match)",
                )

    def probes(self, where: tuple[str, ...]) -> None:
        template: Any = self.obj
        for key in where:
            template = template.get(key) if isinstance(template, dict) else None
        spec = template.get("spec") if isinstance(template, dict) else None
        if not isinstance(spec, dict):
            return
        for group in ("initContainers", "containers"):
            for i, container in enumerate(spec.get(group) or ()):
                if not isinstance(container, dict):
                    continue
                for probe in PROBES:
                    if isinstance(container.get(probe), dict) and "grpc" in container[probe]:
                        del container[probe]
                        self.note(
                            [*where, "spec", group, i, probe],
                            "probe-grpc",
                            f"removed the grpc {probe} of container "
                            f"{container.get('name')!r}: Kubernetes {TARGET} has no grpc probes",
                        )

    def service_ports(self) -> None:
        spec = self.obj.get("spec")
        for i, port in enumerate((spec.get("ports") if isinstance(spec, dict) else None) or ()):
            if isinstance(port, dict) and "protocol" not in port:
                port["protocol"] = "TCP"
                self.note(
                    ["spec", "ports", i, "protocol"],
                    "port-protocol",
                    f"wrote the default protocol TCP: server-side apply in Kubernetes {TARGET} "
                    "needs every key of the ports list written out",
                )


def _holds_empty(value: Any) -> bool:
    if value == "":
        return True
    if isinstance(value, dict):
        return any(_holds_empty(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_empty(v) for v in value)
    return False


def adapt_object(obj: MutableMapping[str, Any], *, server_side: bool = False) -> list[Rewrite]:
    """Rewrite one object in place for Kubernetes 1.20; the rewrites made. ``server_side``:
    the objects go through server-side apply (``port-protocol`` is needed only there)."""
    adapter = _Adapter(obj)
    kind = adapter.kind
    if kind == CRD_KIND and str(obj.get("apiVersion", "")).startswith("apiextensions.k8s.io/"):
        adapter.crd()
    elif kind in OLDER_API:
        adapter.api_version()
    if kind in WEBHOOK_CONFIGURATIONS:
        adapter.webhooks()
    elif server_side and kind == "Service" and obj.get("apiVersion") == "v1":
        adapter.service_ports()
    if kind in POD_TEMPLATES:
        adapter.probes(POD_TEMPLATES[kind])
    return adapter.rewrites


def source_of(doc: str) -> str | None:
    """The chart file a document was rendered from (Helm's ``# Source:`` comment)."""
    match = _SOURCE.search(_leading_comments(doc))
    return match[1] if match else None


def from_chart_crds(source: str | None) -> bool:
    """Is ``source`` a file in a chart's (or subchart's) ``crds/`` directory?"""
    return source is not None and _CRDS_DIR.match(source) is not None


def _with_sources(docs: Sequence[str]) -> list[tuple[str | None, str]]:
    """Each document with the chart file it was rendered from (a file's later documents
    carry no comment of their own)."""
    out: list[tuple[str | None, str]] = []
    source: str | None = None
    for doc in docs:
        source = source_of(doc) or source
        out.append((source, doc))
    return out


def _load(doc: str, index: int) -> Any:
    try:
        return yaml.load(doc, Loader=_Loader)
    except yaml.YAMLError as exc:
        where = _leading_comments(doc).strip() or f"document {index + 1}"
        raise PostRenderError(f"{where}: not YAML: {exc}") from exc


def _crd_name(obj: Any) -> str | None:
    if isinstance(obj, dict) and obj.get("kind") == "CustomResourceDefinition":
        name = (obj.get("metadata") or {}).get("name")
        return name if isinstance(name, str) else None
    return None


def _templated_crds(sourced: Sequence[tuple[str | None, str]]) -> frozenset[str]:
    """The names of the CRDs the chart's templates render (only documents that mention the
    kind are parsed)."""
    return frozenset(
        name
        for index, (source, doc) in enumerate(sourced)
        if not from_chart_crds(source) and "CustomResourceDefinition" in doc
        for name in [_crd_name(_load(doc, index))]
        if name
    )


def adapt_stream(
    text: str, *, chart_crds_only: bool = False, server_side: bool = False, as_text: bool = True
) -> Result:
    """Adapt every document of a YAML stream; unchanged documents keep their bytes.
    ``as_text=False`` leaves :attr:`Result.text` empty (only the documents are wanted:
    writing megabytes of YAML for nobody costs seconds).

    ``chart_crds_only``: keep only the CRDs (and other documents) rendered from a
    ``crds/`` directory (``helm template --include-crds``), which ``helm install``
    creates without passing them through its post-renderer - but not a CRD the chart's
    templates render too (helm installs that one from the templates).
    ``server_side``: see :func:`adapt_object`.
    """
    out: list[str] = []
    result = Result("")
    sourced = _with_sources(split_documents(text))
    templated = _templated_crds(sourced) if chart_crds_only else frozenset()
    for index, (source, doc) in enumerate(sourced):
        if chart_crds_only and not from_chart_crds(source):
            continue
        obj = _load(doc, index)
        if templated and _crd_name(obj) in templated:
            continue  # helm installs it from the templates, through the post-renderer
        if obj is not None:  # a document of comments only is no document in JSON
            result.documents.append(obj)
        if not isinstance(obj, dict):
            out.append(doc)
            continue
        result.objects += 1
        if obj.get("kind") in NO_API:
            adapter = _Adapter(obj)
            adapter.note(
                [],
                "dropped-object",
                f"left out: Kubernetes {TARGET} has no API for {adapter.kind} "
                f"({obj.get('apiVersion')})",
            )
            result.rewrites.extend(adapter.rewrites)
            result.documents.pop()
            continue
        rewrites = adapt_object(obj, server_side=server_side)
        if rewrites:
            result.rewrites.extend(rewrites)
            out.append(_leading_comments(doc) + _dump(obj) if as_text else "")
        else:
            out.append(doc)
    result.text = "".join(_join(out)) if as_text else ""
    return result


def as_json(result: Result) -> str:
    """The adapted documents as one JSON list (what ``--json`` writes): a consumer that
    wants data skips parsing megabytes of YAML again."""
    try:
        return json.dumps(result.documents, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # a YAML value JSON has no form for (!!binary)
        raise PostRenderError(f"a document holds a value JSON cannot carry: {exc}") from exc


def _join(docs: Sequence[str]) -> Iterator[str]:
    for doc in docs:
        yield "---\n"
        yield doc if doc.endswith("\n") else doc + "\n"


# ------------------------------------------------------------------ report


def report(result: Result) -> dict[str, Any]:
    """The JSON report: every rewrite, and a count per object and rule.

    ``{"target": "v1.20", "objects": N, "rewrites": [{kind, name, namespace, path, rule,
    change}, ...], "summary": [{kind, name, namespace, rule, count}, ...]}``
    """
    counts: Counter[tuple[str, str, str | None, str]] = Counter(
        (r.kind, r.name, r.namespace, r.rule) for r in result.rewrites
    )
    return {
        "target": TARGET,
        "objects": result.objects,
        "rewrites": [asdict(r) for r in result.rewrites],
        "summary": [
            {"kind": k, "name": n, "namespace": ns, "rule": rule, "count": c}
            for (k, n, ns, rule), c in counts.items()
        ],
    }


def write_report(path: Path, data: dict[str, Any]) -> None:
    """Write the report (0644) atomically (:func:`decice.atomicfile.write`)."""
    atomicfile.write(path, json.dumps(data, indent=1) + "\n")


# ------------------------------------------------------------------ entry point


def main(argv: Sequence[str] | None = None) -> int:
    """``decice-sim-postrender [--report PATH] [--chart-crds] [--server-side] [--json]``: stdin ->
    stdout; 0 ok, 1 bad input."""
    parser = argparse.ArgumentParser(
        prog="decice-sim-postrender",
        description="Adapt a rendered manifest stream (stdin) to the sim's Kubernetes 1.20.",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help=f"write the JSON report of the rewrites here (default: ${REPORT_ENV}; unset: none); "
        "nothing is written for a stream without objects",
    )
    parser.add_argument(
        "--chart-crds",
        action="store_true",
        help="write only the documents rendered from a chart's crds/ directory "
        "(input: helm template --include-crds); helm install creates those unadapted",
    )
    parser.add_argument(
        "--server-side",
        action="store_true",
        help="the output goes through server-side apply (kubectl apply --server-side), "
        "which needs more written out on 1.20 (rule port-protocol)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="write the adapted documents as one JSON list instead of a YAML stream",
    )
    args = parser.parse_args(argv)
    target = args.report
    if target is None and os.environ.get(REPORT_ENV):
        target = Path(os.environ[REPORT_ENV])
    try:
        result = adapt_stream(
            sys.stdin.read(),
            chart_crds_only=args.chart_crds,
            server_side=args.server_side,
            as_text=not args.json,
        )
        text = as_json(result) + "\n" if args.json else result.text
    except PostRenderError as exc:
        print(f"decice-sim-postrender: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    sys.stdout.flush()
    if target is not None and result.objects > 0:
        write_report(target, report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
