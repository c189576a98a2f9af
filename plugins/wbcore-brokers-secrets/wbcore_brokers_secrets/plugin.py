"""Entry point of wbcore-brokers-secrets: the ``secrets`` broker and ``wbx secrets``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Broker


def _store(runtime: Any) -> Any:
    from wbcore_brokers_secrets.store import SecretStore

    return SecretStore(runtime.home / "brokers" / "secrets.db")


def _broker(runtime: Any) -> Any:
    from wbcore_brokers_secrets.store import SecretBroker

    return SecretBroker(_store(runtime))


@hookimpl
def wbcore_brokers() -> Iterator[Broker]:
    yield Broker(name="secrets", summary="sign-with-secret (HMAC-SHA256, Ed25519); no read operation exists",
                 factory=_broker, operations=("sign", "public_key", "names"))


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    import typer

    app = typer.Typer(no_args_is_help=True,
                      help="Deployer-held secrets that guests can sign with (never read).")

    def _rt() -> Any:
        from wbcore_runtime.runtime import Runtime

        return Runtime.open(plugins=[])

    @app.command("set")
    def set_(
        name: str,
        tenant: str = typer.Option("default", "--tenant"),
        alg: str = typer.Option("hmac-sha256", "--alg", help="hmac-sha256 or ed25519"),
        generate: bool = typer.Option(False, "--generate",
                                      help="Generate a random key instead of reading stdin."),
    ) -> None:
        """Store a secret for TENANT; the key is read from stdin (raw bytes) unless --generate."""
        import os

        key = os.urandom(32) if generate else sys.stdin.buffer.read(4097)
        _store(_rt()).put(tenant, name, key, alg)
        typer.echo(f"secret {name!r} stored for tenant {tenant!r} ({alg})")

    @app.command("list")
    def list_(tenant: str = typer.Option("default", "--tenant")) -> None:
        """List secret names (never values)."""
        for n, a in _store(_rt()).names(tenant):
            typer.echo(f"{n}  {a}")

    add("secrets", app, help="Manage the secrets guests may sign with.")
