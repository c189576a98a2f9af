"""``records.deferred``: a record's factory that imports its module on first use."""

from __future__ import annotations

import sys

from wbcore_runtime.contract.records import deferred


def test_a_deferred_factory_imports_its_module_only_when_called() -> None:
    sys.modules.pop("colorsys", None)
    factory = deferred("colorsys", "rgb_to_hsv")
    assert "colorsys" not in sys.modules and factory.__name__ == "rgb_to_hsv"
    assert factory(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" in sys.modules
