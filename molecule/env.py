"""Print the environment the molecule scenarios need, as shell `export` lines.

    eval "$(.venv/bin/python molecule/env.py)"

DECICE_NODE_IMAGE is the lab node image of this host's recipe (built or imported once,
then cached: see decice.lab.image.ensure_image); CONTAINERS_CONF is decice's
containers.conf for this host (see decice.lab.podman). Progress goes to stderr.
"""

from __future__ import annotations

import logging
import shlex
import sys

from decice.lab.image import ensure_image
from decice.lab.podman import Podman, write_containers_conf
from decice.paths import cache_dir


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    podman = Podman(write_containers_conf(cache_dir() / "molecule"))
    image = ensure_image(podman)
    for key, value in (("DECICE_NODE_IMAGE", image.ref), ("CONTAINERS_CONF", str(podman.conf))):
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
