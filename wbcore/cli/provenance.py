"""``wbx toolkit`` provenance verbs: sign, grant, revoke, install, import, audit, export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from wbcore.cli.output import JSON_HELP, emit_json, warn
from wbcore.errors import InvalidArgs

if TYPE_CHECKING:
    from wbcore.runtime import Runtime


def register(app: typer.Typer, runtime: Runtime) -> None:
    @app.command("sign")
    def sign(
        ident: str = typer.Argument(..., metavar="ID"),
        did_web: Optional[str] = typer.Option(None, "--did-web", metavar="HOST", help="Sign as did:web:HOST (same key)."),
        tenant: str = typer.Option("default", "--tenant", help="Which tenant's key signs."),
    ) -> None:
        """Sign a third-party toolkit: #+AUTHOR_DID and #+SIGNATURE over the whole folder."""
        from wbcore import did, identity, signing

        tk = runtime.toolkit(ident)
        key = identity.load(runtime.home, runtime.env, tenant=tenant)
        author = did.did_for_host(did_web) if did_web else None
        signed = signing.sign(tk.dir, key, author_did=author)
        typer.echo(f"signed {tk.id} as {signed.author_did}")
        typer.echo(f"  content digest {signed.digest}")
        if author:
            typer.echo(f"  publish the key: wbx identity did-web {did_web}")

    @app.command("grant")
    def grant(
        ident: str = typer.Argument(..., metavar="ID"),
        caps: list[str] = typer.Argument(..., metavar="CAP..."),
    ) -> None:
        """Grant a third-party toolkit some of the caps it requests (deployer consent)."""
        from wbcore import consent, signing

        tk = runtime.toolkit(ident)
        m = tk.manifest
        if m.trust != "third-party":
            raise InvalidArgs(f"{m.id} is first-party: it runs under its profile's default caps and needs no grant")
        wanted = consent.check_caps(tk, caps)
        verdict = signing.verify(tk.dir, env=runtime.env)
        if not verdict.ok:
            raise InvalidArgs(f"refusing to grant caps to {m.id}: {verdict.message}")
        g = consent.ConsentStore(runtime.home).grant(m.id, wanted, verdict.signer)
        typer.echo(f"granted {m.id} ({verdict.signer}): {' '.join(sorted(g.caps))}")
        typer.echo(f"  effective: {' '.join(sorted(runtime.effective_caps(tk))) or 'none'}")

    @app.command("revoke")
    def revoke(
        ident: str = typer.Argument(..., metavar="ID"),
        caps: Optional[list[str]] = typer.Argument(None, metavar="[CAP...]", help="Caps to withdraw (default: all)."),
    ) -> None:
        """Withdraw granted caps (all of them when none are named)."""
        from wbcore import consent

        store = consent.ConsentStore(runtime.home)
        if store.get(ident) is None:
            raise InvalidArgs(f"{ident} has no grants to revoke")
        left = store.revoke(ident, caps or None)
        typer.echo(f"revoked {ident}: {' '.join(caps) if caps else 'all caps'}")
        typer.echo(f"  still granted: {' '.join(sorted(left.caps)) if left else 'none'}")
