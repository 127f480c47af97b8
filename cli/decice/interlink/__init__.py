"""decice-interlink-slurm: an interLink 0.6.2 plugin that runs pods as SLURM jobs, rootless.

Stdlib only, and nothing from decice outside this package but ``decice.command`` and
the Kubernetes library's ``decice_kube.quantity``, ``.pods`` and ``.loopback``, all
stdlib-only: its own wheel (``packaging/interlink-plugin``) installed with ``--no-deps``
into a bare venv on an HPC login host runs it as the user whose SLURM account the jobs
use. See docs/interlink.md.

Modules: ``api`` (the JSON shapes of interLink's Go types), ``podspec`` (what a pod
asks for), ``jobscript`` (pod -> job dir + sbatch script), ``slurm``
(sbatch/squeue/scancel/scontrol/sacct), ``status`` (job + files -> container statuses),
``store`` (the pod<->job map on disk), ``plugin`` (the operations), ``server`` (HTTP over
TCP with a bearer token or a unix socket), ``__main__`` (the CLI).
"""
