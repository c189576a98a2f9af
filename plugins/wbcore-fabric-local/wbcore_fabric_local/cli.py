"""``wbx fan`` (JSON lines in, JSON lines out, in input order) and ``wbx pipeline run``."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from wbcore_runtime.contract.calls import CallResult
from wbcore_runtime.contract.errors import InvalidArgs

if TYPE_CHECKING:
    from wbcore_runtime.dispatch.fabric import Result

#: One input line may hold at most this many bytes (a command's stdin travels inside it).
MAX_LINE = 64 << 20
PROGRESS_S = 0.25


def read_lines(stream: Any) -> Iterator[Any]:
    """Each JSON line of ``stream`` as an object, lazily; a bad line is its own ``InvalidArgs``
    (the batch goes on). Blank lines are skipped, never counted."""
    n = 0
    while True:
        line = stream.readline(MAX_LINE + 1)
        if not line:
            return
        n += 1
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # drop the rest of the long line, bounded per read
                line = stream.readline(MAX_LINE + 1)
            yield InvalidArgs(f"input line {n}: longer than {MAX_LINE} bytes")
            continue
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError as exc:
            yield InvalidArgs(f"input line {n}: not JSON ({exc})")


def as_json(result: Result, kind: str) -> dict[str, Any]:
    """One result as the JSON line ``wbx fan`` prints (text when it decodes, else base64)."""
    if result.error is not None:
        return {"i": result.index,
                "error": {"kind": result.error.kind.value, "message": result.error.message}}
    value = result.value
    if isinstance(value, CallResult):
        out: dict[str, Any] = {"i": result.index, "exit": value.exit_code}
        out.update(_text("stdout", value.stdout))
        if value.stderr:
            out.update(_text("stderr", value.stderr))
        return out
    assert isinstance(value, bytes)
    return {"i": result.index, **_text("output", value)}


def _text(key: str, data: bytes) -> dict[str, str]:
    try:
        return {key: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {key + "_base64": base64.b64encode(data).decode()}


class Progress:
    """A one-line counter on stderr, only when stderr is a terminal."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.on = bool(getattr(stream, "isatty", lambda: False)())
        self.t0 = self.last = time.monotonic()
        self.done = self.failed = 0

    def step(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        now = time.monotonic()
        if self.on and now - self.last >= PROGRESS_S:
            self.last = now
            self._show(now)

    def _show(self, now: float) -> None:
        rate = self.done / max(now - self.t0, 1e-9)
        self.stream.write(f"\rwbx fan: {self.done} done · {self.failed} failed · {rate:,.0f}/s ")
        self.stream.flush()

    def end(self) -> None:
        if self.on:
            self._show(time.monotonic())
            self.stream.write("\n")


def fan(runtime: Any) -> Any:
    def fan_cmd(
        name: str = typer.Argument(..., help="A registered command (or kernel, with --kernel)."),
        width: int = typer.Option(None, "--width", "-w", help="Parallel workers (default: the CPU count)."),
        tier: str = typer.Option(None, "--tier", help="Isolation tier (never weaker than trust needs)."),
        kernel: bool = typer.Option(False, "--kernel", help="NAME is a kernel: inputs are {\"input\": …}."),
        engine: str = typer.Option("local", "--engine",
                                   help="Fabric engine: local (processes), threads, or ray."),
        address: str = typer.Option(None, "--address",
                                    help="The cluster of a distributed engine (ray: its address, "
                                    "as WB_RAY_ADDRESS; default: $WB_RAY_ADDRESS, $RAY_ADDRESS, else a local "
                                    "Ray)."),
        deadline: float = typer.Option(None, "--deadline", help="Seconds for the whole batch."),
        batch: int = typer.Option(None, "--batch", help="Inputs per worker message (default: adaptive)."),
    ) -> None:
        """Run NAME once per JSON line on stdin; print one JSON line per input, in input order.

        Command inputs: {"argv": [...], "stdin": "..."}; kernel inputs: {"input": "..."} or
        {"input_base64": "..."}. Output: {"i": n, "exit": …, "stdout": …} or
        {"i": n, "error": {"kind": …, "message": …}}. Exit 1 when any input failed.
        """
        from wbcore_runtime.dispatch import fabric

        kind = "kernel" if kernel else "command"
        if address:
            import os

            os.environ["WB_RAY_ADDRESS"] = address  # read by the ray engine when it joins (wbcore-ray)
        results = fabric.map(runtime, name, read_lines(sys.stdin.buffer), kind=kind, width=width, tier=tier,
                             engine=engine, deadline=deadline, batch=batch)
        progress = Progress(sys.stderr)
        out = sys.stdout
        try:
            for r in results:
                out.write(json.dumps(as_json(r, kind), ensure_ascii=False) + "\n")
                progress.step(not r.ok)
        finally:
            progress.end()
            out.flush()
        if progress.failed:
            print(f"wbx fan: {progress.failed} of {progress.done} inputs failed", file=sys.stderr)
            raise typer.Exit(1)

    return fan_cmd


def pipeline(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("run")
    def run(
        file: Path = typer.Argument(..., help="An Org file with a heading tagged :pipeline:."),
        input_: Path = typer.Option(None, "--input", "-i", help="The first stage's input (default: stdin)."),
        name: str = typer.Option(None, "--name", help="Which :pipeline: heading, when the file has several."),
        timeout: float = typer.Option(None, "--timeout", help="Seconds for the whole run."),
        json_: bool = typer.Option(False, "--json",
                                   help="Print the PipelineResult as JSON instead of the output."),
    ) -> None:
        """Run a pipeline: the final output on stdout, per-stage timings on stderr."""
        from wbcore_fabric_local import pipeline as pl

        p = pl.load(file, name)
        if input_ is not None:
            try:
                data = input_.read_bytes()
            except OSError as exc:
                raise InvalidArgs(f"--input {input_}: {exc.strerror or exc}") from None
        else:
            data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
        res = p.run(runtime, data, timeout=timeout)
        if json_:
            typer.echo(json.dumps(res.as_dict(), indent=2))
        else:
            sys.stdout.buffer.write(res.output) if hasattr(sys.stdout, "buffer") else sys.stdout.write(
                res.output.decode("utf-8", errors="replace"))
            sys.stdout.flush()
        for s in res.stages:
            boxes = ", ".join(f"{b.box} {b.wall_s * 1000:.1f} ms" for b in s.boxes)
            print(f"stage {s.index} {s.op}: {s.wall_s * 1000:.1f} ms ({boxes})", file=sys.stderr)
        print(f"pipeline {res.name}: {'ok' if res.success else 'failed'} in {res.wall_s * 1000:.1f} ms; "
              f"kept in {res.folder}", file=sys.stderr)
        if not res.success:
            print(f"wbx pipeline: {res.error}", file=sys.stderr)
            raise typer.Exit(1)

    return app

