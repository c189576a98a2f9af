"""``wbx run NAME [ARGS…]`` without Typer: the call path every script and agent takes.

``wbx run`` is the one command whose cost is paid per use, so its plain form (optional
``--timeout``/``--tier``/``--mount`` before NAME, then NAME and the guest's own arguments) is parsed
here and never imports Typer or builds the CLI tree. Anything else (``--help``, an option
this parser does not know, a malformed value) returns ``None`` from :func:`parse` and goes
through Typer, which prints the usual usage and errors.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from wbcore_runtime.errors import InvalidArgs

MAX_STDIN = 64 << 20


class RunArgs:
    """A plain ``wbx run``: NAME, the guest's arguments, ``--timeout``, ``--tier`` and the
    ``--mount`` specs (``HOST[:GUEST][:ro|rw]``, checked when the call is resolved).
    (A plain class: a NamedTuple's class creation is a measurable part of the start-up.)"""

    __slots__ = ("args", "mounts", "name", "tier", "timeout", "verbose")

    def __init__(self, name: str, args: tuple[str, ...], timeout: float | None = None,
                 tier: str | None = None, verbose: bool = False, mounts: tuple[str, ...] = ()) -> None:
        self.name, self.args, self.timeout, self.tier, self.verbose = name, args, timeout, tier, verbose
        self.mounts = mounts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunArgs) and (self.name, self.args, self.timeout, self.tier, self.verbose,
                                               self.mounts) == (
            other.name, other.args, other.timeout, other.tier, other.verbose, other.mounts)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"RunArgs(name={self.name!r}, args={self.args!r}, timeout={self.timeout!r}, tier={self.tier!r}, "
                f"verbose={self.verbose!r}, mounts={self.mounts!r})")


def parse(argv: Sequence[str]) -> RunArgs | None:
    """``RunArgs`` for a plain ``[--debug] run [-v] [--timeout S] [--tier T] [--mount M]… NAME [ARGS…]``.

    As Typer parses ``wbx run`` (no interspersed options): every word after NAME belongs
    to the guest, ``--help`` included."""
    i = 0
    while i < len(argv) and argv[i] == "--debug":
        i += 1
    if i >= len(argv) or argv[i] != "run":
        return None
    i += 1
    opts: dict[str, str] = {}
    mounts: list[str] = []
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        if word in ("-v", "--verbose") and "-v" not in opts:
            opts["-v"] = ""
            i += 1
            continue
        key, eq, value = word.partition("=")
        if key not in ("--timeout", "--tier", "--mount") or key in opts:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            i += 1
            value = argv[i]
        if key == "--mount":  # repeatable
            mounts.append(value)
        else:
            opts[key] = value
        i += 1
    if i >= len(argv):
        return None
    timeout: float | None = None
    if "--timeout" in opts:
        try:
            timeout = float(opts["--timeout"])
        except ValueError:
            return None
    return RunArgs(argv[i], tuple(argv[i + 1:]), timeout, opts.get("--tier"), "-v" in opts, tuple(mounts))


def read_stdin(cap: int = MAX_STDIN) -> bytes:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None or sys.stdin.isatty():
        return b""
    data = stream.read(cap + 1)
    if len(data) > cap:
        raise InvalidArgs(f"stdin is over the {cap}-byte cap")
    return data


#: ``--mount``'s help, the same on every command that runs something in a sandbox tier.
MOUNT_HELP = ("A host folder HOST[:GUEST][:ro|rw] the program sees (read-only unless :rw, which needs the toolkit's "
              "mount-rw cap; GUEST defaults to the host path); tiers container and microvm; repeatable.")

#: wbx's own ``run`` options: written after NAME they are the program's, and a note says so.
OWN_OPTIONS = ("--timeout", "--tier", "--mount")


def guest_args(args: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
    """The program's arguments and, at most once, a note for the user.

    The grammar is ``wbx run [wbx options] NAME [--] [ARGS…]``: every word after NAME is the
    program's. One ``--`` right after NAME is the separator and is dropped (so a program can
    still be given a literal ``--`` as ``NAME -- -- …``). Without it, a word spelled like one of
    wbx's own options is passed on as written, and the note says where wbx's options go."""
    if args and args[0] == "--":
        return tuple(args[1:]), None
    for word in args:
        key = word.partition("=")[0]
        if key in OWN_OPTIONS:
            return tuple(args), (f"wbx: note: {key} after the command name is passed to the program; "
                                 f"put wbx's options before the name (wbx run {key} … NAME), or write "
                                 "NAME -- ARGS to say the arguments are the program's")
    return tuple(args), None


def run(runtime: Any, req: RunArgs) -> int:
    """Run the registered command: stdin → stdout/stderr; returns its exit code."""
    from wbcore_runtime import runcache

    args, note = guest_args(req.args)
    if note:
        print(note, file=sys.stderr, flush=True)

    # A resolution kept by the last `wbx run` of this name, if nothing it was made from has
    # changed (wbcore_runtime.runcache); else the full one, kept for the next run.
    if req.tier is not None or not runcache.recall(runtime, "command", req.name):
        resolved = runtime.resolve("command", req.name, tier=req.tier)  # unknown or unavailable fails before stdin is read
        if req.tier is None:
            from wbcore_runtime import dispatch

            gen = dispatch.resolved_generation(runtime, "command", req.name)
            if gen is not None:
                runcache.remember(runtime, resolved, gen)
    result = runtime.call(req.name, list(args), read_stdin(), timeout=req.timeout, tier=req.tier,
                          mounts=req.mounts)
    for stream, data in ((sys.stdout, result.stdout), (sys.stderr, result.stderr)):
        raw = getattr(stream, "buffer", None)
        if raw is not None:
            stream.flush()
            raw.write(data)
            raw.flush()
        else:
            stream.write(data.decode("utf-8", "replace"))
    if req.verbose:
        print(f"wbx: {req.name}: {result.usage.describe()}", file=sys.stderr, flush=True)
    return int(result.exit_code)
