"""``wbx snapshot save|restore|list|delete``: named snapshots of prepared micro-VMs
(:mod:`wbcore_microvm.snapshots`)."""

from __future__ import annotations

import sys
import time
from typing import Any

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json


def _age(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{int(seconds // n)}{unit}"
    return f"{int(seconds)}s"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def build(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                      help="Named snapshots of prepared micro-VMs (tier microvm).")

    def rt() -> Any:
        if runtime is not None:
            return runtime
        from wbcore_runtime.runtime import Runtime

        return Runtime.open()

    @app.command("save")
    def save_(
        name: str = typer.Argument(..., help="The snapshot's name (a-z, 0-9, '.', '_', '-')."),
        run: list[str] = typer.Option(
            [],
            "--run",
            help="A command the guest agent runs before the save (repeatable; "
            "shell words, e.g. --run 'sh -c \"echo hi > /tmp/x\"').",
        ),
        put: list[str] = typer.Option(
            [], "--put", help="HOST_FILE:/tmp/GUEST_PATH copied into the guest first (repeatable)."
        ),
        parent: str = typer.Option(
            None, "--from", help="Layer it over this named snapshot (default: the tier's own)."
        ),
        replace: bool = typer.Option(
            False, "--replace", help="Replace a snapshot of that name made with other steps."
        ),
        json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Restore the tier's snapshot (or --from one), run the steps, and save the VM as NAME."""
        from wbcore_microvm import snapshots

        steps = snapshots.parse_steps(run, put)
        say = (
            (lambda m: None) if json_out else (lambda m: print(f"snapshot: {m}", file=sys.stderr, flush=True))
        )
        saved, cached, evicted = snapshots.save(
            rt(), name, steps, parent=parent, replace=replace, progress=say
        )
        if json_out:
            emit_json({"name": saved.name, "key": saved.meta["key"], "cached": cached, "size": saved.size,
                       "parent": saved.meta.get("parent"), "save_s": saved.meta.get("save_s"),
                       "evicted": [e.name for e in evicted]})
            return
        how = (
            "already saved with these steps (same layer key)"
            if cached
            else f"saved in {saved.meta.get('total_s')} s"
        )
        typer.echo(f"snapshot {saved.name}: {how}; {_mib(saved.size)}, key {saved.meta['key'][:12]}")
        for e in evicted:
            typer.echo(f"evicted {e.name} (least recently used; the store's budget is WB_SNAPSHOT_BUDGET)")

    @app.command("restore")
    def restore_(
        name: str = typer.Argument(..., help="The snapshot."),
        argv: list[str] = typer.Argument(None, help="A command to run in the restored guest (after --)."),
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds for the restore and the command."),
        with_stdin: bool = typer.Option(
            False, "--stdin", help="Pass this command's stdin to the guest command."
        ),
        json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Restore NAME into a new micro-VM, run a command in it (if given), tear it down."""
        from wbcore_microvm import snapshots

        stdin = sys.stdin.buffer.read(snapshots.OUTPUT_CAP + 1) if with_stdin else b""
        if len(stdin) > snapshots.OUTPUT_CAP:
            from wbcore_runtime.contract.calls import LimitExceeded

            raise LimitExceeded(f"stdin over {snapshots.OUTPUT_CAP} bytes", limit="stdin")
        r = snapshots.restore(rt(), name, list(argv or []), stdin, timeout)
        if json_out:
            emit_json(
                {
                    "name": r.name, "isolation": r.accel, "restore_s": round(r.restore_s, 4), "exit": r.exit,
                    "stdout": r.stdout.decode(errors="replace"), "stderr": r.stderr.decode(errors="replace"),
                }
            )
        else:
            out = getattr(sys.stdout, "buffer", None)
            if out is not None:
                out.write(r.stdout)
            else:
                sys.stdout.write(r.stdout.decode(errors="replace"))
            sys.stdout.flush()
            sys.stderr.write(r.stderr.decode(errors="replace"))
            print(
                f"snapshot {r.name}: restored in {r.restore_s:.3f} s (isolation {r.accel})", file=sys.stderr
            )
        if r.exit:
            raise typer.Exit(r.exit if r.exit < 256 else 1)

    @app.command("list")
    def list_(json_out: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """The snapshots: size, age, last use, parent, layer key."""
        from wbcore_microvm import snapshots

        r = rt()
        saved = snapshots.list_saved(r.home)
        now = time.time()
        rows: list[dict[str, Any]] = [
            {
                "name": s.name, "size": s.size, "age_s": round(now - float(s.meta.get("created", now))),
                "last_used_s": round(now - s.last_used), "parent": s.meta.get("parent"),
                "key": s.meta.get("key"), "accel": s.meta.get("accel"),
                "steps": len(s.meta.get("steps") or []),
            }
            for s in saved
        ]
        total = sum(x["size"] for x in rows)
        limit = snapshots.budget(dict(r.env))
        if json_out:
            emit_json(
                {
                    "snapshots": rows, "total": total, "budget": limit,
                    "store": str(snapshots.store_root(r.home)),
                }
            )
            return
        if not rows:
            typer.echo(f"no snapshots in {snapshots.store_root(r.home)} (wbx snapshot save NAME --run ...)")
            return
        typer.echo(f"{'NAME':<24} {'SIZE':>10} {'AGE':>5} {'USED':>5}  {'PARENT':<16} KEY")
        for x in rows:
            typer.echo(
                f"{x['name']:<24} {_mib(x['size']):>10} {_age(x['age_s']):>5} {_age(x['last_used_s']):>5}  "
                f"{x['parent'] or '(tier)':<16} {str(x['key'])[:12]}"
            )
        typer.echo(f"total {_mib(total)} of a {_mib(limit)} budget (WB_SNAPSHOT_BUDGET)")

    @app.command("delete")
    def delete_(name: str = typer.Argument(..., help="The snapshot.")) -> None:
        """Delete NAME (its layers over it keep working: each is a whole VM state)."""
        from wbcore_microvm import snapshots

        r = rt()
        size = snapshots.get(r.home, name).size
        s = snapshots.delete(r.home, name)
        typer.echo(f"deleted snapshot {s.name} ({_mib(size)} freed)")

    return app
