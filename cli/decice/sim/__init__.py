"""The ``sim`` target: a real control plane (etcd, kube-apiserver, controller-manager,
optionally kube-scheduler) on loopback, with simulated nodes.

- :mod:`decice.sim.binaries`: the control plane's binaries: where they come from
  (``resolve``), the offline recipe (``build``, ``aptsrc``, ``tools``), checksum-verified
  release downloads (``download``).
- :mod:`decice.sim.controlplane`: the processes on loopback (``loopback``), their
  certificates and kubeconfigs (``pki``), the API server's audit log (``audit``).
- :mod:`decice.sim.agent`: the node agent that plays the kubelet of every simulated node
  (``run``, ``simnodes``), the virtual kubelet of nodes an interLink plugin backs
  (``vkubelet``, ``vkmodel``), and the agent as a managed process (``nodes_service``).
- :mod:`decice.sim.procs`: detached processes recorded by pid (pid-reuse guard), the
  helper ``nodes_service`` and :mod:`decice.sim.scheduler_service` (the bundled
  scheduler on the sim) build on.
- :mod:`decice.sim.postrender`: charts adapted to the sim's 1.20 API, every rewrite
  reported.
"""
