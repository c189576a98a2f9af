"""Integration tests: the core with plugins installed (every test here is marked ``integration``).

``tests/core`` passes with only the core distribution installed; these need the plugins
they exercise (``python3 dev.py test`` installs all of them).
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.integration)
