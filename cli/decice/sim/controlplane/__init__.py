"""The sim's control plane on loopback: its processes (``loopback``), certificates and
kubeconfigs (``pki``) and the API server's audit log (``audit``)."""
