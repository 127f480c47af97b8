"""Targets: where the hosts come from and what decice does itself for each.

base.py      the Target interface (the phase contract it uses: decice.phases)
registry.py  every target by its spec name (``registry.get("sim")``)
sim.py       sim: a local control plane with simulated nodes (the built-in default)
hosts.py     static, slurm, pbs, lab: real hosts; Kubespray deploys Kubernetes on them

The package itself imports nothing: a module that needs the interface
(``decice.targets.base``) does not pull in every target,
and no target reaches back into it through the package. Modules import their heavy
dependencies inside functions: `decice --help` and the spec validation import them.
"""
