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


#: Finer kinds ``wbx`` tells apart, each with its own name and exit code (sysexits.h
#: numbers); surfaces bound to the five-word ACT vocabulary (ACT, MCP, the Dock's guest
#: ABI) see the base kind. Name → (base kind, exit code).
SUBKINDS: dict[str, tuple[ErrorKind, int]] = {
    "dns": (ErrorKind.NOT_FOUND, 68),  # EX_NOHOST: a host name that does not resolve
    "unreachable": (ErrorKind.INTERNAL, 69),  # EX_UNAVAILABLE: no connection to a resolved host
    "disk-full": (ErrorKind.INTERNAL, 74),  # EX_IOERR: ENOSPC / EDQUOT while writing
    "tls": (ErrorKind.INTERNAL, 76),  # EX_PROTOCOL: the peer's certificate or handshake failed
}


class WbError(Exception):
    """An expected failure: one clear line for a person, one kind for a program."""

    kind: ErrorKind = ErrorKind.INTERNAL
    #: A finer kind from :data:`SUBKINDS` (its name and exit code win in ``wbx``).
    subkind: str | None = None

    def __init__(self, message: str, *, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    @property
    def name(self) -> str:
        """The kind as ``wbx`` prints it: the finer kind when there is one."""
        return self.subkind or self.kind.value

    @property
    def exit_code(self) -> int:
        return SUBKINDS[self.subkind][1] if self.subkind else EXIT_CODES[self.kind]


class NotFound(WbError):
    kind = ErrorKind.NOT_FOUND


class InvalidArgs(WbError):
    kind = ErrorKind.INVALID_ARGS


class Timeout(WbError):
    kind = ErrorKind.TIMEOUT


class CapabilityDenied(WbError):
    kind = ErrorKind.CAPABILITY_DENIED


class Unavailable(CapabilityDenied):
    """The registered artifact may not run now; the message says why and how to fix it."""


class Internal(WbError):
    kind = ErrorKind.INTERNAL


_BY_KIND: dict[str, type[WbError]] = {cls.kind.value: cls
                                      for cls in (NotFound, InvalidArgs, Timeout, CapabilityDenied, Internal)}


def of_kind(kind: str, message: str) -> WbError:
    """The error of kind ``kind`` (an ``ErrorKind`` value, as it crossed a process or machine
    boundary) with ``message``; an unknown kind is ``Internal``."""
    return _BY_KIND.get(kind, Internal)(message)


class DnsError(NotFound):
    """A host name did not resolve (not the same as a missing file or a 404)."""

    subkind = "dns"


class Unreachable(Internal):
    """A resolved host refused or dropped the connection."""

    subkind = "unreachable"


class TlsError(Internal):
    """TLS failed: the certificate did not verify against the trust store, or the handshake broke."""

    subkind = "tls"


class DiskFull(Internal):
    """The disk (or quota) holding ``$WB_HOME`` or a temp folder is full."""

    subkind = "disk-full"


def disk_full(exc: OSError, where: object) -> DiskFull | None:
    """A :class:`DiskFull` saying what to do, when ``exc`` is ENOSPC or EDQUOT (else None)."""
    import errno

    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return DiskFull(f"no space left on the disk holding {where} ({exc.strerror}); free some space "
                    "(wbx clears its own leftovers on the next command) and try again")


#: SQLite's "database or disk is full" (SQLITE_FULL) as ``sqlite3`` reports it.
_SQLITE_FULL = 13


def disk_full_of(exc: BaseException, where: object) -> DiskFull | None:
    """:func:`disk_full` for any write failure a broker may raise: an ``OSError`` with
    ENOSPC/EDQUOT, or SQLite's SQLITE_FULL (``sqlite3`` gives no errno for it)."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:  # a failure while cleaning up may hide the full disk behind it
        if isinstance(cur, OSError):
            got = disk_full(cur, where)
            if got is not None:
                return got
        code = getattr(cur, "sqlite_errorcode", None)
        if code is not None and code & 0xFF == _SQLITE_FULL or "database or disk is full" in str(cur):
            return DiskFull(f"no space left on the disk holding {where} (the database is full); "
                            "free some space and try again")
        cur, seen = cur.__cause__ or cur.__context__, seen + 1
    return None


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
