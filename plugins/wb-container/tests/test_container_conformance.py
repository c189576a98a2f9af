"""The shared tier conformance suite (wbcore.conformance) run for the container tier (slow: a
fork bomb, a flood, and a comparison with every other posix tier installed, e.g. microvm)."""

from __future__ import annotations

import pytest

from wbcore.conformance import PosixTierConformance

from wb_container import bwrap

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not bwrap.probe()[0], reason=f"bubblewrap unavailable here: {bwrap.probe()[1]}")]


class TestContainerConformance(PosixTierConformance):
    tier = "container"
    deadline_s = 1.5

    def driver(self, rt):
        from wb_container.tiers import ContainerTier

        return ContainerTier(rt)
