"""What a pod may ask sbatch for (``slurm-job.vk.io/flags``), resolved as sbatch resolves it.

sbatch takes a long option by any unique prefix (``--outp`` is ``--output``), so a list of
refused names is no check: ``--outp=/home/u/.bashrc`` passed one and sbatch applied it.
Here a flag is resolved against sbatch's own options (slurm-wlm 22.05's ``sbatch --help``)
the way getopt_long does (an exact name, else a unique prefix), checked against what a
pod may set, and written back in its full form (``--output``, never ``--outp``), so the
line the plugin writes means one option to every sbatch version.

Refused, each with its reason: what the plugin sets and reads back (its bookkeeping:
the job's name, output, directory, environment, one job per pod on this cluster, sbatch's
own output), and what reads or runs a file on the login host by path. Every other option
of the table is allowed; anything outside it is refused as unknown.
"""

from __future__ import annotations

from typing import Literal

ArgKind = Literal["required", "optional", "none"]

# sbatch 22.05's long options and whether each takes a value (``sbatch --help``)
OPTIONS: dict[str, ArgKind] = {
    **dict.fromkeys(
        (
            "account", "array", "bb", "bbf", "begin", "chdir", "cluster-constraint",
            "clusters", "comment", "constraint", "container", "core-spec",
            "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline",
            "delay-boot", "dependency", "distribution", "error", "export-file",
            "extra-node-info", "gid", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node",
            "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "input", "job-name",
            "licenses", "mail-type", "mail-user", "mcs-label", "mem", "mem-per-cpu",
            "mem-per-gpu", "mincpus", "nodefile", "nodelist", "nodes", "ntasks",
            "ntasks-per-core", "ntasks-per-node", "ntasks-per-socket", "output",
            "partition", "power", "priority", "profile", "qos", "reservation", "signal",
            "sockets-per-node", "switches", "thread-spec", "threads-per-core", "time",
            "time-min", "tmp", "uid", "wckey", "exclude",
        ),
        "required",
    ),
    **dict.fromkeys(("export", "exclusive", "nice", "propagate", "wrap"), "optional"),
    **dict.fromkeys(
        (
            "contiguous", "get-user-env", "help", "hold", "ignore-pbs", "no-kill",
            "no-requeue", "overcommit", "oversubscribe", "parsable", "quiet", "reboot",
            "requeue", "spread-job", "usage", "use-min-nodes", "verbose", "version", "wait",
        ),
        "none",
    ),
}  # fmt: skip

SHORT = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info",
    "c": "cpus-per-task", "C": "constraint", "d": "dependency", "D": "chdir",
    "e": "error", "F": "nodefile", "G": "gpus", "h": "help", "H": "hold", "i": "input",
    "J": "job-name", "k": "no-kill", "L": "licenses", "m": "distribution", "M": "clusters",
    "n": "ntasks", "N": "nodes", "o": "output", "O": "overcommit", "p": "partition",
    "q": "qos", "Q": "quiet", "s": "oversubscribe", "S": "core-spec", "t": "time",
    "v": "verbose", "V": "version", "w": "nodelist", "W": "wait", "x": "exclude",
}  # fmt: skip

_PLUGIN = "is set by the plugin"
REFUSED = {
    "job-name": f"{_PLUGIN} (it finds the pod's job by its name)",
    "output": f"{_PLUGIN} (it reads the containers' logs from the job directory)",
    "error": f"{_PLUGIN} (it reads the containers' logs from the job directory)",
    "input": "reads a file on the login host by path",
    "chdir": f"{_PLUGIN} (the job runs in its job directory)",
    "export": f"{_PLUGIN} (the containers get the pod's env, nothing else)",
    "export-file": f"{_PLUGIN} (the containers get the pod's env, nothing else)",
    "get-user-env": f"{_PLUGIN} (the containers get the pod's env, nothing else)",
    "wrap": "would replace the job script the plugin writes",
    "container": "would run the job script in an OCI container the plugin does not manage",
    "array": "one job per pod: an array's tasks are not tracked",
    "clusters": "the plugin tracks jobs on its own cluster only",
    "wait": "sbatch would not return until the job ends",
    "parsable": f"{_PLUGIN} (it reads sbatch's answer)",
    "quiet": f"{_PLUGIN} (it reads sbatch's answer)",
    "verbose": f"{_PLUGIN} (it reads sbatch's answer)",
    "ignore-pbs": _PLUGIN,
    "uid": "the job runs as the plugin's user",
    "gid": "the job runs as the plugin's user",
    "bbf": "reads a file on the login host by path",
    "nodefile": "reads a file on the login host by path",
    "help": "not a job option",
    "usage": "not a job option",
    "version": "not a job option",
}


class FlagError(ValueError):
    """A flag a pod may not give; the message says which and why."""


def resolve(name: str) -> str:
    """The sbatch long option ``name`` (without ``--``) means: exact, else the one option
    it is a unique prefix of."""
    if name in OPTIONS:
        return name
    matches = sorted(option for option in OPTIONS if option.startswith(name))
    if not matches:
        raise FlagError(f"--{name} is not an sbatch option")
    if len(matches) > 1:
        raise FlagError(
            f"--{name} is ambiguous ({', '.join('--' + m for m in matches)}): write it out"
        )
    return matches[0]


def _allowed(option: str, given: str) -> str:
    reason = REFUSED.get(option)
    if reason is not None:
        shown = given if given == f"--{option}" else f"{given} (--{option})"
        raise FlagError(f"{shown} {reason}; remove it")
    return option


def canonical(tokens: list[str]) -> list[str]:
    """``tokens`` (already split, free of blanks and quotes) as full ``--option[=value]``
    items, one per option; FlagError for the first one a pod may not give."""
    out: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token.startswith("--") and len(token) > 2:
            name, eq, value = token[2:].partition("=")
            option = _allowed(resolve(name), f"--{name}")
            kind = OPTIONS[option]
            if kind == "none" and eq:
                raise FlagError(f"--{option} takes no value")
            if kind == "required" and not eq:
                if index >= len(tokens) or tokens[index].startswith("-"):
                    raise FlagError(f"--{option} needs a value")
                value, eq = tokens[index], "="
                index += 1
        elif token.startswith("-") and len(token) >= 2 and token[1] != "-":
            letter, value = token[1], token[2:]
            if letter not in SHORT:
                raise FlagError(f"-{letter} is not an sbatch option")
            option = _allowed(SHORT[letter], f"-{letter}")
            kind = OPTIONS[option]
            if kind == "none":
                if value:
                    raise FlagError(f"{token}: give -{letter} on its own")
                eq = ""
            else:
                if not value:
                    if index >= len(tokens) or tokens[index].startswith("-"):
                        raise FlagError(f"-{letter} needs a value")
                    value = tokens[index]
                    index += 1
                eq = "="
        else:
            raise FlagError(f"{token!r} is not an sbatch option")
        if eq and not value:
            raise FlagError(f"--{option} needs a value")
        out.append(f"--{option}={value}" if eq else f"--{option}")
    return out
