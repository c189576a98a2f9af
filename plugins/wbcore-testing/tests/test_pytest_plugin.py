"""wbcore-testing is the ``wbcore`` pytest plugin, and the runtime never imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import wbcore_runtime
import wbcore_testing.fixtures


def test_the_fixtures_are_registered_as_the_wbcore_pytest_plugin(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("wbcore")
    assert plugin is wbcore_testing.fixtures, (
        f"pytest11 'wbcore' is {plugin!r}: reinstall plugins/wbcore-testing")


def test_wb_home_fixture_gives_an_empty_home(wb_home: Path) -> None:
    assert wb_home.is_dir() and list(wb_home.iterdir()) == []


def test_the_runtime_never_imports_test_support() -> None:
    """No module of wbcore_runtime imports wbcore_testing (or pytest): test support ships apart."""
    bad = []
    for path in sorted(Path(wbcore_runtime.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}:{node.lineno}: {n}"
                    for n in names if n.split(".")[0] in ("wbcore_testing", "pytest")]
    assert bad == []
