"""``wbx llm serve-local``: start the local model server and print the settings the agent loop reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PID_ENV = "WB_LLM_LOCAL_PID"  # the detached server's pid, in the eval-able output


def build() -> Any:
    import typer

    app = typer.Typer(no_args_is_help=True,
                      help="A local model for the agent loop (llama.cpp, SmolLM2-135M-Instruct).")

    @app.command("serve-local")
    def serve_local(
        detach: bool = typer.Option(False, "--detach",
                                    help="Leave the server running and return (eval-able output)."),
        port: int = typer.Option(0, "--port", help="Loopback port (default: a free one)."),
        threads: int = typer.Option(0, "--threads", help="CPU threads for the model (default: up to 4)."),
        log: Path = typer.Option(None, "--log", help="Server log file (default: a temporary file)."),
        timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for the server to answer."),
    ) -> None:
        """Serve SmolLM2-135M-Instruct on 127.0.0.1 (OpenAI-compatible, tool calls), wait until it
        answers, print `export WB_LLM_...` lines; serve until Ctrl-C (or return at once with --detach)."""
        import sys

        from wbcore_llm_local.server import LocalServer, exports

        if not 0 <= port < 65536 or not 0 <= threads <= 256 or not 0 < timeout <= 3600:
            raise typer.BadParameter("--port 0..65535, --threads 0..256, --timeout in (0, 3600]")
        srv = LocalServer(port=port or None, threads=threads or None, log=log).start(timeout)
        typer.echo(exports(srv.settings()))
        if detach:
            pid = srv.detach()
            # exported too, so a script can stop it (trap 'kill "$WB_LLM_LOCAL_PID"' EXIT)
            typer.echo(f"export {PID_ENV}={pid}")
            typer.echo(f"# the server runs as pid {pid} (log: {srv.log_path}); stop it with: kill {pid}")
            return
        typer.echo(f"# serving on {srv.base_url} (log: {srv.log_path}); Ctrl-C stops it", err=False)
        sys.stdout.flush()
        try:
            assert srv.proc is not None
            code = srv.proc.wait()
            typer.echo(f"the local model server exited with code {code}; log: {srv.log_path}", err=True)
            raise typer.Exit(70)
        except KeyboardInterrupt:
            pass
        finally:
            srv.stop()

    return app
