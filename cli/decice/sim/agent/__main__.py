"""``python -m decice.sim.agent``: the node agent (:func:`decice.sim.agent.run.main`)."""

from __future__ import annotations

import sys

from decice.sim.agent.run import main

sys.exit(main())
