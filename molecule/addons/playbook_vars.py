"""Print, as JSON, the variables `decice up` gives the collection's plays for a spec.

    python molecule/addons/playbook_vars.py SPEC > VARS.json

The same dictionary decice's lifecycle passes as extra variables (decice_state_dir,
decice_kubeconfig, decice_spec) plus what the spec's target adds (decice_helm, the
mirror, on the sim decice_post_renderer): values only decice's Python knows, such as
the path of its cached helm. The addons scenario's create step writes it into the
ephemeral directory; converge, verify and destroy load it. Bad input (a spec that does
not load, a mirror that is not a directory) exits 2 with decice's message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from decice.errors import DeciceError
from decice.lifecycle import play_vars
from decice.spec import load
from decice.targets import registry


def playbook_vars(spec: Path) -> dict[str, Any]:
    """The extra variables of a `decice up` run of ``spec`` (decice.lifecycle.play_vars)."""
    loaded = load(spec)
    return play_vars(loaded, registry.get(loaded.spec.target))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} SPEC", file=sys.stderr)
        return 2
    try:
        data = playbook_vars(Path(argv[1]).resolve())
    except DeciceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(data, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
