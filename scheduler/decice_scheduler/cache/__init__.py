"""The scheduler's model of the cluster, along kube-scheduler's cache: raw objects read
once (``objects``, ``resources``, ``affinity``, ``podinfo``, ``nodeinfo``), the cache of
nodes, pods and per-node totals (``state``) kept exact by list + watch (``sync``), the
read-only view a cycle works on (``snapshot``), and the drift audit against a fresh
LIST (``usage``, ``audit``)."""
