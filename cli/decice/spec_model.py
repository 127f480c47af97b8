"""The experiment spec (decice.yaml) as typed models: fields, defaults, rules."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from decice.allocation import checks
from decice.interlink import slurm as plugin_slurm
from decice_kube.quantity import exact, parse_quantity

TARGETS = ("sim", "lab", "slurm", "pbs", "static")
HOST_ROLES = ("control_plane", "etcd", "worker", "edge", "hpc")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")

Quantity = Annotated[str | int, Field(description="a Kubernetes quantity such as 4, 500m, 16Gi")]


def _dns_label(value: str, example: str = "") -> str:
    """``value`` when it is a DNS label; else the error a spec field shows."""
    if not _DNS_LABEL.match(value):
        raise ValueError(f"use lower-case letters, digits and '-' (a DNS label{example})")
    return value


def _invalid(problem: str, fix: str) -> ValueError:
    """A field's error with its fix, rendered like every spec issue (``fix:`` line)."""
    return ValueError(f"{problem}\n    fix: {fix}")


def _host_name(value: str) -> str:
    problem = checks.host_name_problem(value)
    if problem:
        raise _invalid(f"{checks.shown(value)}: {problem}", checks.HOST_NAME_FIX)
    return value


def _variables(value: dict[str, object]) -> dict[str, object]:
    found = checks.vars_problem(value)
    if found:
        raise _invalid(*found)
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostSpec(_Model):
    """One machine of a static inventory."""

    name: str
    address: str | None = None
    roles: list[Literal["control_plane", "etcd", "worker", "edge", "hpc"]] = Field(
        default_factory=list
    )
    vars: dict[str, object] = Field(default_factory=dict)
    # the internal address Kubespray binds the node's services to (its `ip`); unset:
    # Kubespray takes the address of the host's default route (docs/kubespray.md)
    ip: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _host_name(value)

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: str | None) -> str | None:
        if value is not None and not checks.is_ip(value):
            raise _invalid(
                f"{checks.shown(value)}: not an IP address",
                "give the node's internal IPv4/IPv6 address (or leave ip out)",
            )
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        problem = None if value is None else checks.address_problem(value)
        if problem:
            raise _invalid(f"{checks.shown(value)}: {problem}", checks.ADDRESS_FIX)
        return value

    @field_validator("vars")
    @classmethod
    def _vars(cls, value: dict[str, object]) -> dict[str, object]:
        return _variables(value)


class AllocationSpec(_Model):
    """How machines from an allocation (SLURM, PBS, static list) get their roles."""

    control_plane: int = Field(1, ge=1, description="first K hosts are control plane + etcd")
    edge: list[str] = Field(default_factory=list)
    hpc_endpoints: list[str] = Field(default_factory=list)
    jump_host: str | None = None
    ssh_config: str | None = None
    hosts_file: str | None = None
    # ssh host keys: strict = only keys already known (~/.ssh/known_hosts or the state
    # dir's known_hosts); accept-new = record a host's key on first contact (state dir)
    host_keys: Literal["strict", "accept-new"] = "strict"
    vars: dict[str, object] = Field(
        default_factory=dict, description="Ansible variables for every allocated host"
    )

    @field_validator("edge", "hpc_endpoints")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for name in value:
            _host_name(name)
        return value

    @field_validator("jump_host")
    @classmethod
    def _jump_host(cls, value: str | None) -> str | None:
        problem = None if value is None else checks.jump_host_problem(value)
        if problem:
            raise _invalid(f"{checks.shown(value)}: {problem}", checks.JUMP_FIX)
        return value

    @field_validator("ssh_config", "hosts_file")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        problem = None if value is None else checks.path_problem(value)
        if problem:
            raise _invalid(f"{checks.shown(value)}: {problem}", checks.PATH_FIX)
        return value

    @field_validator("vars")
    @classmethod
    def _vars(cls, value: dict[str, object]) -> dict[str, object]:
        return _variables(value)

    @field_validator("control_plane")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError(
                f"etcd runs on the control-plane hosts and needs an odd count; got {value}"
            )
        return value


class KubernetesSpec(_Model):
    """The Kubernetes that Kubespray deploys (sim runs its own control plane)."""

    version: str | None = None
    kubespray_tag: str | None = None
    container_runtime: Literal["containerd"] = "containerd"
    cni: Literal["calico", "flannel", "cilium"] = "calico"
    # set: Kubespray downloads each file once and shares it through this directory on
    # the controller (relative to the spec's directory); docs/kubespray.md
    download_cache_dir: str | None = None

    @field_validator("download_cache_dir")
    @classmethod
    def _cache_dir(cls, value: str | None) -> str | None:
        problem = None if value is None else checks.path_problem(value)
        if problem:
            raise _invalid(f"{checks.shown(value)}: {problem}", checks.PATH_FIX)
        return value


class AddonSpec(_Model):
    """One add-on: on/off, an optional version override, chart/manifest values."""

    enabled: bool = True
    version: str | None = None
    values: dict[str, object] = Field(default_factory=dict)


NODE_PORTS = (30000, 32767)  # kube-apiserver's default --service-node-port-range
BASTION_PORT_BASE = 31022  # the interLink chart's sshBastion.port
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
_LAUNCHER = re.compile(r"^[A-Za-z0-9_./=+:,@ -]{1,200}\Z")  # words, no quoting needed


def _slurm_name(value: str | None) -> str | None:
    if value is not None and not _SLURM_NAME.match(value):
        raise _invalid(
            f"{checks.shown(value)}: not a SLURM name",
            "give the name as sinfo/sacctmgr shows it (letters, digits, '_', '.', '-')",
        )
    return value


class PilotSpec(_Model):
    """An endpoint's pilots (``mode: pilot``): leased allocations its pods run in as steps."""

    nodes: Annotated[int, Field(ge=1)] = 1
    time: str = "1:00:00"  # each pilot's walltime (sbatch --time)
    partition: str | None = None  # unset: the endpoint's
    account: str | None = None  # unset: the endpoint's
    max_pilots: Annotated[int, Field(ge=1)] = 1
    idle_release: Annotated[int, Field(ge=0)] = 300  # seconds a pilot without pods is kept
    withdraw: Annotated[int, Field(ge=0)] = 60  # seconds before the walltime: no new pods

    @field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        if not plugin_slurm.seconds(value):
            raise _invalid(
                f"{checks.shown(value)}: not a SLURM time limit",
                "give [days-]hours:minutes:seconds or minutes, e.g. 1:00:00 or 2-00:00:00",
            )
        return value

    @field_validator("partition", "account")
    @classmethod
    def _slurm_name(cls, value: str | None) -> str | None:
        return _slurm_name(value)


class InterlinkEndpoint(_Model):
    """One virtual HPC node and the SLURM login host whose plugin backs it (docs/interlink.md)."""

    node: str  # the virtual node's name (a DNS label)
    login_host: str  # an inventory host (group decice_hpc); on sim a name ssh reaches
    user: str | None = None  # ssh/SLURM user there (unset: the inventory's)
    port: int = 4000  # the plugin's TCP port on the login host
    partition: str
    account: str | None = None
    data_dir: str  # absolute, on a file system the compute nodes share
    runtime: Literal["auto", "apptainer", "bare"] = "auto"
    # what a pod that sets no cpu / no memory gets (memory unset: the partition's default),
    # and what starts the containers of a pod with slurm-job.vk.io/mpi-flags
    default_cpu: str = "1"
    default_memory: str | None = None
    mpi_launcher: str = "mpiexec"
    # real clusters: the virtual node's ssh bastion (a NodePort), which the plugin's tunnel
    # reaches from the login host (unset: BASTION_PORT_BASE + the endpoint's index, and the
    # first control-plane host's address)
    bastion_port: int | None = None
    bastion_host: str | None = None
    # job: one SLURM job per pod; pilot: pods as steps of leased allocations (docs/interlink.md)
    mode: Literal["job", "pilot"] = "job"
    pilot: PilotSpec | None = None

    @model_validator(mode="after")
    def _pilot_needs_mode(self) -> InterlinkEndpoint:
        if self.pilot is not None and self.mode != "pilot":
            raise _invalid(
                "pilot is set but mode is job",
                "set mode: pilot to lease pilots, or remove pilot",
            )
        return self

    @field_validator("bastion_port")
    @classmethod
    def _bastion_port(cls, value: int | None) -> int | None:
        if value is not None and not NODE_PORTS[0] <= value <= NODE_PORTS[1]:
            raise _invalid(
                f"{checks.shown(value)}: not in Kubernetes' NodePort range "
                f"{NODE_PORTS[0]}-{NODE_PORTS[1]}",
                f"give a free NodePort, e.g. {BASTION_PORT_BASE}",
            )
        return value

    @field_validator("bastion_host")
    @classmethod
    def _bastion_host(cls, value: str | None) -> str | None:
        problem = None if value is None else checks.address_problem(value)
        if problem:
            raise _invalid(f"{checks.shown(value)}: {problem}", checks.ADDRESS_FIX)
        return value

    @field_validator("default_cpu", "default_memory")
    @classmethod
    def _default_size(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        example = "1 or 500m" if info.field_name == "default_cpu" else "2Gi"
        try:
            number = exact(value)
        except ValueError as exc:
            raise _invalid(str(exc), f"give a Kubernetes quantity, e.g. {example}") from None
        if info.field_name == "default_cpu" and number <= 0:
            raise _invalid(f"{checks.shown(value)}: not above 0", f"give e.g. {example}")
        return value

    @field_validator("mpi_launcher")
    @classmethod
    def _mpi_launcher(cls, value: str) -> str:
        words = value.split()
        if not words or words[0].startswith("-") or not _LAUNCHER.match(value):
            raise _invalid(
                f"{checks.shown(value)}: not a command",
                "give the MPI launcher and its options, e.g. mpiexec or srun --mpi=pmix",
            )
        return value

    @field_validator("node")
    @classmethod
    def _node(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise _invalid(
                f"{checks.shown(value)}: not a DNS label",
                "name the virtual node with lower-case letters, digits and '-', e.g. hpc-0",
            )
        return value

    @field_validator("login_host")
    @classmethod
    def _login_host(cls, value: str) -> str:
        return _host_name(value)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        problem = None if value is None else checks.user_problem(value)
        if problem:
            raise _invalid(f"{checks.shown(value)}: {problem}", checks.USER_FIX)
        return value

    @field_validator("port")
    @classmethod
    def _port(cls, value: int) -> int:
        problem = checks.port_problem(value)
        if problem:
            raise _invalid(f"{checks.shown(value)}: {problem}", "give a port such as 4000")
        return value

    @field_validator("partition", "account")
    @classmethod
    def _slurm_name(cls, value: str | None) -> str | None:
        return _slurm_name(value)

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: str) -> str:
        problem = checks.path_problem(value) or (
            None if value.startswith("/") else "not an absolute path"
        )
        if problem:
            raise _invalid(
                f"{checks.shown(value)}: {problem}",
                "give an absolute directory on the file system the compute nodes share, "
                "e.g. /shared/decice-interlink",
            )
        return value.rstrip("/") or "/"


class InterlinkSpec(AddonSpec):
    """interLink: the common add-on settings plus the SLURM endpoints of the virtual nodes."""

    endpoints: list[InterlinkEndpoint] = Field(default_factory=list)

    @field_validator("endpoints")
    @classmethod
    def _unique(cls, value: list[InterlinkEndpoint]) -> list[InterlinkEndpoint]:
        first: dict[str, int] = {}
        for index, endpoint in enumerate(value):
            if endpoint.node in first:
                raise _invalid(
                    f"endpoints[{index}].node {endpoint.node!r} repeats "
                    f"endpoints[{first[endpoint.node]}].node",
                    "give each virtual node one endpoint (node names are unique)",
                )
            first[endpoint.node] = index
        ports: dict[int, int] = {}
        for index, endpoint in enumerate(value):
            port = endpoint.bastion_port or BASTION_PORT_BASE + index
            if port in ports:
                raise _invalid(
                    f"endpoints[{index}].bastion_port {port} repeats the bastion port of "
                    f"endpoints[{ports[port]}] (unset, an endpoint's is {BASTION_PORT_BASE} + its "
                    "index)",
                    "give each endpoint its own bastion_port",
                )
            ports[port] = index
        return value


_MANIFEST_PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*\Z")


class KubeflowSpec(AddonSpec):
    """Kubeflow: Trainer alone (the default), or the whole kubeflow/manifests platform."""

    profile: Literal["trainer", "full"] = "trainer"
    # full: entries of the manifests' example/kustomization.yaml resources to leave out,
    # written from the manifests' top directory (applications/pipeline/overlays)
    exclude: list[str] = Field(default_factory=list)

    @field_validator("exclude")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for index, entry in enumerate(value):
            text = entry.strip("/")
            if not _MANIFEST_PATH.match(text) or ".." in text.split("/"):
                raise _invalid(
                    f"exclude[{index}] {checks.shown(entry)}: not a directory of the manifests",
                    "write the entry as example/kustomization.yaml lists it, without the "
                    "leading ../, e.g. applications/pipeline/overlays",
                )
            value[index] = text
        return value

    @model_validator(mode="after")
    def _profile(self) -> KubeflowSpec:
        if self.exclude and self.profile != "full":
            raise ValueError(
                "exclude applies to profile: full only\n"
                "    fix: set profile: full, or remove exclude"
            )
        return self


class AddonsSpec(_Model):
    """One field per entry of the add-on registry (roles/common/vars/main/addons.yml; a test
    keeps them equal)."""

    volcano: AddonSpec = AddonSpec()
    kubeedge: AddonSpec = AddonSpec()
    sedna: AddonSpec = AddonSpec()
    interlink: InterlinkSpec = InterlinkSpec()
    kubeflow: KubeflowSpec = KubeflowSpec()

    def get(self, name: str) -> AddonSpec:
        """The settings of add-on ``name``."""
        value = getattr(self, name, None)
        if not isinstance(value, AddonSpec):
            raise KeyError(f"no add-on {name!r}")
        return value


class PlacementScoresSpec(_Model):
    """OCM AddOnPlacementScore published by the scheduler (docs/scheduler.md)."""

    enabled: bool = False
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    name: str = Field(
        "resource-usage-score",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        max_length=253,
    )
    interval: float = Field(30.0, gt=0)


class SchedulerSpec(_Model):
    enabled: bool = True
    name: str = "decice-scheduler"
    qps: float = Field(50.0, gt=0)
    burst: int = Field(100, ge=1)
    replicas: int = Field(1, ge=1)
    image: str | None = None
    config: dict[str, object] = Field(default_factory=dict)
    placement_scores: PlacementScoresSpec = Field(default_factory=PlacementScoresSpec)


_REGISTRY_URL = re.compile(
    r"^(https?)://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[^\s]*)?\Z"
)


class RegistrySpec(_Model):
    """The site's container registry mirror (Kubespray's images; containerd pulls from it)."""

    url: str  # http://host:port (plain HTTP) or https://host[:port]
    ca: str | None = None  # CA file on every node for a self-signed https registry
    skip_verify: bool = False  # https without certificate verification

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not _REGISTRY_URL.match(value):
            raise _invalid(
                f"{checks.shown(value)}: not an http(s)://host[:port][/path] URL",
                "write the registry with its scheme, e.g. http://registry.local:5000",
            )
        return value.rstrip("/")

    @field_validator("ca")
    @classmethod
    def _ca(cls, value: str | None) -> str | None:
        problem = None if value is None else checks.path_problem(value)
        if problem or (value is not None and not value.startswith("/")):
            raise _invalid(
                f"{checks.shown(value)}: {problem or 'not an absolute path'}",
                "give the absolute path of the CA file on the nodes, e.g. /etc/ssl/mirror-ca.pem",
            )
        return value

    @model_validator(mode="after")
    def _tls(self) -> RegistrySpec:
        if self.url.startswith("http://") and (self.ca or self.skip_verify):
            raise ValueError("ca and skip_verify apply to an https:// registry only")
        return self


class MirrorSpec(_Model):
    """Where to fetch artifacts when the sites' upstreams are unreachable."""

    url: str | None = None
    path: str | None = None
    # Fetch the Kubespray source from an http:// mirror.url (refused otherwise; the tree is
    # still checked against the pinned digest, and the run record carries a warning).
    allow_insecure_http: bool = False
    # the container registry Kubespray's images come from (else `registry:` of mirror.yml)
    registry: RegistrySpec | None = None

    @field_validator("registry", mode="before")
    @classmethod
    def _registry_short(cls, value: object) -> object:
        return {"url": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one(self) -> MirrorSpec:
        if (self.url is None) == (self.path is None):
            raise ValueError("give exactly one of mirror.url or mirror.path")
        if self.allow_insecure_http and self.url is None:
            raise ValueError("mirror.allow_insecure_http applies to mirror.url only")
        return self


_UPSTREAM_KEY = re.compile(r"^(https|oci)://[A-Za-z0-9.-]+(:[0-9]{1,5})?/\S*\Z")
_UPSTREAM_VALUE = {
    "https": re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/\S*\Z"),
    "oci": re.compile(r"^oci://[A-Za-z0-9.-]+(:[0-9]{1,5})?/\S*\Z"),
}


class UpstreamSpec(_Model):
    """Where upstream's own artifacts are fetched from when no mirror is set: a proxy or an
    internal copy of upstream's hosts (docs/addons.md "Upstream sources")."""

    # upstream URL or OCI prefix (with its host and a "/") -> the prefix to fetch from instead
    rewrite: dict[str, str] = Field(default_factory=dict)
    # allow http:// replacements and OCI registries without TLS (helm --plain-http)
    plain_http: bool = False

    @model_validator(mode="after")
    def _prefixes(self) -> UpstreamSpec:
        for key, value in self.rewrite.items():
            found = _UPSTREAM_KEY.match(key)
            if found is None:
                raise ValueError(
                    f"upstream.rewrite key {key!r}: give an https:// or oci:// prefix with its "
                    "host and a trailing /, e.g. 'https://github.com/'"
                )
            scheme = found.group(1)
            if not _UPSTREAM_VALUE[scheme].match(value):
                form = "http(s)://host/..." if scheme == "https" else "oci://host/..."
                raise ValueError(f"upstream.rewrite[{key!r}]: {value!r} is not a {form} prefix")
            if value.startswith("http://") and not self.plain_http:
                raise ValueError(
                    f"upstream.rewrite[{key!r}]: {value!r} is plain HTTP; "
                    "set upstream.plain_http: true to allow it"
                )
        return self


class Taint(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


def _default_capacity() -> dict[str, str | int]:
    return {"cpu": "8", "memory": "32Gi", "pods": "110"}


class SimNodeGroup(_Model):
    """A group of identical simulated nodes."""

    name_prefix: str
    count: int = Field(ge=0, le=20000)
    capacity: dict[str, Quantity] = Field(default_factory=_default_capacity)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)

    @field_validator("name_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return _dns_label(value)

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for resource, amount in value.items():  # as the node agent and the scheduler read it
            try:
                negative = parse_quantity(amount) < 0
            except ValueError:
                negative = None
            if negative is None or negative:
                raise ValueError(f"{resource}: {amount!r} is not a quantity (e.g. 4, 500m, 16Gi)")
        missing = {"cpu", "memory"} - set(value)
        if missing:
            raise ValueError(f"capacity needs {', '.join(sorted(missing))}")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a valid label key")
        return value


class SimSpec(_Model):
    """The simulated cluster: a real control plane on loopback, simulated nodes."""

    nodes: list[SimNodeGroup] = Field(default_factory=list)
    bin_dir: str | None = None
    # kube-apiserver logs every pod create and binding with its own timestamps
    # (decice.sim.controlplane.audit; decice experiment reads it):
    # <state>/sim/control-plane/audit.log
    audit_log: bool = False


class LabSpec(_Model):
    """Local systemd containers as nodes."""

    name: str = "lab"
    nodes: int = Field(3, ge=1, le=64)
    slurm: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value)


class Spec(_Model):
    """decice.yaml: one experiment's cluster."""

    name: str
    target: Literal["sim", "lab", "slurm", "pbs", "static"] = "sim"
    allow_untested_versions: bool = False
    hosts: list[HostSpec] = Field(default_factory=list)
    allocation: AllocationSpec = AllocationSpec()
    kubernetes: KubernetesSpec = KubernetesSpec()
    addons: AddonsSpec = AddonsSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    mirror: MirrorSpec | None = None
    upstream: UpstreamSpec = UpstreamSpec()
    sim: SimSpec = SimSpec()
    lab: LabSpec = LabSpec()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, ", e.g. my-exp")
