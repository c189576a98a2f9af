"""The shared tier conformance suite (:mod:`wbcore_testing.conformance`) at tier ``instance``: the
reference the other tiers are compared with holds the same rows (no channel, no agent)."""

from __future__ import annotations

import pytest

from wbcore_testing.conformance import TierConformance


class TestInstanceConformance(TierConformance):
    tier = "instance"
    compile_wat = staticmethod(lambda wat: pytest.importorskip("wasmtime").wat2wasm(wat))
