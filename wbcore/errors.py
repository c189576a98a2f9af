"""The one error vocabulary of wbcore (from the ACT tool-provider seed).

Every expected failure is a :class:`WbError` carrying an error *kind*; surfaces map
the kind to their own form (``wbx`` exit codes, ACT ``error-kind``, MCP ``isError``).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path


class ErrorKind(str, Enum):
    NOT_FOUND = "not-found"
    INVALID_ARGS = "invalid-args"
    TIMEOUT = "timeout"
    CAPABILITY_DENIED = "capability-denied"
    INTERNAL = "internal"


#: ``wbx`` exit code per kind; a command's own exit code passes through unchanged.
EXIT_CODES: dict[ErrorKind, int] = {
    ErrorKind.NOT_FOUND: 127,
    ErrorKind.INVALID_ARGS: 2,
    ErrorKind.TIMEOUT: 124,
    ErrorKind.CAPABILITY_DENIED: 126,
    ErrorKind.INTERNAL: 70,
}


class WbError(Exception):
    """An expected failure: one clear line for a person, one kind for a program."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, *, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


class NotFound(WbError):
    kind = ErrorKind.NOT_FOUND


class InvalidArgs(WbError):
    kind = ErrorKind.INVALID_ARGS


class Timeout(WbError):
    kind = ErrorKind.TIMEOUT


class CapabilityDenied(WbError):
    kind = ErrorKind.CAPABILITY_DENIED


class Internal(WbError):
    kind = ErrorKind.INTERNAL


class ManifestError(InvalidArgs):
    """A malformed manifest: names the file, the line and the field.

    Line 0 is the whole file (unreadable, too big, refused by containment): ``file: problem``.
    """

    def __init__(self, path: Path | str, line: int, field: str, problem: str) -> None:
        self.path = Path(path)
        self.line = line
        self.field = field
        self.problem = problem
        super().__init__(f"{self.path}:{line}: {field}: {problem}" if line else f"{self.path}: {problem}")


class PluginError(Internal):
    """A plugin could not serve what was selected (load failure, duplicate name)."""


def unknown_name(what: str, name: str, known: list[str] | tuple[str, ...]) -> str:
    """The message for an unknown name, listing the valid ones (STYLE.md 6)."""
    listed = ", ".join(sorted(known)) or "(none installed)"
    return f"unknown {what} {name!r}; known: {listed}"
