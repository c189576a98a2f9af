"""``wbx identity``: the tenant's signing identity (did:key) and its did:web document."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json
from wbcore_runtime.trust import did, identity

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices


def build(runtime: RuntimeServices) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("show")
    def show(
        tenant: str = typer.Option("default", "--tenant", help="Which tenant's key."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Show the signing identity (created on first use under $WB_HOME/identity)."""
        ident = identity.load(runtime.home, runtime.env, tenant=tenant)
        mb = identity.multibase_key(ident.public_key)
        if json_:
            emit_json({"did": ident.did, "publicKeyMultibase": mb, "public_key_hex": ident.public_key.hex(),
                       "source": ident.source, "tenant": tenant})
            return
        typer.echo(ident.did)
        typer.echo(f"  public key: {ident.public_key.hex()}")
        typer.echo(f"  key from:   {ident.source}")

    @app.command("did-web")
    def did_web(
        host: str = typer.Argument(..., metavar="HOST",
                                   help="Host (optionally :port and /path) that will serve the document."),
        out: Optional[Path] = typer.Option(None, "-o", "--out",
                                           help="Where to write did.json (default: under "
                                                "$WB_HOME/identity/did-web/)."),
        tenant: str = typer.Option("default", "--tenant", help="Which tenant's key."),
    ) -> None:
        """Write the did:web document (did.json) for the same key as the did:key."""
        ident = identity.load(runtime.home, runtime.env, tenant=tenant)
        web = did.did_for_host(host)
        target = (out or runtime.home / "identity" / "did-web"
                  / web.removeprefix("did:web:").replace(":", "/") / "did.json")
        if target.is_dir():
            target = target / "did.json"
        did.write_document(ident, host, target)
        typer.echo(web)
        typer.echo(f"  wrote {target}")
        typer.echo(f"  serve it at {did.url_for(web)}")
        typer.echo(f"  same key as {ident.did}")

    return app
