"""The pod <-> job map on disk: one JSON file per pod under ``<data dir>/state/`` (0600).

An entry is written (state ``submitting``, no job id) BEFORE sbatch runs and updated
with the job id after, each write atomic (temp file, fsync, rename): a plugin that
restarts finds every job it submitted, and ``cancel-all`` finds even a job whose id was
never recorded (by its name and working dir). Entries hold names, ids and images only,
never env values or volume contents.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from decice.interlink.api import PodRef

SUBMITTING = "submitting"
SUBMITTED = "submitted"
DELETED = "deleted"  # scancel'd on /delete, kept until the job is gone from squeue
# pilot mode (decice.interlink.pilot): waiting for room in a pilot; placed, srun starting
QUEUED = "queued"
LAUNCHING = "launching"


@dataclass
class Entry:
    name: str
    namespace: str
    uid: str
    job_dir: str
    state: str = SUBMITTING
    jid: str = ""
    containers: list[str] = field(default_factory=list)
    init_containers: list[str] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)
    submitted_at: str = ""
    ended: str = ""  # SLURM's end state, recorded the first time the plugin sees it
    # pilot mode: the pod's size, where it runs (pilot job id, node) and when things happened
    mode: str = "job"  # "job": its own batch job; "pilot": a step of a pilot job
    pilot: str = ""
    node: str = ""
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0
    step_time: str = ""  # srun --time (the pod's slurm-job.vk.io/time)
    step: str = ""  # its step's id (<pilot>.<n>) once squeue showed it
    queued_at: float = 0.0
    launched_at: float = 0.0
    deleted_at: float = 0.0

    @property
    def ref(self) -> PodRef:
        return PodRef(self.name, self.namespace, self.uid)


class Store:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def ensure(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def put(self, entry: Entry) -> None:
        data = json.dumps(asdict(entry), indent=1, sort_keys=True) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".entry-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            Path(tmp).replace(self.path(entry.ref.key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def get(self, key: str) -> Entry | None:
        try:
            data = json.loads(self.path(key).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        known = {f.name for f in fields(Entry)}
        try:  # a field of another version is left out, not a crash
            return Entry(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None

    def remove(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def all(self) -> list[Entry]:
        entries: list[Entry] = []
        if not self.directory.is_dir():
            return entries
        for path in sorted(self.directory.glob("*.json")):
            entry = self.get(path.stem)
            if entry is not None:
                entries.append(entry)
        return entries
