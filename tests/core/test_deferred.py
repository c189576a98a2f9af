"""``plugins.lazy``: a record's factory that imports its module on first use (the one lazy factory)."""

from __future__ import annotations

import sys

from wbcore_runtime.contract import records
from wbcore_runtime.plugins.manager import lazy


def test_a_lazy_factory_imports_its_module_only_when_called() -> None:
    sys.modules.pop("colorsys", None)
    factory = lazy("colorsys:rgb_to_hsv")
    assert "colorsys" not in sys.modules and factory.__name__ == "rgb_to_hsv"
    assert factory(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" in sys.modules


def test_records_has_no_second_lazy_factory() -> None:
    assert not hasattr(records, "deferred"), "plugins.lazy is the one lazy factory"
