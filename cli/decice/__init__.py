"""decice: bring up, tear down and verify hybrid Kubernetes stacks on borrowed machines."""

__version__ = "0.1.0"
