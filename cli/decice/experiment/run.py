"""``decice experiment plan|run|report|list``: the experiment's bookkeeping.

A run lives in ``<state dir>/experiments/<id>/``: ``experiment.yaml`` (the file as run),
``raw.json`` (saved after every arm, so a killed run keeps what it measured),
``summary.json``, ``pods.csv`` and ``report.html``. The cluster is brought up (or
reset and brought up again, ``slate: reset``) by the same engine as ``decice up``; each
such run's id is kept in ``raw.json`` (``cluster_runs``), and its own record's argv names
the experiment command. Arms run interleaved, repetition by repetition (A B A B ...),
each in a fresh namespace labelled ``decice.io/experiment=<id>`` that is deleted (and
seen gone) before the next arm starts.

Ctrl-C or SIGTERM: the arm in flight is marked ``interrupted``, its namespace deleted
without waiting, the report written marked partial, exit 130. The cluster stays up.
A run killed outright leaves its namespace; the next experiment run on the state
directory deletes every namespace with the label first and says so.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decice import __version__, filelock, interrupt, jsonout, lifecycle, records, spec, versions
from decice.errors import EXIT_OK, EXIT_RUN_FAILED, InputError, RunFailedError
from decice.experiment import collect, model, report, workload
from decice.experiment.store import RAW_NAME, experiments_dir
from decice.phases import kubeconfig_path
from decice.progress import View
from decice.spec_model import SchedulerSpec


@dataclass(frozen=True)
class Plan:
    """What a run will do, before it touches anything."""

    loaded: model.LoadedExperiment
    spec: spec.LoadedSpec
    pods: list[workload.PlannedPod]
    order: list[tuple[int, str]]

    def to_dict(self) -> dict[str, Any]:
        exp = self.loaded.experiment
        gen = exp.workload.generator
        return {
            "experiment": str(self.loaded.path),
            "name": exp.name,
            "spec": self.spec.label,
            "target": self.spec.spec.target,
            "state_dir": str(self.spec.state_dir),
            "slate": exp.slate,
            "repetitions": exp.repetitions,
            "arms": [a.model_dump() for a in exp.arms],
            "order": [list(o) for o in self.order],
            "workload": {
                "source": _source(self.loaded),
                "seed": None if gen is None else gen.seed,
                "pods": len(self.pods),
                "groups": len({p.group for p in self.pods if p.group}),
                "last_arrival": max((p.at for p in self.pods), default=0.0),
            },
        }


def _source(loaded: model.LoadedExperiment) -> str:
    w = loaded.experiment.workload
    if w.generator is not None:
        return f"generator (seed {w.generator.seed}, {w.generator.arrival.process} arrivals)"
    if w.trace is not None:
        return f"trace {loaded.resolve(w.trace)}"
    return "manifests " + ", ".join(str(loaded.resolve(m)) for m in w.manifests)


def make_plan(path: Path) -> Plan:
    """Load and check everything (exit 2 on bad input); touches nothing."""
    loaded = model.load(path)
    exp = loaded.experiment
    loaded_spec = spec.load(loaded.spec_path, cwd=loaded.path.parent)
    sched = loaded_spec.spec.scheduler
    for index, arm in enumerate(exp.arms):
        if arm.scheduler == sched.name and not sched.enabled:
            raise InputError(
                f"{loaded.path}: arms[{index}].scheduler: {arm.scheduler!r} is the spec's own "
                f"scheduler, which {loaded_spec.label} turns off (scheduler.enabled: false)\n"
                "    fix: enable the scheduler in the spec or choose another scheduler"
            )
        if arm.decice_scheduler is not None and (
            arm.scheduler != sched.name or loaded_spec.spec.target != "sim"
        ):
            raise InputError(
                f"{loaded.path}: arms[{index}].decice_scheduler: settings for "
                f"{sched.name!r}, which this arm runs only on the sim target with "
                f"scheduler: {sched.name} (it has {arm.scheduler!r}, the spec's target is "
                f"{loaded_spec.spec.target})\n"
                f"    fix: set scheduler: {sched.name} on a sim spec, or remove decice_scheduler"
            )
    pods = workload.plan(loaded)
    order = [(rep, arm.name) for rep in range(1, exp.repetitions + 1) for arm in exp.arms]
    return Plan(loaded, loaded_spec, pods, order)


# ------------------------------------------------------------------------ running


Say = Callable[[str, dict[str, Any]], None]


class _Run:
    """One experiment run: its directory, its raw data, saved as it grows."""

    def __init__(self, plan: Plan, say: Say) -> None:
        self.plan = plan
        self.say = say
        exp = plan.loaded.experiment
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.id = f"{exp.name}-{stamp}-{secrets.token_hex(2)}"
        self.dir = records.ensure_dir(
            records.ensure_dir(experiments_dir(plan.spec.state_dir)) / self.id
        )
        (self.dir / "experiment.yaml").write_text(plan.loaded.text, "utf-8")
        gen = exp.workload.generator
        self.raw: dict[str, Any] = {
            jsonout.KEY: jsonout.FORMAT_VERSION,
            "id": self.id,
            "status": "running",
            "started": records.now(),
            "ended": "",
            "error": "",
            "experiment": json.loads(exp.model_dump_json()),
            "experiment_file": str(plan.loaded.path),
            "experiment_sha256": plan.loaded.sha256,
            "experiment_text": plan.loaded.text,
            "spec": {
                "label": plan.spec.label,
                "sha256": plan.spec.sha256,
                "target": plan.spec.spec.target,
                "text": plan.spec.text,
            },
            "versions": {"decice": __version__, **versions.summary()},
            "workload": {
                "source": _source(plan.loaded),
                "seed": None if gen is None else gen.seed,
                "pods": [p.summary() for p in plan.pods],
            },
            "order": [list(o) for o in plan.order],
            "cluster_runs": [],
            "notes": [],
            "runs": [],
        }
        self.save()

    def save(self) -> None:
        with interrupt.shielded():
            records.write_json(self.dir / RAW_NAME, self.raw, mode=0o644)


def _cluster(command: str, plan: Plan, run: _Run, view: View) -> None:
    """``decice up`` or ``reset`` through the lifecycle engine; RunFailedError unless ok."""
    loaded = plan.spec
    options = lifecycle.RunOptions(only=[], skip=[], check=False, verbose=0)
    prepared = lifecycle.prepare(command, loaded, options)
    run.say("cluster", {"command": command})
    record = lifecycle.execute(command, loaded, options, view, prepared)
    run.raw["cluster_runs"].append(record.id)
    run.save()
    if record.status == "interrupted":
        raise KeyboardInterrupt(command)
    if record.status not in {"ok", "incomplete"}:
        raise RunFailedError(
            f"`decice {command}` for the experiment ended {record.status} "
            f"(run {record.id})\n    fix: see `decice runs show {record.id}`"
        )


async def _cluster_ready(kubeconfig: Path) -> tuple[list[str], dict[str, Any]]:
    """Delete the namespaces a killed experiment run left; (their names, the API server's
    /version)."""
    from decice_kube.client import Client

    async with Client.from_kubeconfig(kubeconfig, user_agent="decice-experiment") as client:
        names = await collect.leftover_namespaces(client)
        for name in names:
            await collect.delete_namespace(client, name)
        return names, await client.get("/version") or {}


async def _arm(
    kubeconfig: Path, run: _Run, arm_run: collect.ArmRun, arm: model.Arm, token_secret: bool
) -> None:
    from decice_kube.client import Client

    plan = run.plan
    exp = plan.loaded.experiment
    labels = {workload.EXPERIMENT_LABEL: run.id, workload.ARM_LABEL: arm.name, **arm.labels}
    manifests = {
        pod.name: workload.manifest(
            pod,
            namespace=arm_run.namespace,
            scheduler=arm.scheduler,
            labels=labels,
            image=exp.workload.image,
            node_selector=arm.node_selector,
        )
        for pod in plan.pods
    }
    last = [0.0]

    def progress(scheduled: int, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or done == total:
            last[0] = now
            run.say("pods", {"scheduled": scheduled, "done": done, "total": total})

    before = _scheduler_counters(plan)
    log = _audit_log(plan)
    offset = log.stat().st_size if log is not None and log.is_file() else 0
    async with Client.from_kubeconfig(kubeconfig, user_agent="decice-experiment") as client:
        try:
            await collect.execute(
                client,
                arm_run,
                plan.pods,
                manifests,
                experiment_id=run.id,
                timeout=exp.timeout,
                progress=progress,
                token_secret=token_secret,
            )
        except asyncio.CancelledError:
            arm_run.status = "interrupted"
            await asyncio.shield(collect.delete_namespace(client, arm_run.namespace, wait=False))
            raise
        after = _scheduler_counters(plan)
        if before is not None and after is not None:
            arm_run.scheduler_metrics = {
                key: round(value - before.get(key, 0.0), 6)
                for key, value in sorted(after.items())
                if value != before.get(key, 0.0)
            }
        await collect.delete_namespace(client, arm_run.namespace)
    if log is not None:
        _read_audit(log, offset, arm_run)


def _audit_log(plan: Plan) -> Path | None:
    """The sim's audit log when the spec turns it on (decice.sim.controlplane.audit), else None."""
    spec = plan.spec.spec
    if spec.target != "sim" or not spec.sim.audit_log:
        return None
    from decice.sim.controlplane import audit
    from decice.targets.sim import control_plane_dir

    return control_plane_dir(plan.spec.state_dir.resolve()) / audit.LOG_NAME


def _read_audit(log: Path, offset: int, arm_run: collect.ArmRun) -> None:
    """Each pod's create -> bound on the API server's clock, from what the audit log got
    since ``offset`` (its size when the arm started; a log rotated since is read whole)."""
    from decice.sim.controlplane import audit

    try:
        with log.open("rb") as stream:
            if stream.seek(0, 2) >= offset:
                stream.seek(offset)
            else:
                stream.seek(0)
            text = stream.read().decode("utf-8", "replace")
    except OSError:
        return
    latencies = audit.create_to_bound(text.splitlines(), namespace=arm_run.namespace)
    for name, seconds in latencies.items():
        record = arm_run.pods.get(name)
        if record is not None:
            record.api_bound = round(seconds, 6)


def _scheduler_counters(plan: Plan) -> dict[str, float] | None:
    """decice-scheduler's counters (``*_total``, and ``*_count``/``*_sum`` of its
    histograms) read from its /metrics now: on the sim, where it runs on loopback; None
    elsewhere or when it cannot be read."""
    if plan.spec.spec.target != "sim" or not plan.spec.spec.scheduler.enabled:
        return None
    from prometheus_client.parser import text_string_to_metric_families

    from decice.sim import scheduler_service

    text = scheduler_service.metrics_text(plan.spec.state_dir)
    if text is None:
        return None
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_total", "_count", "_sum")):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def execute(
    path: Path, *, say: Say, view: View, up: bool = True
) -> tuple[int, dict[str, Any], Path]:
    """Run the experiment; (exit code, raw data, its directory). Writes the report in
    every case."""
    plan = make_plan(path)
    state_dir = plan.spec.state_dir
    records.ensure_dir(state_dir)
    lock_path = records.ensure_dir(experiments_dir(state_dir)) / ".lock"
    with filelock.exclusive(lock_path, on_wait=lambda: say("waiting", {"lock": str(lock_path)})):
        run = _Run(plan, say)
        say("start", {"id": run.id, "dir": str(run.dir)})
        code = EXIT_OK
        try:
            _run_all(plan, run, view, up)
            run.raw["status"] = "complete"
        except KeyboardInterrupt:
            run.raw["status"] = "interrupted"
            code = interrupt.EXIT_INTERRUPTED
        except RunFailedError as exc:
            run.raw["status"] = "failed"
            run.raw["error"] = str(exc).splitlines()[0]
            code = EXIT_RUN_FAILED
        finally:
            run.raw["ended"] = records.now()
            run.save()
            paths = report.write(run.raw, run.dir)
            say("report", {k: str(v) for k, v in paths.items()})
        return code, run.raw, run.dir


def _arm_scheduler(plan: Plan, arm: model.Arm) -> SchedulerSpec:
    """The spec's decice-scheduler with ``arm``'s settings over it."""
    base = plan.spec.spec.scheduler
    given = arm.decice_scheduler
    if given is None:
        return base
    update = {k: v for k, v in given.model_dump().items() if v is not None}
    return base.model_copy(update=update)


def _ensure_scheduler(plan: Plan, wanted: SchedulerSpec) -> None:
    """decice-scheduler on the sim with ``wanted``'s settings (restarted if they differ,
    ready, its smoke pod placed), before an arm's clock starts."""
    from decice.sim import scheduler_service
    from decice_kube.client import ApiError

    state_dir = plan.spec.state_dir.resolve()
    try:
        scheduler_service.ensure(state_dir, kubeconfig_path(state_dir), wanted)
    except (RunFailedError, ApiError, OSError, RuntimeError) as exc:
        raise RunFailedError(
            f"decice-scheduler with qps {wanted.qps}, burst {wanted.burst}: {exc}"
        ) from exc


def _run_all(plan: Plan, run: _Run, view: View, up: bool) -> None:
    exp = plan.loaded.experiment
    tuned = any(arm.decice_scheduler is not None for arm in exp.arms)
    try:
        _run_arms(plan, run, view, up, tuned)
    finally:
        if tuned and kubeconfig_path(plan.spec.state_dir).exists():
            try:
                _ensure_scheduler(plan, plan.spec.spec.scheduler)
            except RunFailedError as exc:
                run.raw["notes"].append(
                    f"{exc}; `decice up` starts it with the spec's settings again"
                )


def _run_arms(plan: Plan, run: _Run, view: View, up: bool, tuned: bool) -> None:
    exp = plan.loaded.experiment
    arms = {a.name: a for a in exp.arms}
    kubeconfig = kubeconfig_path(plan.spec.state_dir)
    current_rep = 0
    token_secret = False
    for rep, arm_name in plan.order:
        if rep != current_rep:
            if exp.slate == "reset" and rep > 1:
                _cluster("reset", plan, run, view)
                _cluster("up", plan, run, view)
            elif rep == 1 and up:
                _cluster("up", plan, run, view)
            if rep == 1:
                if not kubeconfig.exists():
                    raise RunFailedError(
                        f"{kubeconfig}: no kubeconfig: the cluster is not up\n"
                        "    fix: run without --no-up, or `decice up` first"
                    )
                with interrupt.handling():
                    left, server = asyncio.run(_cluster_ready(kubeconfig))
                run.raw["versions"]["kube-apiserver"] = str(server.get("gitVersion", ""))
                minor = "".join(c for c in str(server.get("minor", "")) if c.isdigit())
                # before 1.24 a pod needs its ServiceAccount's token Secret
                token_secret = int(minor or 0) < 24
                if left:
                    run.raw["notes"].append(
                        "deleted namespaces a killed experiment run left: " + ", ".join(left)
                    )
            current_rep = rep
        arm = arms[arm_name]
        arm_run = collect.ArmRun(
            repetition=rep,
            arm=arm_name,
            scheduler=arm.scheduler,
            namespace=f"exp-{run.id[-4:]}-{rep}-{arm_name}"[:63].rstrip("-"),
        )
        if tuned and arm.scheduler == plan.spec.spec.scheduler.name:
            wanted = _arm_scheduler(plan, arm)
            _ensure_scheduler(plan, wanted)
            arm_run.scheduler_settings = {
                "qps": wanted.qps,
                "burst": wanted.burst,
                "config": wanted.config,
            }
        run.raw["runs"].append(arm_run.to_dict())
        run.say("arm", {"repetition": rep, "of": exp.repetitions, "arm": arm_name})
        try:
            with interrupt.handling():
                asyncio.run(_arm(kubeconfig, run, arm_run, arm, token_secret))
        except KeyboardInterrupt:
            arm_run.status = "interrupted"
            raise
        except Exception as exc:  # the client's ApiError, OSError, what an arm's code raises
            arm_run.status = "failed"
            arm_run.error = str(exc)
            raise RunFailedError(f"arm {arm_name} of repetition {rep}: {exc}") from exc
        finally:
            run.raw["runs"][-1] = arm_run.to_dict()
            run.save()
        run.say(
            "arm-done",
            {
                "repetition": rep,
                "arm": arm_name,
                "status": arm_run.status,
                "seconds": arm_run.seconds,
            },
        )
