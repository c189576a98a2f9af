"""``wbx toolkit`` provenance verbs: sign, grant, revoke, install, import, audit, export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from wbcore_runtime.cli.output import JSON_HELP, emit_json, warn
from wbcore_runtime.contract.errors import InvalidArgs

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime


def register(app: typer.Typer, runtime: Runtime) -> None:
    @app.command("sign")
    def sign(
        ident: str = typer.Argument(..., metavar="ID"),
        did_web: Optional[str] = typer.Option(None, "--did-web", metavar="HOST", help="Sign as did:web:HOST (same key)."),
        tenant: str = typer.Option("default", "--tenant", help="Which tenant's key signs."),
    ) -> None:
        """Sign a third-party toolkit: #+AUTHOR_DID and #+SIGNATURE over the whole folder."""
        from wbcore_runtime.trust import did, identity, signing

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
            help="A deployer environment variable the toolkit may read and send (e.g. its #+AUTH: bearer-env VAR); repeat per variable."),
    ) -> None:
        """Grant caps a toolkit requests (any for third-party, whose signature must verify; build/serve for
        first-party) and, with --env, each deployer environment variable its manifest may read."""
        from wbcore_runtime.trust import consent, policy, verdict as trust

        tk = runtime.toolkit(ident)
        m = tk.manifest
        caps = list(caps or ())  # `--env VAR` alone names no cap
        universe = runtime.caps_universe_for(caps)
        names = list(dict.fromkeys(env or ()))
        if not caps and not names:
            raise InvalidArgs(f"name at least one cap or --env VAR to grant {m.id}")
        wanted = consent.check_caps(tk, caps, universe) if caps else []
        asked = consent.requested_env(m)
        for name in names:
            if not consent.ENV_RE.match(name):
                raise InvalidArgs(f"--env {name!r} is not an environment variable name (A-Z, 0-9, _)")
            if name not in asked:
                raise InvalidArgs(f"{m.id} does not read {name} (its manifest reads: {' '.join(asked) or 'no variable'}); "
                                  "grant only what the manifest names")
        if m.trust != "third-party":
            profiled = [c for c in wanted if c not in universe.consent_only]
            if profiled:
                raise InvalidArgs(
                    f"{m.id} is first-party: {' '.join(profiled)} come from its profile and need no grant "
                    f"(only {', '.join(sorted(universe.consent_only))} do)"
                )
            signer = m.author_did
        else:
            verdict = trust.folder_verdict(tk.dir, runtime.env)
            refused = trust.refusal(verdict)
            if refused:
                raise InvalidArgs(f"refusing to grant to {m.id}: {refused}")
            signer = verdict.signer
        g = consent.ConsentStore(runtime.home).grant(m.id, wanted, signer, env=names)
        typer.echo(f"granted {m.id}" + (f" ({signer})" if signer else "") + f": {' '.join(sorted(g.caps)) or 'no caps'}"
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
        caps: Optional[list[str]] = typer.Argument(None, metavar="[CAP...]", help="Caps to withdraw (default: all)."),
        env: Optional[list[str]] = typer.Option(None, "--env", metavar="VAR", help="An environment variable grant to withdraw."),
    ) -> None:
        """Withdraw granted caps and env variables (everything when none are named)."""
        from wbcore_runtime.trust import consent

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
        source: Optional[str] = typer.Argument(None, metavar="SOURCE", help="Folder, git+file://…, git+https://…@<commit>, archive (URL needs --sha256), or oci://host/repo:tag|@sha256:…."),
        sha256: Optional[str] = typer.Option(None, "--sha256", help="The archive's sha256 (required for archive URLs)."),
        force: bool = typer.Option(False, "--force", help="Replace toolkits already installed under these ids."),
        first_party: bool = typer.Option(False, "--first-party", help="Accept first-party toolkits from a git or archive source (they get their profile's caps without consent)."),
        locked: bool = typer.Option(False, "--locked", help="Reproduce exactly the set in the lockfile; fail on any drift."),
        lockfile: Optional[Path] = typer.Option(None, "--lockfile", help="With --locked: the lockfile to reproduce (default: $WB_HOME/wbx.lock)."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Install toolkits into the user root ($WB_HOME/toolkits), verified, recorded in wbx.lock."""
        from wbcore_runtime.store import install as _install

        if locked:
            if source is not None:
                raise InvalidArgs("--locked takes no SOURCE (it installs what the lockfile records)")
            done = _install.install_locked(runtime.home, lockfile, env=runtime.env)
        else:
            if source is None:
                raise InvalidArgs("give a SOURCE, or --locked")
            if lockfile is not None:
                raise InvalidArgs("--lockfile goes with --locked")
            done = _install.install(runtime.home, source, sha256=sha256, force=force, env=runtime.env, first_party=first_party)
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

    @app.command("uninstall")
    def uninstall(ident: str = typer.Argument(..., metavar="ID")) -> None:
        """Remove a toolkit from the user root and its entry from wbx.lock, together."""
        from wbcore_runtime.store import install as _install

        entry = _install.uninstall(runtime.home, ident)
        runtime.discover(refresh=True)
        typer.echo(f"uninstalled {ident}" + (f" {entry.version} ({entry.source})" if entry else ""))

    def _registered() -> list[str]:
        try:
            return runtime.registry.names("command")
        except Exception:  # an unreadable registry means nothing counts as registered
            return []

    @app.command("import")
    def import_(
        source: str = typer.Argument(..., metavar="SOURCE", help="An Agent Skills folder (SKILL.md), a markdown file, a folder, git+… or an archive URL."),
        as_: Optional[str] = typer.Option(None, "--as", help="The toolkit id (default: the skill's name)."),
        sha256: Optional[str] = typer.Option(None, "--sha256", help="The archive's sha256 (required for archive URLs)."),
        out: Optional[Path] = typer.Option(None, "-o", "--out", help="Folder to create the toolkit in (default: ./toolkits)."),
        force: bool = typer.Option(False, "--force", help="Replace an existing toolkit folder."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Package an Agent Skills folder, a markdown file or a folder as a toolkit, then audit it."""
        from wbcore_runtime import native_audit, skill_import

        done = skill_import.import_source(source, out or runtime.cwd / "toolkits", ident=as_, force=force, sha256=sha256)
        report = native_audit.audit(done.path, _registered())
        runtime.discover(refresh=True)
        for warning in done.warnings:
            typer.echo(f"wbx: warning: {warning}", err=True)
        if json_:
            emit_json({"id": done.id, "path": str(done.path), "skills": list(done.skills), "copied": list(done.copied),
                       "warnings": list(done.warnings), "audit": report.as_dict()})
            return
        typer.echo(f"imported {done.id} → {done.path}")
        typer.echo(f"  skills: overview {' '.join(done.skills)}".rstrip())
        if done.copied:
            typer.echo(f"  copied: {' '.join(done.copied)}")
        _print_audit(report, done.path)

    def _print_audit(report: Any, root: Path) -> None:
        if not report.findings:
            typer.echo(f"audit: nothing in {root} assumes native execution")
            return
        fixable = sum(1 for f in report.findings if f.fixable)
        hint = f" (wbx toolkit audit {root} --fix)" if fixable else ""
        typer.echo(f"audit: {len(report.findings)} finding(s), {fixable} fixable{hint}")
        for f in report.findings:
            typer.echo(f"  {f.render()}")

    @app.command("audit")
    def audit(
        folder: Path = typer.Argument(..., metavar="DIR", help="A toolkit folder (e.g. one made by import)."),
        fix: bool = typer.Option(False, "--fix", help="Rewrite what can be rewritten."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Report what in a toolkit folder assumes native execution; --fix rewrites what it can.

        Exits 1 while something still assumes native execution.
        """
        from wbcore_runtime import native_audit

        if not folder.is_dir():
            raise InvalidArgs(f"{folder} is not a folder")
        signed = "SIGNATURE:" in ((folder / "manifest.org").read_text(errors="replace") if (folder / "manifest.org").is_file() else "")
        report = native_audit.fix(folder, _registered()) if fix else native_audit.audit(folder, _registered())
        if json_:
            emit_json(report.as_dict())
        else:
            if fix:
                typer.echo(f"fixed: {' '.join(report.fixed) or 'nothing to fix'}")
                if report.fixed and signed:
                    warn("the toolkit was signed: re-sign it (wbx toolkit sign <id>), its content changed")
            _print_audit(report, folder)
        if report.native:
            raise typer.Exit(1)

    @app.command("export")
    def export(
        idents: Optional[list[str]] = typer.Argument(None, metavar="ID...", help="Toolkits to export."),
        agent_skills: Optional[Path] = typer.Option(None, "-o", "--out", "--agent-skills", metavar="DIR",
                                                    help="Write <DIR>/<name>/SKILL.md packages."),
        index: Optional[Path] = typer.Option(None, "--index", help="Write <DIR>/.well-known/agent-skills/ with index.json."),
        all_: bool = typer.Option(False, "--all", help="Export every discovered toolkit."),
        force: bool = typer.Option(False, "--force", help="Replace existing packages under --agent-skills."),
    ) -> None:
        """Export toolkits as Agent Skills packages and/or a well-known discovery index."""
        from wbcore_runtime import export as _export

        if agent_skills is None and index is None:
            raise InvalidArgs("give -o DIR (Agent Skills packages) and/or --index DIR")
        if all_:
            toolkits = list(runtime.discover().toolkits.values())
        elif idents:
            toolkits = [runtime.toolkit(i) for i in idents]
        else:
            raise InvalidArgs("name at least one toolkit ID, or --all")
        if agent_skills is not None:
            for tk in toolkits:
                path = _export.export_agent_skills(tk, agent_skills, force=force)
                typer.echo(f"exported {tk.id} → {path / 'SKILL.md'}")
        if index is not None:
            path = _export.export_index(toolkits, index)
            typer.echo(f"index {path} ({len(toolkits)} skill(s))")
