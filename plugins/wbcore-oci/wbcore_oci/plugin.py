"""Entry point of wbcore-oci: the OCI distribution client (``wbcore_distributions``). Imports
nothing heavy: the client module loads when an ``oci://`` reference is first pulled or pushed."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import DistributionService
from wbcore_runtime.plugins.manager import lazy


@hookimpl
def wbcore_distributions() -> Iterator[DistributionService]:
    yield DistributionService(name="oci", summary="the OCI distribution API: verified pull, push "
                              "(through the core's one fetcher and SSRF guard)",
                              factory=lazy("wbcore_oci.client:service"))
