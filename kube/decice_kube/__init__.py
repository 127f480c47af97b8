"""decice's Kubernetes library: what the CLI, decice-scheduler, the sim's node agent and
the interLink plugin share about Kubernetes objects.

Modules: ``quantity`` (the resource quantity grammar: counting and exact readings) and
``pods`` (a pod's peak request). Both are standard library only, so the interLink plugin
runs them on login hosts without dependencies. Imports nothing of decice's other packages
(tests/unit/test_layout.py).
"""
