"""An experiment's report: one self-contained HTML file (plots embedded as PNG), the
numbers as ``summary.json``, every pod of every arm and repetition as ``pods.csv``.

Everything here is computed from ``raw.json`` (:mod:`decice.experiment.stats`), so
``decice experiment report`` can write it again at any time, also for a partial run.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from decice import jsonout, records
from decice.experiment import stats

CSV_COLUMNS = (
    "repetition",
    "arm",
    "name",
    "group",
    "shape",
    "cpu",
    "gpu",
    "planned_at",
    "submitted",
    "created",
    "scheduled",
    "running",
    "finished",
    "node",
    "slurm_job",
    "phase",
    "reason",
)


def write(raw: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write summary.json, pods.csv and report.html beside raw.json; their paths."""
    summary = stats.summarize(raw)
    paths = {
        "summary": out_dir / "summary.json",
        "csv": out_dir / "pods.csv",
        "html": out_dir / "report.html",
    }
    records.write_json(paths["summary"], jsonout.document(summary), mode=0o644)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for run in raw.get("runs", []):
        for pod in run.get("pods", []):
            row = {**pod, "repetition": run["repetition"], "arm": run["arm"]}
            writer.writerow([_cell(row.get(c)) for c in CSV_COLUMNS])
    paths["csv"].write_text(buffer.getvalue(), "utf-8")
    paths["html"].write_text(render(raw, summary), "utf-8")
    for path in paths.values():
        path.chmod(0o644)
    return paths


def _cell(value: Any) -> Any:
    """A CSV cell; text that a spreadsheet would run as a formula (a pod's reason comes
    from the cluster) gets a leading apostrophe."""
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


# ------------------------------------------------------------------------ plots


def _figure_png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _legend(ax: Any, size: int) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size)


def _plots(raw: dict[str, Any], summary: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    arms = [a["name"] for a in raw["experiment"]["arms"]]
    runs = [r for r in raw.get("runs", []) if r.get("pods")]
    out: list[tuple[str, str]] = []
    if not runs:
        return out

    # timeline: pods scheduled and finished over time, one panel per arm, a line per repetition
    fig, axes = plt.subplots(1, len(arms), figsize=(5 * len(arms), 3.2), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, arm in zip(axes[0], arms, strict=True):
        for run in (r for r in runs if r["arm"] == arm):
            colour = colours[(run["repetition"] - 1) % len(colours)]
            for key, style in (("scheduled", "-"), ("finished", ":")):
                xs, ys = stats.cdf([p[key] for p in run["pods"] if p.get(key) is not None])
                ys = [y * len(xs) for y in ys]
                ax.step(
                    xs,
                    ys,
                    style,
                    color=colour,
                    where="post",
                    label=f"rep {run['repetition']} {key}",
                )
        ax.set_title(arm)
        ax.set_xlabel("seconds after the arm's start")
        ax.set_ylabel("pods")
        _legend(ax, 7)
    out.append(("Timeline: pods scheduled (solid) and finished (dotted)", _figure_png(fig)))

    # latency CDFs: every repetition of an arm pooled
    fig, ax = plt.subplots(figsize=(6, 3.5))
    positive = True
    for arm in arms:
        lat = [
            p["scheduled"] - p["created"]
            for r in runs
            if r["arm"] == arm
            for p in r["pods"]
            if p.get("scheduled") is not None and p.get("created") is not None
        ]
        positive = positive and all(v > 0 for v in lat)
        if lat:
            xs, ys = stats.cdf(lat)
            ax.step(xs, ys, where="post", label=f"{arm} ({len(lat)} pods)")
    if positive:
        ax.set_xscale("log")
    ax.set_xlabel("scheduling latency (s, created to scheduled)")
    ax.set_ylabel("fraction of pods")
    ax.set_ylim(0, 1.02)
    _legend(ax, 8)
    out.append(("Scheduling latency CDF (all repetitions)", _figure_png(fig)))

    # utilisation heat map: the first repetition of each arm
    firsts = [next((r for r in runs if r["arm"] == arm), None) for arm in arms]
    shown = [(arm, stats.utilisation(r)) for arm, r in zip(arms, firsts, strict=True) if r]
    shown = [(arm, u) for arm, u in shown if u["nodes"]]
    if shown:
        fig, axes = plt.subplots(
            1,
            len(shown),
            figsize=(5 * len(shown), 0.25 * max(len(u["nodes"]) for _, u in shown) + 1.8),
            squeeze=False,
        )
        for ax, (arm, util) in zip(axes[0], shown, strict=True):
            image = ax.imshow(
                util["rows"], aspect="auto", vmin=0, vmax=1, cmap="viridis", interpolation="nearest"
            )
            ax.set_yticks(range(len(util["nodes"])), util["nodes"], fontsize=6)
            ax.set_xlabel(f"time bin ({util['step']:g} s)")
            ax.set_title(f"{arm}: CPU requested / allocatable")
        fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
        out.append(("Utilisation per node (first repetition of each arm)", _figure_png(fig)))

    # throughput per repetition
    fig, ax = plt.subplots(figsize=(6, 3))
    for arm in arms:
        points = [
            (m["repetition"], m["throughput"])
            for m in summary["runs"]
            if m["arm"] == arm and m["throughput"] is not None
        ]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=arm)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("repetition")
    ax.set_ylabel("pods/s scheduled")
    _legend(ax, 8)
    out.append(("Throughput per repetition (drift shows here)", _figure_png(fig)))
    return out


# ------------------------------------------------------------------------- html


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return html.escape(str(value))


STYLE = """
body{font-family:sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:1em 0;font-size:90%}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#eee}td:first-child,th:first-child{text-align:left}
.partial{background:#fdd;border:2px solid #c00;padding:0.5em 1em;font-weight:bold}
pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:85%}
img{max-width:100%}
"""


def render(raw: dict[str, Any], summary: dict[str, Any]) -> str:
    """The report as one HTML document (no external resources, no scripts)."""
    exp = raw["experiment"]
    e = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>decice experiment {e(raw['id'])}</title><style>{STYLE}</style></head><body>",
        f"<h1>Experiment {e(exp['name'])}</h1>",
    ]
    if raw.get("status") != "complete":
        parts.append(
            f"<p class='partial'>PARTIAL: this run ended {e(str(raw.get('status')))}"
            f"{': ' + e(raw['error']) if raw.get('error') else ''}; "
            "arms interrupted or failed do not count in the medians.</p>"
        )
    order = ", ".join(f"{rep}:{arm}" for rep, arm in raw.get("order", []))
    facts = [
        ("run", raw["id"]),
        ("status", raw.get("status")),
        ("started / ended", f"{raw.get('started', '')} / {raw.get('ended', '')}"),
        ("cluster spec", f"{raw['spec']['label']} (sha256 {raw['spec']['sha256'][:16]}…)"),
        ("target", raw["spec"].get("target")),
        ("slate", exp.get("slate")),
        ("repetitions", exp.get("repetitions")),
        ("workload", raw.get("workload", {}).get("source")),
        ("seed", raw.get("workload", {}).get("seed")),
        ("pods per arm", len(raw.get("workload", {}).get("pods", []))),
        ("order (repetition:arm)", order),
        ("cluster runs", ", ".join(raw.get("cluster_runs", [])) or "-"),
        ("decice", raw.get("versions", {}).get("decice")),
    ]
    parts.append("<table>")
    parts += [f"<tr><th>{e(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in facts]
    parts.append("</table>")

    parts.append(
        "<h2>Per arm: median over the repetitions [confidence interval]</h2>"
        "<table><tr><th>metric</th>"
    )
    arms = list(summary["arms"])
    parts += [f"<th>{e(a)} ({summary['arms'][a]['repetitions']} reps)</th>" for a in arms]
    parts.append("</tr>")
    for key, label, unit, better in stats.METRICS:
        row = [f"<td>{e(label)} ({e(unit)}, {better} is better)</td>"]
        for arm in arms:
            m = summary["arms"][arm]["metrics"][key]
            if m["median"] is None:
                row.append("<td>-</td>")
            else:
                row.append(
                    f"<td>{_fmt(m['median'])} [{_fmt(m['low'])}, {_fmt(m['high'])}; "
                    f"{m['coverage'] * 100:.0f}%]</td>"
                )
        parts.append("<tr>" + "".join(row) + "</tr>")
    parts.append("</table>")

    parts.append("<h2>Per repetition</h2><table><tr><th>repetition</th><th>arm</th><th>status</th>")
    parts += [f"<th>{e(label)}</th>" for _k, label, _u, _b in stats.METRICS]
    parts.append("<th>failures</th></tr>")
    for m in summary["runs"]:
        cells = [m["repetition"], m["arm"], m["status"]] + [m[k] for k, *_ in stats.METRICS]
        failures = ", ".join(f"{k}: {v}" for k, v in sorted(m["failures"].items())) or "-"
        parts.append(
            "<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in cells) + f"<td>{e(failures)}</td></tr>"
        )
    parts.append("</table>")

    moved = [r for r in raw.get("runs", []) if r.get("scheduler_metrics")]
    if moved:
        parts.append(
            "<h2>decice-scheduler during each arm</h2><p>Its counters' changes from the "
            "arm's start to its end (/metrics on the sim).</p><table><tr><th>repetition</th>"
            "<th>arm</th><th>counters</th></tr>"
        )
        for r in moved:
            text = ", ".join(f"{k}: {v:g}" for k, v in r["scheduler_metrics"].items())
            parts.append(
                f"<tr><td>{r['repetition']}</td><td>{e(r['arm'])}</td>"
                f"<td style='text-align:left'>{e(text)}</td></tr>"
            )
        parts.append("</table>")

    for title, png in _plots(raw, summary):
        parts.append(f"<h2>{e(title)}</h2><img alt='{e(title)}' src='data:image/png;base64,{png}'>")

    parts.append("<h2>Versions</h2><table>")
    parts += [
        f"<tr><th>{e(k)}</th><td>{_fmt(v)}</td></tr>"
        for k, v in sorted(raw.get("versions", {}).items())
    ]
    parts.append("</table>")
    parts.append(f"<h2>Experiment file</h2><pre>{e(raw.get('experiment_text', ''))}</pre>")
    parts.append(f"<h2>Cluster spec</h2><pre>{e(raw['spec'].get('text', ''))}</pre>")
    parts.append(
        "<p>Raw data beside this file: <a href='raw.json'>raw.json</a>, "
        "<a href='pods.csv'>pods.csv</a>, <a href='summary.json'>summary.json</a>. "
        "Definitions: docs/experiments.md.</p></body></html>"
    )
    return "\n".join(parts)


def load_raw(path: Path) -> dict[str, Any]:
    """An experiment's raw.json; one written by a newer decice is refused (ValueError)."""
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but a {type(data).__name__}")
    jsonout.check_readable(data)
    return data
