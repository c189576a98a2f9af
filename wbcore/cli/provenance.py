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

    @app.command("install")
    def install(
        source: Optional[str] = typer.Argument(None, metavar="SOURCE", help="Folder, git+file://…, git+https://…@<commit>, or archive (URL needs --sha256)."),
        sha256: Optional[str] = typer.Option(None, "--sha256", help="The archive's sha256 (required for archive URLs)."),
        force: bool = typer.Option(False, "--force", help="Replace toolkits already installed under these ids."),
        locked: bool = typer.Option(False, "--locked", help="Reproduce exactly the set in the lockfile; fail on any drift."),
        lockfile: Optional[Path] = typer.Option(None, "--lockfile", help="With --locked: the lockfile to reproduce (default: $WB_HOME/wbx.lock)."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Install toolkits into the user root ($WB_HOME/toolkits), verified, recorded in wbx.lock."""
        from wbcore import install as _install

        if locked:
            if source is not None:
                raise InvalidArgs("--locked takes no SOURCE (it installs what the lockfile records)")
            done = _install.install_locked(runtime.home, lockfile, env=runtime.env)
        else:
            if source is None:
                raise InvalidArgs("give a SOURCE, or --locked")
            if lockfile is not None:
                raise InvalidArgs("--lockfile goes with --locked")
            done = _install.install(runtime.home, source, sha256=sha256, force=force, env=runtime.env)
        runtime.discover(refresh=True)
        if json_:
            emit_json([{**d.entry.as_dict(), "path": str(d.path), "caps": list(d.caps), "unchanged": d.unchanged} for d in done])
            return
        for d in done:
            e = d.entry
            state = "unchanged" if d.unchanged else "installed"
            who = f"third-party, signed by {e.signer}" if e.trust == "third-party" else "first-party"
            typer.echo(f"{state} {e.id} {e.version} ({who}) → {d.path}")
            typer.echo(f"  digest {e.digest}  source {e.source}")
            if d.caps and e.trust == "third-party":
                typer.echo(f"  requests caps: {' '.join(d.caps)} (none granted; grant with: wbx toolkit grant {e.id} {' '.join(d.caps)})")
            elif d.caps:
                typer.echo(f"  caps: {' '.join(d.caps)} (first-party: granted by its profile, no consent step)")
        if not done:
            warn("nothing to install")
