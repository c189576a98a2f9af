"""``wbx kernel run <name> [--stream]``, ``wbx kernel list`` and ``wbx commands`` (list, remove).

``kernel run``: one input (all of stdin) → one output; with ``--stream``, many inputs as
length-prefixed frames (u32 little-endian length, then the bytes) on stdin, each answered
by one frame on stdout, in order. ``commands``: what the registry holds, its owners and state.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

import typer

from wbcore_cli.fastrun import read_stdin
from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json
from wbcore_runtime.contract.calls import CallRecord, Principal
from wbcore_runtime.contract.errors import InvalidArgs, WbError
from wbcore_runtime.dispatch import resolve as resolution
from wbcore_runtime.dispatch.audit import AuditLog, digest

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices

MAX_FRAME = 64 << 20
_U32 = struct.Struct("<I")


def frames(stream: BinaryIO, chunk: int = 1 << 20) -> Iterator[bytes]:
    """Yield the payloads of u32-LE length-prefixed frames until a clean EOF.

    Reads in 1 MiB chunks and slices frames out of a buffer (a read per frame costs more
    than a small kernel call)."""
    buf = bytearray()
    pos = 0
    eof = False
    unpack = _U32.unpack_from

    def fill(want: int, size: int) -> None:
        """Read until ``want`` bytes are buffered past ``pos`` or the stream ends."""
        nonlocal buf, pos, eof
        while len(buf) - pos < want and not eof:
            data = stream.read(size)
            if not data:
                eof = True
                break
            del buf[:pos]
            pos = 0
            buf += data

    while True:
        fill(4, chunk)
        if len(buf) - pos < 4:
            if len(buf) - pos:
                raise InvalidArgs("truncated frame header on stdin (want 4 bytes: u32 little-endian length)")
            return
        (n,) = unpack(buf, pos)
        if n > MAX_FRAME:
            raise InvalidArgs(f"frame of {n} bytes is over the {MAX_FRAME}-byte cap")
        fill(4 + n, max(chunk, n))
        if len(buf) - pos - 4 < n:
            raise InvalidArgs(f"truncated frame on stdin: {len(buf) - pos - 4} of {n} bytes")
        yield bytes(buf[pos + 4:pos + 4 + n])
        pos += 4 + n


def build_kernel(runtime: RuntimeServices) -> typer.Typer:
    """The ``wbx kernel`` group."""
    kernel_app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @kernel_app.command("run")
    def kernel_run(
        name: str = typer.Argument(..., metavar="NAME"),
        stream: bool = typer.Option(False, "--stream", help="Frames in, frames out: u32 LE length + bytes."),
        timeout: float | None = typer.Option(None, "--timeout", help="Seconds per call."),
        tier: str | None = typer.Option(None, "--tier", help="Isolation tier (default: from #+TRUST)."),
    ) -> None:
        """Call a registered kernel: one input from stdin, or a stream of frames."""
        runtime.resolve("kernel", name, tier=tier)
        out = sys.stdout.buffer
        sys.stdout.flush()
        if not stream and tier is None:
            out.write(runtime.kernel_call(name, read_stdin(), timeout=timeout))
            out.flush()
            return
        if not stream:
            with runtime.kernel(name, timeout=timeout, tier=tier) as inst:
                out.write(inst.call(read_stdin()))
            out.flush()
            return
        with runtime.kernel(name, timeout=timeout, tier=tier) as inst:
            record = CallRecord(name=name, shape="kernel",
                                principal=Principal(toolkit=inst.req.toolkit or ""),
                                argv=("--stream",), toolkit=inst.req.toolkit)
            runtime.hook.wbcore_call_started(call=record)
            n = 0
            pending = bytearray()
            pack = _U32.pack
            try:
                for payload in frames(sys.stdin.buffer):
                    body = inst.call(payload)
                    pending += pack(len(body))
                    pending += body
                    n += 1
                    if len(pending) >= 1 << 20:
                        out.write(pending)
                        pending.clear()
            except WbError as exc:
                runtime.hook.wbcore_call_finished(call=record, result=exc)
                raise
            finally:  # the answers to every frame before a failure still go out
                out.write(pending)
                out.flush()
            runtime.hook.wbcore_call_finished(call=record, result={"frames": n})

    @kernel_app.command("list")
    def kernel_list() -> None:
        """List registered kernels."""
        for entry in runtime.registry.entries("kernel"):
            typer.echo(f"{entry.name:20} {entry.sha256[:12]}…  toolkit {entry.toolkit or '-'}")

    return kernel_app


def build_commands(runtime: RuntimeServices) -> typer.Typer:
    """The ``wbx commands`` group."""
    commands_app = typer.Typer(no_args_is_help=False, add_completion=False, rich_markup_mode=None,
                               invoke_without_command=True)

    @commands_app.callback()
    def commands_list(ctx: typer.Context,
                      json_: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """List registered commands, kernels and components, with their owner and state."""
        if ctx.invoked_subcommand is not None:
            return
        rows = []
        for entry in runtime.registry.entries():
            if entry.builtin:
                state = "built-in"
            elif resolution.orphaned(runtime, entry):
                state = "orphaned: its toolkit is no longer on the search path"
            else:
                why = resolution.availability(runtime, entry)
                state = "ok" if why is None else f"unavailable: {why}"
            rows.append({"kind": entry.kind, "name": entry.name, "toolkit": entry.toolkit,
                         "sha256": entry.sha256, "state": state})
        if json_:
            emit_json(rows)
            return
        for row in rows:
            typer.echo(f"{row['kind']:9} {row['name']:20} {row['toolkit'] or '-':20} {row['state']}")

    @commands_app.command("remove")
    def commands_remove(name: str = typer.Argument(..., metavar="NAME"),
                        kind: str = typer.Option("command", "--kind",
                                                 help="command, kernel or component")) -> None:
        """Unregister a command (e.g. an orphaned one); built-ins cannot be removed."""
        entry = runtime.registry.get(kind, name)
        runtime.registry.unregister(kind, name)
        AuditLog.for_home(runtime.home, runtime.env).record(
            principal="deployer", cap="registry", op="remove-command",
            args_digest=digest(f"{kind} {name}".encode()),
            outcome="allowed", target=f"{kind} {name} (toolkit {entry.toolkit or '-'})")
        typer.echo(f"removed {kind} {name}")

    return commands_app
