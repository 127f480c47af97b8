"""decice-scheduler: the bundled scheduler with exact state sync."""

__version__ = "0.1.0"
