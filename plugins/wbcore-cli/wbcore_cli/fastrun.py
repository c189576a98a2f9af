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
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import InvalidArgs, WbError

if TYPE_CHECKING:
    from wbcore_cli import runcache
    from wbcore_runtime.dispatch import dispatcher as dispatch
else:  # imported on first use: a first run only (a kept resolution skips them)
    runcache = lazy.Module("wbcore_cli.runcache")
    dispatch = lazy.module("wbcore_runtime.dispatch.dispatcher")

MAX_STDIN = 64 << 20


class RunArgs:
    """A plain ``wbx run``: NAME, the guest's arguments, ``--timeout``, ``--tier`` and the
    ``--mount`` specs (``HOST[:GUEST][:ro|rw]``, checked when the call is resolved).
    (A plain class: a NamedTuple's class creation is a measurable part of the start-up.)"""

    __slots__ = ("args", "as_json", "mounts", "name", "tier", "timeout", "verbose")

    def __init__(self, name: str, args: tuple[str, ...], timeout: float | None = None,
                 tier: str | None = None, verbose: bool = False, as_json: bool = False,
                 mounts: tuple[str, ...] = ()) -> None:
        self.name, self.args, self.timeout, self.tier, self.verbose = name, args, timeout, tier, verbose
        self.as_json, self.mounts = as_json, mounts

    def __eq__(self, other: object) -> bool:  # (and so unhashable, as __hash__ is not defined)
        return isinstance(other, RunArgs) and all(getattr(self, k) == getattr(other, k)
                                                  for k in self.__slots__)

    def __repr__(self) -> str:
        return "RunArgs(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


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
        if word == "--json" and word not in opts:
            opts[word] = ""
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
    return RunArgs(argv[i], tuple(argv[i + 1:]), timeout, opts.get("--tier"), "-v" in opts, "--json" in opts,
                   tuple(mounts))


def read_stdin(cap: int = MAX_STDIN) -> bytes:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None or sys.stdin.isatty():
        return b""
    data = stream.read(cap + 1)
    if len(data) > cap:
        raise InvalidArgs(f"stdin is over the {cap}-byte cap")
    return data


#: ``--mount``'s help, the same on every command that runs something in a sandbox tier.
MOUNT_HELP = ("A host folder HOST[:GUEST][:ro|rw] the program sees (read-only unless :rw, which needs the "
              "toolkit's mount-rw cap; GUEST defaults to the host path); tiers container and microvm; "
              "repeatable.")

#: wbx's own ``run`` options: written after NAME they are the program's, and a note says so.
OWN_OPTIONS = ("--timeout", "--tier", "--json", "--mount")


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
    """Run the registered command: stdin → stdout/stderr; returns its exit code. With
    ``--json``, one JSON object on stdout instead (see :func:`_run_json`)."""
    if req.as_json:
        return _run_json(runtime, req)
    result = _call(runtime, req)
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


def _text_or_base64(key: str, data: bytes) -> dict[str, str]:
    try:
        return {key: data.decode("utf-8")}
    except UnicodeDecodeError:
        import base64  # only for output that is not text

        return {f"{key}_base64": base64.b64encode(data).decode("ascii")}


def _run_json(runtime: Any, req: RunArgs) -> int:
    """``wbx run --json``: ``{"name", "exit_code", "stdout"|"stdout_base64", "stderr"|…, "usage"}``
    (usage: wall time, peak memory, bytes out, fuel, tier, isolation), or
    ``{"name", "exit_code", "error": {"kind", "message"}}`` when the call could not run; the
    process exits with the same code either way."""
    import json  # only for --json: the plain path stays light

    try:
        result = _call(runtime, req)
    except WbError as exc:
        out: dict[str, Any] = {"name": req.name, "exit_code": exc.exit_code,
                               "error": {"kind": exc.name, "message": exc.message}}
    else:
        out = {"name": req.name, "exit_code": int(result.exit_code),
               **_text_or_base64("stdout", result.stdout),
               **_text_or_base64("stderr", result.stderr), "usage": result.usage.as_dict()}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return int(out["exit_code"])


def _call(runtime: Any, req: RunArgs) -> Any:
    args, note = guest_args(req.args)
    if note:
        print(note, file=sys.stderr, flush=True)

    # once: the call never resolves again
    resolved = runcache.resolved(runtime, "command", req.name, req.tier)
    return dispatch.call_resolved(runtime, resolved, args, read_stdin(), timeout=req.timeout,
                                  mounts=req.mounts)
