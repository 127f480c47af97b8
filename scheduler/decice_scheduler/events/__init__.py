"""Scheduling events like kube-scheduler's: what is written and how (``recorder``:
aggregation, rate limits, writes) and the child process that writes them
(``writer``, ``python -m decice_scheduler.events.writer``)."""
