"""The build-sandbox contract: what a lane hands the sandbox, and what it gets back.

A lane that runs a native compiler never imports the plugin that sandboxes it: it asks
its runtime (``runtime.build_sandbox()``), which returns the driver a plugin serves
through ``wbcore_build_sandboxes`` (``wbcore-process``: namespaces, seccomp, rlimits). The
lane speaks only the types below::

    box = runtime.build_sandbox()        # NotFound naming what to install when none is served
    res = box.run(["/zig/zig", "cc", "-o", "/out/a.wasm", "/src/a.c"],
                  binds=[Bind(zig_dir, "/zig"), Bind(src, "/src")],   # read-only by default
                  out_dir=out, limits=SandboxLimits(wall_seconds=60))
    res.check("zig cc")                  # a WbError carrying the compiler's own message

Whether a sandbox is served and works here is decided once, by :func:`availability`;
a ``BuildLane`` with ``needs_build_sandbox`` adds it to its own availability.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.errors import InvalidArgs, Timeout, WbError
from wbcore_runtime.contract.host import Choice, RuntimeServices

#: What to say when no plugin serves a build sandbox.
NONE_INSTALLED = "no build sandbox is installed; pip install wbcore-process"
#: Picks one of several installed sandboxes by name.
ENV_CHOICE = "WB_BUILD_SANDBOX"


@dataclass(frozen=True, slots=True)
class Bind:
    """Host ``src`` seen at ``dst`` inside the sandbox (read-only unless ``writable``).

    A writable bind is for trusted state only (a compiler cache being warmed by a
    first-party build); untrusted output goes to ``/out``. An ``overlay`` bind lets an
    untrusted build use (and seem to update) a cache without changing it on the host.
    """

    src: Path
    dst: str
    writable: bool = False
    overlay: bool = False  # writable inside, but writes land in a private tmpfs and vanish


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Every bound of one sandboxed run. Sizes in bytes, times in seconds."""

    wall_seconds: float = 120.0
    cpu_seconds: int = 120
    address_space: int = 8 << 30
    file_size: int = 256 << 20
    open_files: int = 512
    processes: int = 64
    tmp_bytes: int = 512 << 20
    out_bytes: int = 256 << 20
    out_files: int = 10_000
    output_bytes: int = 1 << 20  # per captured stream (stdout, stderr)

    def as_dict(self) -> dict[str, int | float]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """How one sandboxed run ended; ``/out``'s files are in the run's ``out_dir``."""

    argv: tuple[str, ...]
    returncode: int  # the program's exit code; negative = killed by that signal
    stdout: bytes
    stderr: bytes
    duration: float
    features: tuple[str, ...]
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    limit: str | None = None  # which limit ended the run, when one did
    out_files: int = 0
    out_bytes: int = 0
    skipped: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.limit is None

    @property
    def log(self) -> str:
        text = self.stderr.decode("utf-8", "replace")
        out = self.stdout.decode("utf-8", "replace")
        return (out + ("\n" if out and text else "") + text).strip()

    def check(self, what: str = "sandboxed program") -> SandboxResult:
        """This result, or a WbError naming the limit hit or carrying the program's stderr."""
        if self.timed_out:
            raise Timeout(f"{what} passed its {self.limit or 'wall-clock'} limit and was killed\n"
                          f"{self.log}".rstrip())
        if self.limit:
            raise InvalidArgs(f"{what} ended at its {self.limit} limit\n{self.log}".rstrip())
        if self.returncode != 0:
            raise InvalidArgs(f"{what} failed (exit {self.returncode})\n{self.log}".rstrip())
        return self


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """One run as a driver's ``execute`` receives it: ``run``'s arguments, defaulted here once
    (no limits given is :class:`SandboxLimits`' defaults, ``/out`` the working folder)."""

    argv: tuple[str, ...]
    out_dir: Path
    binds: tuple[Bind, ...] = ()
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = "/out"
    stdin: bytes | None = None
    seed_out: Path | None = None


class BuildSandboxDriver(ABC):
    """What ``BuildSandbox.factory(runtime)`` returns: runs one native program with
    nothing of the host but its binds, no network, bounded by ``limits``.

    ``run`` is the one signature (and the one set of defaults) every driver serves; a
    driver implements ``execute`` with the :class:`SandboxRun` it builds."""

    def run(
        self,
        argv: Sequence[str],
        *,
        binds: Sequence[Bind] = (),
        out_dir: Path,
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "/out",
        stdin: bytes | None = None,
        seed_out: Path | None = None,
    ) -> SandboxResult:
        """Run ``argv`` (an absolute path inside) and copy ``/out`` to ``out_dir``;
        ``seed_out``: a host folder whose files start in ``/out``."""
        return self.execute(SandboxRun(tuple(argv), Path(out_dir), tuple(binds), limits or SandboxLimits(),
                                       dict(env or {}), cwd, stdin, seed_out))

    @abstractmethod
    def execute(self, job: SandboxRun) -> SandboxResult:
        """Run ``job`` (what ``run`` was asked, defaulted)."""

    @abstractmethod
    def probe(self) -> Availability:
        """Whether the sandbox works on this machine, and if not, the missing feature."""

    @abstractmethod
    def system_binds(self) -> list[Bind]:
        """Read-only binds of the host's program folders (``/usr``, ``/lib``...), never ``/etc``."""

    @abstractmethod
    def own_for_sandbox(self, root: Path) -> None:
        """Hand a trusted tree (a warmed cache) to the sandbox's user, so that an
        ``overlay`` bind of it is writable inside."""


#: ``select(runtime, name)``: the build sandbox to use, its record (a ``contract.records.BuildSandbox``,
#: named in words: the records sit above this contract; ``contract.host.Choice``).
select = Choice(lambda r: r.build_sandboxes, ENV_CHOICE, ("build sandbox", "build sandboxes"),
                NONE_INSTALLED).record


def availability(runtime: RuntimeServices, name: str | None = None) -> Availability:
    """Whether ``runtime`` can sandbox a build here: a sandbox is served and works."""
    try:
        record = select(runtime, name)
    except WbError as exc:
        return Availability.no(exc.message)
    found = record.available()
    if not found.ok:
        return Availability.no(f"the build sandbox {record.name} is unavailable here: {found.reason}")
    return Availability.yes(f"sandbox {record.name}" + (f": {found.reason}" if found.reason else ""))


def warm_command(label: str, warm: Callable[[RuntimeServices, BuildSandboxDriver], tuple[Path, float]], *,
                 open_runtime: Callable[[], RuntimeServices]) -> int:
    """The body of a lane's ``python -m <lane> warm``: ``warm(runtime, box)`` fills a compiler
    cache in the build sandbox of the installed plugins and returns (where, seconds spent,
    0 when it was warm already); prints that, or the error, and returns the exit code.
    ``open_runtime`` is ``Runtime.open`` (passed in: the contract does not import the facade)."""
    import sys

    try:
        runtime = open_runtime()  # the installed plugins: the build sandbox comes from one of them
        target, spent = warm(runtime, runtime.build_sandbox())
    except WbError as exc:
        print(exc.message, file=sys.stderr)
        return exc.exit_code
    print(f"{label} {target}: " + (f"warmed in {spent:.1f}s" if spent else "already warm"))
    return 0
