"""Entry point of wbcore-federation: the federation shape, its verify step and ``wbx fed``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.contract.records import Check, ExecShape, FederationSource, VerifyContext


def verify_federation(ctx: VerifyContext) -> Iterator[Check]:
    from wbcore_federation import engine

    m = ctx.toolkit.manifest
    if not m.extra("URL") and not m.extra("SOURCE"):
        # Seed 000's custom connector (a query module) has no runner in wbcore.
        yield Check(True, "exec", "federation (custom source); structural check only")
        yield Check(
            True,
            "exec",
            "cannot run yet: no #+URL, and custom (non-REST) connectors have no runner in "
            "wbcore; declare #+URL and :entity: headings to use the REST connector",
            warning=True,
        )
        return
    try:
        src = engine.source_of(ctx.toolkit)
    except InvalidArgs as exc:
        yield Check(False, "exec", f"federation source: {exc.message}")
        return
    if src.kind not in ctx.runtime.federation_sources:
        known = ", ".join(sorted(r.name for r in ctx.runtime.federation_sources)) or "none"
        yield Check(False, "exec", f"#+SOURCE: {src.kind} is not an installed connector (installed: {known})")
        return
    names = ", ".join(e.name for e in src.entities)
    where = f"{src.base_url} ({src.pagination.style} pagination, auth {src.auth.scheme})" \
        if src.kind == "http-json" else f"through the {src.kind} connector"
    yield Check(
        True,
        "exec",
        f"federation source {where}; entities: {names}"
        + (f"; syncs {src.sync_entity} → {src.sync_file}" if src.sync_entity else ""),
    )
    if "net" not in m.caps:
        yield Check(False, "caps", "a federation source needs #+CAPS: net (every request is a net decision)")
    if src.auth.scheme == "hmac-sha256" and "secrets" not in m.caps:
        yield Check(False, "caps", "#+AUTH: hmac-sha256 signs with the secrets broker: add secrets to #+CAPS")


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield ExecShape(
        name="federation",
        summary="a data source queried as tables and synced into :task: nodes",
        verify=verify_federation,
        default_tier="instance",
    )


def _http_json(runtime: Any) -> Any:
    from wbcore_federation.engine import HttpJson

    return HttpJson()


@hookimpl
def wbcore_federation_sources() -> Iterator[FederationSource]:
    yield FederationSource(
        name="http-json",
        summary="any REST/JSON API: #+URL, :entity: paths, link/cursor/page "
        "pagination, auth signed by the secrets broker",
        factory=_http_json,
    )


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_federation import cli

    add(
        "fed", cli.fed_app(add.runtime),
        help="Query a federation source's entities, or sync one into an Org file.",
    )
