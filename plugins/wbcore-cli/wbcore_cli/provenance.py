"""``wbx toolkit`` provenance verbs: sign, grant, revoke, install (import, audit and export of Agent
Skills are wbcore-agent-skills' commands)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json, warn
from wbcore_runtime.contract import distribution
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.trust import consent, did, identity, signing

if TYPE_CHECKING:
    from wbcore_runtime.contract import installs
    from wbcore_runtime.contract.host import RuntimeServices
else:  # imported on first use: keeps wbx start-up light (a command loads only what it uses);
    # only install and uninstall ask for the installer (wbcore-install's, through the runtime)
    installs = lazy.module("wbcore_runtime.contract.installs")


def register(app: typer.Typer, runtime: RuntimeServices) -> None:
    @app.command("sign")
    def sign(
        ident: str = typer.Argument(..., metavar="ID"),
        did_web: Optional[str] = typer.Option(None, "--did-web", metavar="HOST",
                                              help="Sign as did:web:HOST (same key)."),
        tenant: str = typer.Option("default", "--tenant", help="Which tenant's key signs."),
    ) -> None:
        """Sign a third-party toolkit: #+AUTHOR_DID and #+SIGNATURE over the whole folder."""
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
        caps: Optional[list[str]] = typer.Argument(None, metavar="[CAP...]"),
        env: Optional[list[str]] = typer.Option(
            None, "--env", metavar="VAR",
            help="A deployer environment variable the toolkit may read and send (e.g. its #+AUTH: bearer-env "
                 "VAR); repeat per variable."),
    ) -> None:
        """Grant caps a toolkit requests (any for third-party, whose signature must verify; build/serve for
        first-party) and, with --env, each deployer environment variable its manifest may read."""
        tk = runtime.toolkit(ident)
        m = tk.manifest
        caps = list(caps or ())  # `--env VAR` alone names no cap
        universe = runtime.caps_universe_for(caps)
        names = list(dict.fromkeys(env or ()))
        wanted, signer = consent.checked_grant(runtime, tk, caps, names)
        g = consent.ConsentStore(runtime.home).grant(m.id, wanted, signer, env=names)
        typer.echo(f"granted {m.id}" + (f" ({signer})" if signer else "")
                   + f": {' '.join(sorted(g.caps)) or 'no caps'}"
                   + (f"; env {' '.join(sorted(g.env))}" if g.env else ""))
        for cap in wanted:
            if cap in universe.plugin_caps:  # a plugin's cap: say what was just granted, and who serves it
                d = universe.plugin_caps[cap]
                typer.echo(f"  {cap}: {d.meaning} (declared by {d.origin})")
        typer.echo(f"  effective: {' '.join(sorted(runtime.effective_caps(tk))) or 'none'}")
        if names:
            runtime.dock.audit.record(principal="deployer", cap="consent", op="grant.env",
                                      args_digest="", outcome="allowed", target=f"{m.id}:{','.join(names)}")

    @app.command("revoke")
    def revoke(
        ident: str = typer.Argument(..., metavar="ID"),
        caps: Optional[list[str]] = typer.Argument(None, metavar="[CAP...]",
                                                   help="Caps to withdraw (default: all)."),
        env: Optional[list[str]] = typer.Option(None, "--env", metavar="VAR",
                                                help="An environment variable grant to withdraw."),
    ) -> None:
        """Withdraw granted caps and env variables (everything when none are named)."""
        store = consent.ConsentStore(runtime.home)
        if store.get(ident) is None:
            raise InvalidArgs(f"{ident} has no grants to revoke")
        left = store.revoke(ident, caps or None, env=env or None)
        what = " ".join([*(caps or ()), *(f"--env {v}" for v in env or ())]) or "everything"
        typer.echo(f"revoked {ident}: {what}")
        typer.echo(f"  still granted: {' '.join(sorted(left.caps)) if left else 'none'}"
                   + (f"; env {' '.join(sorted(left.env))}" if left and left.env else ""))

    @app.command("install")
    def install(
        source: Optional[str] = typer.Argument(None, metavar="SOURCE",
                                               help="Folder, git+file://…, git+https://…@<commit>, archive "
                                                    "(URL needs --sha256), or oci://host/repo:tag|@sha256:…."),
        sha256: Optional[str] = typer.Option(None, "--sha256",
                                             help="The archive's sha256 (required for archive URLs)."),
        force: bool = typer.Option(False, "--force",
                                   help="Replace toolkits already installed under these ids."),
        first_party: bool = typer.Option(False, "--first-party",
                                         help="Accept first-party toolkits from a git or archive source "
                                              "(they get their profile's caps without consent)."),
        locked: bool = typer.Option(False, "--locked",
                                    help="Reproduce exactly the set in the lockfile; fail on any drift."),
        lockfile: Optional[Path] = typer.Option(None, "--lockfile",
                                                help="With --locked: the lockfile to reproduce (default: "
                                                     "$WB_HOME/wbx.lock)."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Install toolkits into the user root ($WB_HOME/toolkits), verified, recorded in wbx.lock."""
        def client() -> distribution.Distribution:  # asked only for an oci:// source (wbcore-oci serves it)
            return distribution.service(runtime)

        if locked:
            if source is not None:
                raise InvalidArgs("--locked takes no SOURCE (it installs what the lockfile records)")
            done = installs.service(runtime).install_locked(runtime.home, lockfile, env=runtime.env,
                                                            distribution=client)
        else:
            if source is None:
                raise InvalidArgs("give a SOURCE, or --locked")
            if lockfile is not None:
                raise InvalidArgs("--lockfile goes with --locked")
            done = installs.service(runtime).install(runtime.home, source, sha256=sha256, force=force,
                                                     env=runtime.env, first_party=first_party,
                                                     distribution=client)
        runtime.discover(refresh=True)
        if json_:
            emit_json([{**d.entry.as_dict(), "path": str(d.path), "caps": list(d.caps),
                        "unchanged": d.unchanged} for d in done])
            return
        for d in done:
            e = d.entry
            state = "unchanged" if d.unchanged else "installed"
            who = f"third-party, signed by {e.signer}" if e.trust == "third-party" else "first-party"
            typer.echo(f"{state} {e.id} {e.version} ({who}) → {d.path}")
            typer.echo(f"  digest {e.digest}  source {e.source}")
            if d.caps and e.trust == "third-party":
                typer.echo(f"  requests caps: {' '.join(d.caps)} (none granted; grant with: wbx toolkit "
                           f"grant {e.id} {' '.join(d.caps)})")
            elif d.caps:
                typer.echo(f"  caps: {' '.join(d.caps)} (first-party: granted by its profile, no consent "
                           "step)")
        if not done:
            warn("nothing to install")

    @app.command("uninstall")
    def uninstall(ident: str = typer.Argument(..., metavar="ID")) -> None:
        """Remove a toolkit from the user root and its entry from wbx.lock, together."""
        entry = installs.service(runtime).uninstall(runtime.home, ident)
        runtime.discover(refresh=True)
        typer.echo(f"uninstalled {ident}" + (f" {entry.version} ({entry.source})" if entry else ""))
