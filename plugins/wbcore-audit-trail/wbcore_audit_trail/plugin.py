"""Entry point of wbcore-audit-trail: the audit trail's reader (``wbcore_audit_trails``). Imports
nothing: the reader loads when ``wbx audit`` or the engine first reads the trail."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import AuditTrailService
from wbcore_runtime.plugins.manager import lazy


@hookimpl
def wbcore_audit_trails() -> Iterator[AuditTrailService]:
    yield AuditTrailService(name="audit-trail", summary="the Dock's audit trail read: entries, tail, pages, "
                            "a cursor, verify (the chain and the signed head)",
                            factory=lazy("wbcore_audit_trail.reader:service"))
