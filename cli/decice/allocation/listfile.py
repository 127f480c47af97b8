"""Reading a list of hosts from a file (PBS nodefile, hosts file) without trusting it."""

from __future__ import annotations

from pathlib import Path

from decice.errors import InputError

#: more than any real allocation's list of hosts; a larger file is not one
MAX_BYTES = 16 * 1024 * 1024


def read_lines(path: Path, what: str, fix: str) -> list[str]:
    """The lines of the text file ``path``; InputError (naming ``what``) when it is not one.

    ``what`` says which file this is (e.g. "PBS_NODEFILE"), ``fix`` what to do about it.
    Refused: a missing or unreadable file, anything but a regular file (a FIFO or device
    would block), more than MAX_BYTES, bytes that are not UTF-8 (a binary file).
    """
    where = f"{what} {path}"
    try:
        if not path.is_file():
            reason = "does not exist" if not path.exists() else "is not a regular file"
            raise InputError(f"{where}: {reason}\n    fix: {fix}")
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(f"{where}: cannot read it: {exc}\n    fix: {fix}") from None
    if len(data) > MAX_BYTES:
        raise InputError(
            f"{where}: larger than {MAX_BYTES // (1024 * 1024)} MiB, not a list of hosts\n"
            f"    fix: {fix}"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{where}:{line}: not a text file (byte 0x{data[exc.start]:02x} is not UTF-8)\n"
            f"    fix: {fix}"
        ) from None
    lines = text.split("\n")  # not splitlines(): line numbers as an editor counts them
    if lines and lines[-1] == "":
        lines.pop()
    return lines
