"""The ``sim`` target: a real control plane (etcd, kube-apiserver, controller-manager,
optionally kube-scheduler) on loopback, with simulated nodes.

- :mod:`decice.sim.binaries`: where the binaries come from (resolve/describe).
- :mod:`decice.sim.build`: the offline recipe (Debian source build, etcd, npm layer).
- :mod:`decice.sim.download`: checksum-verified release downloads.
- :mod:`decice.sim.aptsrc`: a throw-away apt configuration with derived deb-src lines.
- :mod:`decice.sim.tools`: running commands, installing missing build tools.
- :mod:`decice.sim.controlplane`: start/stop/status of the processes.
- :mod:`decice.sim.pki`: CA, certificates, service-account keys, kubeconfigs.
- :mod:`decice.sim.procs`: detached processes recorded by pid (pid-reuse guard).
"""
