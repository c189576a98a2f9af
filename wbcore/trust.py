"""TRUST postures (seed 000): what a toolkit must carry before its caps are granted.

``first-party`` runs under its profile's defaults. ``third-party`` needs
``#+AUTHOR_DID`` and ``#+SIGNATURE``; the deployer grants its caps explicitly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wbcore.records import Check

if TYPE_CHECKING:
    from wbcore.runtime import Runtime
    from wbcore.toolkit import Toolkit


def checks(toolkit: Toolkit, runtime: Runtime) -> list[Check]:
    m = toolkit.manifest
    if m.trust == "first-party":
        return [Check(True, "trust", "first-party (runs under its profile's default caps)")]
    missing = [k for k, v in (("AUTHOR_DID", m.author_did), ("SIGNATURE", m.signature)) if not v]
    if missing:
        return [Check(False, "trust", f"third-party toolkit lacks #+{' and #+'.join(missing)}")]
    return [Check(True, "trust", f"third-party, AUTHOR_DID and SIGNATURE present ({m.author_did})")]
