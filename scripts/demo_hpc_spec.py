"""The demo's spec with a SLURM lab: the built-in default spec, its virtual HPC node hpc-0
backed by an interLink endpoint on the lab's first node (stdin: `decice lab status --json`;
argv[1]: the default spec; stdout: the spec)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def main() -> None:
    lab = json.load(sys.stdin)
    spec = yaml.safe_load(Path(sys.argv[1]).read_text(encoding="utf-8"))
    spec["allocation"] = {"ssh_config": lab["ssh_config"]}
    spec.setdefault("addons", {})["interlink"] = {
        "endpoints": [
            {
                "node": "hpc-0",
                "login_host": lab["nodes"][0]["name"],
                "user": lab["user"],
                "partition": "lab",
                "data_dir": f"{lab['shared_mount']}/decice-demo",
                "runtime": "bare",
            }
        ]
    }
    yaml.safe_dump(spec, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
