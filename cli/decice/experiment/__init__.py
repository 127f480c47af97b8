"""Experiments: a workload run on the cluster once per arm and repetition, and a report.

``model`` (the experiment file), ``workload`` (planned pods and their manifests),
``collect`` (one arm against the API), ``stats`` (the numbers, from raw data only),
``report`` (HTML, CSV, JSON), ``run`` (bookkeeping and order), ``commands`` (the CLI's side).
"""
