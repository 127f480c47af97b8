"""decice's Kubernetes library: what the CLI, decice-scheduler, the sim's node agent and
the interLink plugin share about Kubernetes objects.

Modules: ``client`` (THE Kubernetes client: kubeconfig, TLS, a rotating token file,
paging, watches, retries, typed errors) with ``http1`` (its lean HTTP/1.1 path) and
``jsonload`` (how it reads JSON), ``web`` (plain HTTP(S) on the same stack: probes,
mirror files, downloads, a local JSON service),
``quantity`` (the resource quantity grammar: counting and exact readings), ``pods``
(a pod's peak request) and ``loopback`` (may an endpoint serve without a token).
``quantity``, ``pods`` and ``loopback`` are standard library only, so the interLink
plugin runs them on login hosts without dependencies. Imports nothing of
decice's other packages (tests/unit/test_layout.py).
"""

import sys

# httpx imports its command-line client (click, rich, pygments) whenever those are
# installed: about 0.1 s of CPU at every start of the scheduler and of its event writer
# in an environment that has them (the CLI's own venv, where the sim runs the scheduler
# and the node agent). Nothing here uses httpx's command line; a None entry makes that
# one import fail as httpx expects when its CLI extras are absent (httpx then defines a
# stub ``main``). An httpx already imported keeps its own.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
