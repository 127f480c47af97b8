"""The experiment file (EXP.yaml): what it may say, and loading it with file:line errors.

An experiment names the cluster spec, a workload, the arms it compares, how many
repetitions, and the slate each repetition starts from. Validation reuses the spec's
machinery (:func:`decice.spec.validate_yaml`), so a bad experiment file is reported the
way a bad spec is: file, line, column, field and fix, exit 2, nothing touched.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from decice import spec as spec_module
from decice.errors import InputError
from decice_kube.quantity import parse_quantity

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?\Z")
_DURATION = re.compile(r"^(\d+(\.\d+)?)(ms|s|m|h)\Z")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# the sim's virtual HPC node and edge nodes, as the built-in spec and the lab label them
PLACES = ("any", "edge", "hpc")


def duration_seconds(text: str) -> float:
    """``500ms``, ``5s``, ``2m``, ``1h`` -> seconds; ValueError naming the form."""
    found = _DURATION.match(text.strip())
    if not found:
        raise ValueError(f"{text!r} is not a duration; write e.g. 500ms, 5s, 2m or 1h")
    return float(found.group(1)) * _UNIT_SECONDS[found.group(3)]


def _dns_label(value: str, what: str) -> str:
    if len(value) > 40 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{what} {value!r} must be lowercase letters, digits and '-' (at most 40), "
            "starting and ending with a letter or digit"
        )
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Shape(_Model):
    """A pod shape: requests, how long it runs and where it may go."""

    name: str = ""
    cpu: str = "100m"
    memory: str = "128Mi"
    gpu: int = Field(0, ge=0, le=64)
    duration: str = "5s"
    place: Literal["any", "edge", "hpc"] = "any"
    weight: float = Field(1.0, gt=0)

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        parse_quantity(value)  # ValueError names the form
        return value

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        duration_seconds(value)
        return value

    @property
    def seconds(self) -> float:
        return duration_seconds(self.duration)


class Arrival(_Model):
    """When pods arrive: ``fixed`` (one every 1/rate s), ``poisson`` (exponential gaps of
    mean 1/rate), ``bursts`` (``size`` pods at once every ``every``)."""

    process: Literal["fixed", "poisson", "bursts"] = "fixed"
    rate: float = Field(10.0, gt=0, le=10000, description="pods per second (fixed, poisson)")
    size: int = Field(10, ge=1, le=100000, description="pods per burst (bursts)")
    every: str = "5s"

    @field_validator("every")
    @classmethod
    def _every(cls, value: str) -> str:
        duration_seconds(value)
        return value


class Groups(_Model):
    """Gang groups: this fraction of the pods comes in all-or-nothing groups."""

    fraction: float = Field(0.0, ge=0, le=1)
    min_size: int = Field(2, ge=2, le=1000)
    max_size: int = Field(4, ge=2, le=1000)

    @model_validator(mode="after")
    def _sizes(self) -> Groups:
        if self.max_size < self.min_size:
            raise ValueError("max_size must be at least min_size")
        return self


class Generator(_Model):
    """A seeded workload: the same seed gives the same pods, arrivals and groups."""

    seed: int = Field(1, ge=0)
    pods: int = Field(20, ge=1, le=100000)
    arrival: Arrival = Arrival()
    groups: Groups = Groups()


class Workload(_Model):
    """Exactly one of ``generator``, ``trace`` (CSV: time,shape,duration,group) or
    ``manifests`` (Pod YAML files); ``shapes`` are the generator's mix and the names a
    trace refers to."""

    shapes: list[Shape] = Field(default_factory=list)
    image: str = Field("busybox:1.36", description="the container image (not used on sim)")
    group_timeout: int = Field(120, ge=1, le=86400, description="seconds a gang group may wait")
    generator: Generator | None = None
    trace: str | None = None
    manifests: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_source(self) -> Workload:
        given = [
            name
            for name, value in (
                ("generator", self.generator),
                ("trace", self.trace),
                ("manifests", self.manifests or None),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of generator, trace, manifests"
                + (f" (found {', '.join(given)})" if given else "")
            )
        if (self.generator or self.trace) and not self.shapes:
            raise ValueError("a generator or a trace needs shapes (a list of pod shapes)")
        names = [shape.name for shape in self.shapes if shape.name]
        if len(names) != len(set(names)):
            raise ValueError("shape names must be unique")
        if self.trace and len(names) != len(self.shapes):
            raise ValueError("a trace refers to shapes by name: give every shape a name")
        return self


class ArmScheduler(_Model):
    """decice-scheduler as one arm runs it (the sim only): its client limits and its
    scheduling profile; what is left out keeps the spec's ``scheduler`` settings."""

    qps: float | None = Field(None, gt=0, description="binds per second")
    burst: int | None = Field(None, ge=1, description="bind burst")
    config: dict[str, object] | None = Field(
        None, description="a scheduling profile (docs/scheduler.md: filters, scores, weights)"
    )

    @field_validator("config")
    @classmethod
    def _profile(cls, value: dict[str, object] | None) -> dict[str, object] | None:
        """Checked as decice-scheduler checks a profile, with its built-in plugins only:
        checking an out-of-tree plugin ('module:Class', an entry point) would import it,
        and reading an experiment file runs no code."""
        if value is None:
            return value
        from decice_scheduler.framework import Plugin, Registry
        from decice_scheduler.plugins import builtin_registry
        from decice_scheduler.profile import Profile

        builtin = builtin_registry()

        class BuiltinOnly(Registry):
            def resolve(self, ref: str) -> type[Plugin]:
                if ref in builtin.names():
                    return builtin.resolve(ref)
                raise KeyError(
                    f"plugin {ref!r}: an experiment's profile uses decice-scheduler's "
                    f"built-in plugins ({', '.join(builtin.names())}); out-of-tree "
                    "ones go in the spec's scheduler.config"
                )

        try:
            Profile.from_config(value, BuiltinOnly())
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a decice-scheduler profile: {exc}") from None
        return value


class Arm(_Model):
    """One side of the comparison."""

    name: str
    scheduler: str = "default-scheduler"
    labels: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="merged into every pod's nodeSelector (e.g. one virtual node per arm)",
    )
    decice_scheduler: ArmScheduler | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, "arm name")


class Experiment(_Model):
    """EXP.yaml."""

    name: str
    spec: str | None = Field(None, description="cluster spec (relative to this file)")
    repetitions: int = Field(1, ge=1, le=1000)
    slate: Literal["namespace", "reset"] = "namespace"
    timeout: int = Field(600, ge=1, le=86400, description="seconds one arm may run")
    arms: list[Arm] = Field(min_length=1)
    workload: Workload

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, "experiment name")

    @model_validator(mode="after")
    def _unique_arms(self) -> Experiment:
        names = [arm.name for arm in self.arms]
        if len(names) != len(set(names)):
            raise ValueError("arm names must be unique")
        return self


@dataclass(frozen=True)
class LoadedExperiment:
    """A validated experiment file and where it came from."""

    experiment: Experiment
    path: Path
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def resolve(self, relative: str) -> Path:
        """A path the file names, relative to the file's directory."""
        target = Path(relative)
        return target if target.is_absolute() else self.path.parent / target

    @property
    def spec_path(self) -> Path | None:
        return None if self.experiment.spec is None else self.resolve(self.experiment.spec)


def load(path: Path) -> LoadedExperiment:
    """Read and validate ``path``; InputError (exit 2) naming file:line and the fix."""
    path = path.resolve()
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{path}: experiment file not found\n"
            "    fix: give an existing file (see docs/experiments.md for an example)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: cannot read the experiment file: {exc}\n"
            "    fix: give a readable UTF-8 text file"
        ) from None
    experiment, doc = spec_module.validate_yaml(
        text, str(path), Experiment, "start from the example in docs/experiments.md"
    )
    loaded = LoadedExperiment(experiment, path, text)
    spec_path = loaded.spec_path
    if spec_path is not None and not spec_path.is_file():
        pos = doc.locate(("spec",))
        raise InputError(
            f"{path}:{pos.line}:{pos.column}: spec: {spec_path} is not a file\n"
            "    fix: name the cluster spec relative to the experiment file, "
            "or leave spec out for the built-in sim spec"
        )
    return loaded
