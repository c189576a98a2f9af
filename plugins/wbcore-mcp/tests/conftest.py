"""Fixtures of the wbcore-mcp tests (toolkits in mcp_fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_fixtures import populate


@pytest.fixture
def demo_runtime(make_runtime, toolkit_root: Path, wb_home: Path) -> Any:
    populate(toolkit_root, wb_home)
    return make_runtime()
