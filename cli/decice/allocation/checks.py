"""What a host name, an address, an ssh user, port or jump host and a variable name may be.

Every source of machines (the spec, SLURM's nodelist, a PBS nodefile, a hosts file, the
inventory plugin) checks what it read with these functions before anything is built from it:
a host name becomes a file name on the controller (``baseline/<host>.json``) and, like an
address, reaches ssh's command line. Each check returns None when the value is fine, else
what is wrong with it; the caller adds where the value came from and the fix.
"""

from __future__ import annotations

import ipaddress
import keyword
import re
from collections.abc import Mapping

_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_MAX_NAME = 253

HOST_NAME_FIX = (
    "use a host name of letters, digits, '-' and '.' (RFC 1123 labels of at most 63 "
    "characters, none starting or ending with '-'), e.g. node01 or cn1.cluster"
)
ADDRESS_FIX = "give an IPv4/IPv6 address or a DNS name, e.g. 10.0.0.11 or node01.cluster"
USER_FIX = "give a login name of letters, digits, '_', '.' and '-' (not starting with '-')"
PORT_FIX = "give a whole number from 1 to 65535, e.g. 22"
JUMP_FIX = (
    "give [user@]host[:port] (several separated by ',' without spaces), e.g. hpc@login01:22; "
    "other ssh options belong in an ssh config file (allocation.ssh_config)"
)
VAR_NAME_FIX = "use a name of letters, digits and '_' that does not start with a digit"
PATH_FIX = "give a plain file path without control characters"

#: connection variables whose value reaches ssh's command line; hosts[].vars and
#: allocation.vars may set them, checked like the fields they stand for
CONNECTION_VARS = {
    "ansible_host": "address",
    "ansible_ssh_host": "address",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "remote_user": "user",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
}


def shown(value: object, limit: int = 60) -> str:
    """``value`` for an error message: escaped (control characters, look-alikes), shortened."""
    text = ascii(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-1]}"


def host_name_problem(name: object) -> str | None:
    """None when ``name`` is an RFC 1123 host name (dotted labels), else what is wrong."""
    if not isinstance(name, str):
        return f"a host name is a string, got {type(name).__name__}"
    if not name:
        return "the host name is empty"
    if not name.isascii():
        return "a host name has only ASCII letters, digits, '-' and '.' (no look-alike letters)"
    if len(name) > _MAX_NAME:
        return f"a host name has at most {_MAX_NAME} characters; this one has {len(name)}"
    if name.startswith("-"):
        return "a host name does not start with '-' (ssh would read it as an option)"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "a host name has no spaces or control characters"
    for label in name.split("."):
        if not label:
            return "a host name has no empty labels (no leading, trailing or double '.')"
        if len(label) > 63:
            return f"a label has at most 63 characters; {shown(label, 20)} has {len(label)}"
        if not _LABEL.fullmatch(label):
            return (
                "a host name has only letters, digits, '-' and '.', and no label "
                "starts or ends with '-'"
            )
    return None


def address_problem(address: object) -> str | None:
    """None when ``address`` is an IP address or a DNS name, else what is wrong."""
    if not isinstance(address, str):
        return f"an address is a string, got {type(address).__name__}"
    if not address.isascii():
        return "an address has only ASCII letters, digits and '.', ':' (no look-alike characters)"
    if ":" in address:
        bare, _, zone = address.partition("%")
        try:
            ipaddress.IPv6Address(bare)
        except ValueError:
            return "not an IPv6 address"
        if zone and not _ZONE.fullmatch(zone):
            return "the IPv6 zone (after '%') has only letters, digits, '_', '.' and '-'"
        return None
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        pass
    else:
        return None
    if address.replace(".", "").isdigit():
        return "not an IPv4 address (each of the four numbers is 0-255)"
    problem = host_name_problem(address)
    return None if problem is None else f"neither an IP address nor a DNS name: {problem}"


def is_ip(value: object) -> bool:
    """Is ``value`` an IPv4 or IPv6 address (no zone, no DNS name)?"""
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


#: Kubespray v2.29.1's "Stop if bad hostname" (roles/kubernetes/preinstall/tasks/
#: 0040-verify-settings.yml:78-82): inventory_hostname is match(...) - lower case only
KUBESPRAY_HOSTNAME = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"  # stricter: no final \n
)
KUBESPRAY_HOSTNAME_WHERE = (
    'Kubespray v2.29.1 roles/kubernetes/preinstall/tasks/0040-verify-settings.yml:78 "Stop if '
    'bad hostname"'
)
KUBESPRAY_HOSTNAME_FIX = (
    "Kubernetes node names are lower case: rename the host (or give it a lower-case alias "
    "in allocation.ssh_config)"
)


def kubespray_host_name_problem(name: str) -> str | None:
    """None when Kubespray accepts ``name`` as a node's inventory name, else why not."""
    if KUBESPRAY_HOSTNAME.match(name):
        return None
    return (
        "Kubespray refuses it: lower-case letters, digits, '-' and '.' only, starting and "
        f"ending with a letter or digit ({KUBESPRAY_HOSTNAME_WHERE})"
    )


def user_problem(user: object) -> str | None:
    """None when ``user`` is a plain login name (it reaches ssh's ``-o User=``)."""
    if not isinstance(user, str) or not _USER.fullmatch(user):
        return "not a login name"
    return None


def port_problem(port: object) -> str | None:
    """None when ``port`` is a TCP port number (an int, or a string of digits)."""
    if isinstance(port, bool):
        return "not a port number"
    if isinstance(port, str) and port.isascii() and port.isdigit() and len(port) <= 5:
        port = int(port)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        return "not a port number from 1 to 65535"
    return None


def jump_host_problem(value: object) -> str | None:
    """None when ``value`` is ssh ``ProxyJump`` syntax: ``[user@]host[:port]``, comma-separated."""
    if not isinstance(value, str) or not value:
        return "empty"
    for hop in value.split(","):
        user, at, rest = hop.rpartition("@")
        if at and user_problem(user):
            return f"{shown(user)} before '@' is not a login name"
        host, port = rest, ""
        if rest.startswith("["):  # [v6]:port
            host, _, tail = rest[1:].partition("]")
            if tail:
                if not tail.startswith(":"):
                    return f"{shown(hop)} is not [user@]host[:port]"
                port = tail[1:]
        elif rest.count(":") == 1:
            host, _, port = rest.partition(":")
        if port and port_problem(port):
            return f"{shown(port)} after ':' is not a port number"
        problem = address_problem(host)
        if problem:
            return problem if host == value else f"{shown(host)}: {problem}"
    return None


def var_name_problem(key: object) -> str | None:
    """None when ``key`` can be an Ansible variable name (a Python identifier, not a keyword)."""
    if not isinstance(key, str) or not key.isascii() or not key.isidentifier():
        return "not a variable name"
    if keyword.iskeyword(key):
        return "a Python keyword cannot be a variable name"
    return None


def path_problem(value: object) -> str | None:
    """None when ``value`` can be a file path (no NUL or other control characters)."""
    if not isinstance(value, str) or not value:
        return "empty"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "the path contains a control character (NUL, newline, ...)"
    return None


_CHECKS = {
    "address": (address_problem, ADDRESS_FIX),
    "user": (user_problem, USER_FIX),
    "port": (port_problem, PORT_FIX),
}


def vars_problem(variables: Mapping[str, object]) -> tuple[str, str] | None:
    """The first problem of a ``vars`` mapping as (message, fix), or None.

    Names must be variable names; connection variables (``ansible_host``, ``ansible_user``,
    ``ansible_port``, ...) are checked like the fields they stand for. Other values are
    data: decice passes them to Ansible marked unsafe, so they are never templated.
    """
    for key, value in variables.items():
        problem = var_name_problem(key)
        if problem:
            return f"{shown(key)}: {problem}", VAR_NAME_FIX
        kind = CONNECTION_VARS.get(str(key))
        if kind is not None:
            check, fix = _CHECKS[kind]
            problem = check(value)
            if problem:
                return f"{key} {shown(value)}: {problem}", fix
    return None


def message(where: str, field: str, value: object, problem: str, fix: str) -> str:
    """The error text of a bad value read from a file or variable: where, field, problem, fix."""
    return f"{where}: {field} {shown(value)}: {problem}\n    fix: {fix}"
