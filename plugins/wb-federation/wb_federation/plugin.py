"""Entry point of wb-federation: the federation shape and its structural contract."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore import hookimpl
from wbcore.records import Check, ExecShape, VerifyContext


def verify_federation(ctx: VerifyContext) -> Iterator[Check]:
    m = ctx.toolkit.manifest
    url = m.extra("URL")
    if url:
        rows = m.extra("ROWS_PATH") or "(top level)"
        yield Check(True, "exec", f"federation source {url} rows at {rows}; structural check only")
    else:
        yield Check(True, "exec", "federation (custom source); structural check only")
    # Said plainly: the shape has no runner yet, so nothing can query or sync this source.
    yield Check(True, "exec", "cannot run yet: the federation shape has no runner (no query or sync engine "
                "is installed); the toolkit is listed and verified only", warning=True)


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield ExecShape(
        name="federation",
        summary="a data source queried as tables and synced into :task: nodes",
        verify=verify_federation,
        default_tier="instance",
    )
