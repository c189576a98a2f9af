"""``wbx bundle ship|restore|inspect``, ``wbx publish sign|verify``, ``wbx library``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json
from wbcore_runtime.contract import distribution


def _ident(runtime: Any, tenant: str) -> Any:
    from wbcore_runtime.trust import identity

    return identity.load(runtime.home, runtime.env, tenant=tenant)


def _abs(runtime: Any, p: Path) -> Path:
    return p if p.is_absolute() else Path(runtime.cwd) / p


def bundle_app(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("ship")
    def ship(
        workspace: Path = typer.Argument(..., help="The workspace folder (it holds workspace.org)."),
        out: Path = typer.Option(..., "-o", "--out", help="The .wbundle to write."),
        tenant: str = typer.Option("default", "--tenant", help="Which tenant's key signs."),
        did_web: str | None = typer.Option(None, "--did-web", help="Sign as did:web:HOST (the same key)."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Pack a workspace's HTML, its VFS (every volume it owns) and a signed manifest."""
        from wbcore_publish import bundle

        s = bundle.ship(_abs(runtime, workspace), _abs(runtime, out), home=runtime.home,
                        ident=_ident(runtime, tenant), did_web_host=did_web, env=runtime.env)
        if json_:
            emit_json({"path": str(s.path), "sha256": s.sha256, "signer": s.signer, "signed_at": s.signed_at,
                       "members": list(s.members)})
            return
        typer.echo(f"shipped {s.path} (sha256 {s.sha256})")
        typer.echo(f"  signed by {s.signer} at {s.signed_at}; members: {', '.join(s.members)}")

    @app.command("restore")
    def restore(
        path: str = typer.Argument(...,
                                   help="The .wbundle to restore (a file, or "
                                        "oci://host/repo:tag|@sha256:…)."),
        into: Path | None = typer.Option(None, "--into",
                                         help="The new workspace folder (default: ./<name>)."),
        signer: list[str] = typer.Option([], "--signer",
                                         help="Also trust this DID (default: only this tenant's)."),
        tenant: str = typer.Option("default", "--tenant", help="The tenant whose DID is trusted."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Verify a bundle completely, then land its workspace and VFS database."""
        if path.startswith("oci://"):
            with _pulled_bundle(runtime, path) as pulled:
                _restore(pulled, into, signer, tenant, json_)
            return
        _restore(_abs(runtime, Path(path)), into, signer, tenant, json_)

    def _restore(bpath: Path, into: Path | None, signer: list[str], tenant: str, json_: bool) -> None:
        from wbcore_publish import bundle

        target = _abs(runtime, into) if into else None
        if target is None:
            name = bundle.inspect(bpath, env=runtime.env, resolve_web=False).manifest["workspace"].get("name")
            from wbcore_publish.workspace import NAME_RE

            if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
                from wbcore_runtime.contract.errors import InvalidArgs

                raise InvalidArgs(f"{bpath.name}: the manifest names no usable workspace folder; pass --into")
            target = Path(runtime.cwd) / name
        r = bundle.restore(bpath, home=runtime.home, into=target,
                           trusted=[_ident(runtime, tenant).did, *signer], env=runtime.env)
        if json_:
            emit_json({"workspace": str(r.workspace), "vfs_db": str(r.vfs_db), "signer": r.signer,
                       "signed_at": r.signed_at, "rows": r.rows})
            return
        typer.echo(f"restored {r.workspace} ({r.rows} VFS files in {r.vfs_db})")
        typer.echo(f"  signed by {r.signer} at {r.signed_at}; signature and every hash verified")

    @app.command("inspect")
    def inspect(
        path: Path = typer.Argument(..., help="The .wbundle to check."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Show a bundle's manifest and whether its signature and members hold (writes nothing)."""
        from wbcore_publish import bundle

        ins = bundle.inspect(_abs(runtime, path), env=runtime.env)
        if json_:
            emit_json({"manifest": ins.manifest, "signature": ins.signature.ok, "verified": ins.verified,
                       "signature_reason": ins.signature.reason, "changes": list(ins.changes)})
        else:
            typer.echo(f"{'✓' if ins.signature.ok else '✗'} signature: {ins.signature.reason}")
            typer.echo(f"{'✓' if not ins.changes else '✗'} members: "
                       + ("; ".join(ins.changes) or "every hash holds"))
        if not ins.verified:
            raise typer.Exit(1)

    return app


@contextmanager
def _pulled_bundle(runtime: Any, reference: str) -> Iterator[Path]:
    """A bundle pulled from a registry into a private temp folder of this home, removed after."""
    import shutil

    from wbcore_publish import ocipublish
    from wbcore_runtime.store import leftovers

    base = Path(runtime.home) / leftovers.STAGING
    base.mkdir(parents=True, exist_ok=True)
    work = leftovers.mkdtemp(leftovers.STAGING_PREFIX, dir=base)  # swept like any stage if a kill leaves it
    try:
        yield ocipublish.fetch_bundle(distribution.service(runtime), reference, work / "pulled.wbundle",
                                      env=runtime.env)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def publish_app(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("oci")
    def publish_oci(
        source: str = typer.Argument(..., help="A toolkit id, a toolkit folder, or a .wbundle file."),
        target: str = typer.Argument(..., help="[oci://]<registry>/<repository>:<tag>"),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Push a signed toolkit or a .wbundle to an OCI registry (manifest, config, layer blobs)."""
        from wbcore_publish import ocipublish

        p = Path(source).expanduser()
        local = p if p.is_absolute() else Path(runtime.cwd) / p
        if local.is_file() and local.suffix == ".wbundle":
            got = ocipublish.bundle(distribution.service(runtime), local, target, env=runtime.env)
        elif local.is_dir() and (local / "manifest.org").is_file():
            got = ocipublish.toolkit(distribution.service(runtime), local, target, env=runtime.env)
        else:
            got = ocipublish.toolkit(distribution.service(runtime), runtime.toolkit(source).dir, target,
                                     env=runtime.env)
        if json_:
            emit_json({"kind": got.kind, "name": got.name, "reference": got.reference, "tag": got.tag,
                       "digest": got.digest, "blobs_sent": got.blobs_sent})
            return
        typer.echo(f"published {got.kind} {got.name} → {got.reference}")
        typer.echo(f"  tag {got.tag}; {got.blobs_sent} new blob(s); install with: "
                   + (f"wbx toolkit install {got.reference}" if got.kind == "toolkit"
                      else f"wbx bundle restore {got.reference}"))

    @app.command("sign")
    def sign(
        page: Path = typer.Argument(..., help="The HTML page to sign (rewritten in place)."),
        asset: list[str] = typer.Option([], "--asset", help="Also cover this file (relative to the page)."),
        tenant: str = typer.Option("default", "--tenant", help="Which tenant's key signs."),
        did_web: str | None = typer.Option(None, "--did-web", help="Sign as did:web:HOST (the same key)."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Embed a workbooks-c2pa manifest: the page's hash, its assets' hashes, the signature."""
        from wbcore_publish import page as _page

        s = _page.sign(_abs(runtime, page), _ident(runtime, tenant), assets=asset, did_web_host=did_web,
                       env=runtime.env)
        if json_:
            emit_json({"page": str(s.page), "signer": s.signer, "signed_at": s.signed_at,
                       "assets": list(s.assets), "skipped": list(s.skipped)})
            return
        typer.echo(f"signed {s.page} as {s.signer} ({len(s.assets)} assets)")
        for rel in s.skipped:
            typer.echo(f"  not covered: {rel} (not a local file inside the page's folder)")

    @app.command("verify")
    def verify(
        page: Path = typer.Argument(..., help="The signed HTML page."),
        offline: bool = typer.Option(False, "--offline", help="Do not resolve a did:web signer."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Report signature, asset_integrity (needs no key) and valid; exit 1 unless valid."""
        from wbcore_publish import page as _page

        r = _page.verify(_abs(runtime, page), env=runtime.env, resolve_web=not offline)
        if json_:
            emit_json(r.as_json())
        else:
            typer.echo(f"{'✓' if r.signature else '✗'} signature: {r.signature_reason}")
            typer.echo(f"{'✓' if r.asset_integrity else '✗'} asset_integrity: "
                       + ("; ".join(r.changes) or "the page and every asset match"))
            typer.echo(f"{'✓' if r.valid else '✗'} valid")
        if not r.valid:
            raise typer.Exit(1)

    return app


def library_cmd(runtime: Any) -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)

    @app.callback(invoke_without_command=True)
    def library(
        path: list[Path] = typer.Option([], "--path",
                                        help="Scan this folder (also: $WB_LIBRARY_PATH, the search roots)."),
        mine: bool = typer.Option(False, "--mine", help="Only what this tenant's identity signed."),
        tenant: str = typer.Option("default", "--tenant", help="Whose identity is 'mine'."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """List workspaces (workspace.org) and bundles (*.wbundle) with signer, signed-at, verified."""
        from wbcore_publish import library as _lib

        did = _ident(runtime, tenant).did
        dirs = _lib.folders([_abs(runtime, p) for p in path], runtime.env, runtime.roots)
        entries = [e for e in _lib.scan(dirs, identity_did=did, env=runtime.env) if e.mine or not mine]
        if json_:
            emit_json({"identity": did, "folders": [str(d) for d in dirs],
                       "entries": [e.as_json() for e in entries]})
            return
        if not entries:
            typer.echo("no workspaces or bundles found in " + (", ".join(map(str, dirs)) or "no folder"))
        for e in entries:
            mark = "✓" if e.verified else "✗"
            typer.echo(f"{mark} {e.kind:9} {e.name:20} {e.signer or 'unsigned'}"
                       f"{' (me)' if e.mine else ''} {e.signed_at or ''}")
            typer.echo(f"    {e.path}: {e.detail}")

    return app
