"""A fake SLURM for decice-interlink-slurm's unit tests: sbatch runs the script locally.

``install(bin_dir, registry)`` writes sbatch/squeue/scancel/scontrol/sacct scripts that
keep their jobs under ``registry`` (``<jid>.pid``, ``.name``, ``.dir``, ``.state``); the
job script runs with bash on this machine, so what it writes (exit codes, logs) is real.
Two nodes of 4 CPUs and 8000 MiB in partition ``batch``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SBATCH = r"""#!/bin/bash
set -eu
R="$FAKE_SLURM"
echo "$*" >> "$R/sbatch-calls"
while [ "${1#-}" != "$1" ]; do shift; done  # the options: --parsable, --ignore-pbs
script="$1"
if [ -e "$R/fail-sbatch" ]; then echo "sbatch: error: Batch job submission failed" >&2; exit 1; fi
ls "$FAKE_SLURM_DATA/state" > "$R/state-at-sbatch" 2>/dev/null || true
cat "$FAKE_SLURM_DATA"/state/*.json > "$R/entries-at-sbatch" 2>/dev/null || true
jid=$(( $(cat "$R/counter" 2>/dev/null || echo 0) + 1 ))
echo "$jid" > "$R/counter"
name=$(sed -n 's/^#SBATCH --job-name=//p' "$script")
dir=$(sed -n 's/^#SBATCH --chdir=//p' "$script")
out=$(sed -n 's/^#SBATCH --output=//p' "$script")
echo "$name" > "$R/$jid.name"; echo "$dir" > "$R/$jid.dir"
cp "$script" "$R/$jid.script"
if [ -e "$R/hold" ]; then echo PENDING > "$R/$jid.state"; echo "$jid"; exit 0; fi
cd "$dir"
setsid bash "$script" > "$out" 2>&1 < /dev/null &
echo $! > "$R/$jid.pid"
echo "$jid"
"""

SQUEUE = r"""#!/bin/bash
R="$FAKE_SLURM"
echo "$*" >> "$R/squeue-calls"
for f in "$R"/*.name; do
  [ -e "$f" ] || continue
  jid=$(basename "$f" .name)
  state=$(cat "$R/$jid.state" 2>/dev/null || true)
  reason=None
  if [ -z "$state" ]; then
    proc_state=$(awk '{print $3}' "/proc/$(cat "$R/$jid.pid")/stat" 2>/dev/null)
    if [ -n "$proc_state" ] && [ "$proc_state" != Z ]; then
      state=RUNNING
    else
      state=COMPLETED
    fi
  fi
  [ "$state" = PENDING ] && reason=Resources
  [ -e "$R/forget-ended" ] && [ "$state" != RUNNING ] && [ "$state" != PENDING ] && continue
  echo "$jid|$state|$reason|$(cat "$R/$jid.name")|$(cat "$R/$jid.dir")"
done
"""

SCANCEL = r"""#!/bin/bash
R="$FAKE_SLURM"
for arg in "$@"; do
  case "$arg" in -*) continue;; esac
  echo "$arg" >> "$R/cancelled"
  if [ -e "$R/$arg.pid" ]; then kill -TERM "$(cat "$R/$arg.pid")" 2>/dev/null; fi
  echo CANCELLED > "$R/$arg.state"
done
exit 0
"""

NODES = (
    "NodeName=c1 CPUAlloc=1 CPUTot=4 RealMemory=8000 AllocMem=1000 Gres=gpu:2 GresUsed=gpu:1"
    " State=MIXED Partitions=batch",
    "NodeName=c2 CPUAlloc=0 CPUTot=4 RealMemory=8000 AllocMem=0 Gres=(null) State=IDLE"
    " Partitions=batch",
    "NodeName=c3 CPUAlloc=0 CPUTot=64 RealMemory=999999 AllocMem=0 State=DOWN+DRAIN"
    " Partitions=batch",
)
SCONTROL = (
    "#!/bin/bash\n"
    'case "$*" in\n'
    "  *nodes*)\n" + "".join(f"    echo '{line}'\n" for line in NODES) + "    ;;\n"
    "  *partition*) echo 'PartitionName=batch Default=YES Nodes=c[1-3] State=UP';;\n"
    "esac\n"
)

SACCT = """#!/bin/bash
echo "Slurm accounting storage is disabled" >&2
exit 1
"""

SCRIPTS = {
    "sbatch": SBATCH,
    "squeue": SQUEUE,
    "scancel": SCANCEL,
    "scontrol": SCONTROL,
    "sacct": SACCT,
}


def install(bin_dir: Path, registry: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    registry.mkdir(parents=True, exist_ok=True)
    for name, text in SCRIPTS.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


def env(bin_dir: Path, registry: Path, data_dir: Path) -> dict[str, str]:
    """Environment entries that make the fake SLURM the one on PATH."""
    return {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "FAKE_SLURM": str(registry),
        "FAKE_SLURM_DATA": str(data_dir),
    }


def kill_all(registry: Path) -> None:
    """Stop every job the fake started (test teardown)."""
    for pid_file in registry.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(pid_file.read_text()), 15)
