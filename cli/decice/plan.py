"""What `decice up` would do for a spec: hosts and roles, phases, component versions."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from decice import addons, inventory, mirror, paths, phases, versions
from decice.spec import LoadedSpec
from decice.targets import registry


def build(loaded: LoadedSpec, *, only: list[str], skip: list[str]) -> dict[str, Any]:
    spec = loaded.spec
    target = registry.get(spec.target)
    selected = phases.select("up", only, skip)
    allocation = target.allocate(loaded)
    inv = inventory.build(loaded, allocation)
    hosts = {
        host: groups for host, groups in inventory.host_roles(inv).items() if host != "localhost"
    }
    components = []
    pinned = versions.summary()
    for name in versions.components():
        version = pinned.get(name)
        if version is None:
            continue
        switch = addons.switch_of(name)
        enabled = True if switch is None else spec.addons.get(switch).enabled
        if name in {"kubespray", "kubernetes"} and not target.uses_kubespray:
            enabled = False
        components.append({"name": name, "version": version, "enabled": enabled})
    if spec.scheduler.enabled:
        from decice import __version__

        components.append({"name": "decice-scheduler", "version": __version__, "enabled": True})
    details: dict[str, Any] = {"sim_binaries": None, "kubespray": None}
    details["artifacts"] = artifact_sources(loaded)
    details.update(target.plan(loaded, inv))
    return {
        "name": spec.name,
        "target": spec.target,
        "spec": loaded.label,
        "state_dir": str(loaded.state_dir),
        "allocation": None
        if allocation is None
        else {
            "source": allocation.source,
            "job_id": allocation.job_id,
        },
        "hosts": hosts,
        "sim_nodes": [
            {
                "name_prefix": g.name_prefix,
                "count": g.count,
                "capacity": dict(g.capacity),
                "labels": dict(g.labels),
            }
            for g in spec.sim.nodes
        ],
        "phases": [{"name": p, "selected": p in selected} for p in phases.PHASES["up"]],
        "components": components,
        **details,
    }


def artifact_sources(loaded: LoadedSpec) -> dict[str, dict[str, Any]]:
    """Where `up` takes each add-on chart from, decided as the add-on engine's resolve step
    decides (mirror.path, mirror.url, else the artifact's url, oci or source, through
    upstream.rewrite): component -> {addon, enabled, from, location[, version, path]}."""
    spec = loaded.spec
    base = loaded.source.parent if loaded.source else None
    site = mirror.from_spec(spec.mirror, base) if base is not None else None
    rewrite = paths.module_utils("upstream").rewritten
    table = versions.pinned()
    out: dict[str, dict[str, Any]] = {}
    for addon in addons.registry():
        components = addon.components
        if addon.name == "kubeflow" and spec.addons.kubeflow.profile == "full":
            components = ("kubeflow_manifests",)  # the platform's manifests, not the chart
        for component in components:
            artifact = (table.get(component) or {}).get("artifact")
            if not isinstance(artifact, dict):
                continue
            row: dict[str, Any] = {
                "addon": addon.name,
                "enabled": spec.addons.get(addon.name).enabled,
            }
            oci, source = artifact.get("oci") or {}, artifact.get("source") or {}
            if site is not None:
                where = "/".join((site.root, artifact["file"]))
                row.update({"from": f"mirror.{site.kind}", "location": where})
            elif artifact.get("url"):
                row.update(
                    {"from": "url", "location": rewrite(artifact["url"], spec.upstream.rewrite)}
                )
            elif oci.get("ref"):
                row.update(
                    {
                        "from": "oci",
                        "location": rewrite(oci["ref"], spec.upstream.rewrite),
                        "version": oci.get("version"),
                    }
                )
            elif source.get("archive"):
                row.update(
                    {
                        "from": "source",
                        "path": source.get("path"),
                        "location": rewrite(source["archive"], spec.upstream.rewrite),
                    }
                )
            else:
                row.update({"from": None, "location": None})
            out[component] = row
    return out


def render(data: dict[str, Any], console: Console) -> None:
    console.print(
        f"[bold]plan for {data['name']}[/] (target {data['target']}, spec {data['spec']})"
    )
    if data["hosts"]:
        table = Table(box=None, header_style="bold", title="hosts", title_justify="left")
        table.add_column("host")
        table.add_column("groups")
        for host, groups in data["hosts"].items():
            table.add_row(host, ", ".join(groups))
        console.print(table)
    if data["sim_nodes"]:
        table = Table(box=None, header_style="bold", title="simulated nodes", title_justify="left")
        for column in ("prefix", "count", "capacity", "labels"):
            table.add_column(column)
        for group in data["sim_nodes"]:
            capacity = ", ".join(f"{k}={v}" for k, v in group["capacity"].items())
            table.add_row(
                group["name_prefix"], str(group["count"]), capacity, ", ".join(group["labels"])
            )
        console.print(table)
    console.print(
        "phases     "
        + " → ".join(
            p["name"] if p["selected"] else f"[dim]({p['name']})[/]" for p in data["phases"]
        )
    )
    table = Table(box=None, header_style="bold", title="components", title_justify="left")
    table.add_column("component")
    table.add_column("version")
    table.add_column("")
    for comp in data["components"]:
        table.add_row(comp["name"], comp["version"], "" if comp["enabled"] else "[dim]off[/]")
    console.print(table)
    if data.get("artifacts"):
        table = Table(box=None, header_style="bold", title="add-on charts", title_justify="left")
        for column in ("component", "from", "location"):
            table.add_column(column)
        for name, row in data["artifacts"].items():
            where = row["location"] or "[red]none: set mirror.path or mirror.url[/]"
            if row.get("path"):
                where += f" ({row['path']})"
            if row.get("version"):
                where += f" --version {row['version']}"
            origin = row["from"] or "-"
            table.add_row(name, origin if row["enabled"] else f"[dim]{origin} (off)[/]", where)
        console.print(table)
    kubespray = data.get("kubespray")
    if kubespray:
        cluster = kubespray["commands"]["cluster.yml"]
        console.print(
            f"[bold]kubespray[/] {kubespray['tag']} (kube_version {kubespray['kube_version']}, "
            f"source: {kubespray['source']['origin']} {kubespray['source']['location']})"
        )
        console.print("  " + " ".join(str(a) for a in cluster["argv"]), soft_wrap=True)
        if kubespray.get("registry"):
            console.print(f"  image registry: {kubespray['registry']}", soft_wrap=True)
    if data.get("sim_binaries"):
        table = Table(
            box=None, header_style="bold", title="sim control plane", title_justify="left"
        )
        for column in ("binary", "version", "source", "path"):
            table.add_column(column)
        for name, info in data["sim_binaries"].items():
            table.add_row(name, info["version"], info["source"], info["path"])
        console.print(table)
