"""Benchmark (not a test): reading a list of CRDs as the engine's modules did and do.

Before, ``module_utils/cluster.py`` let the Kubernetes dynamic client wrap each response in
a ``ResourceInstance`` (every field of every object an object of its own) and called
``to_dict()`` to get plain data back; now it parses the body as JSON (``serialize=False``,
``cluster.decoded``). The payload is the real one that costs most: the list of Sedna's 11
CRDs from ``../shared/mirror`` as the API server returns it. Prints min and median seconds
per list of each way over ``--rounds``, side by side, and checks that both give the same
data.

    .venv/bin/python bench/addons/decode.py --rounds 20
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
import time
from pathlib import Path

import yaml
from kubernetes.dynamic.resource import ResourceInstance

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchcli import options

MIRROR = Path(__file__).resolve().parents[3] / "shared" / "mirror"


def sedna_crds_list() -> bytes:
    """The body of a CRD list holding Sedna's CRDs, as JSON bytes."""
    docs: list[object] = []
    with tarfile.open(MIRROR / "charts" / "sedna-0.1.0.tgz") as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            stream = archive.extractfile(member) if "/crds/" in member.name else None
            if stream is not None:
                docs += [d for d in yaml.load_all(stream.read(), Loader=yaml.CSafeLoader) if d]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}).encode()


def main() -> int:
    args = options(__doc__ or "", rounds=20)
    body = sedna_crds_list()
    wrapped: list[float] = []
    plain: list[float] = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        before = ResourceInstance(None, json.loads(body)).to_dict()
        wrapped.append(time.perf_counter() - start)
        start = time.perf_counter()
        now = json.loads(body)
        plain.append(time.perf_counter() - start)
        assert before == now
    print(json.dumps({
        "payload_mb": round(len(body) / 1e6, 2),
        "resource_instance_s": {"min": round(min(wrapped), 4),
                                "median": round(statistics.median(wrapped), 4)},
        "json_s": {"min": round(min(plain), 4), "median": round(statistics.median(plain), 4)},
        "ratio_median": round(statistics.median(plain) / statistics.median(wrapped), 3),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
