"""Plugins see only the core: no plugin's product code imports another plugin's package.

A plugin that needs another's service asks its runtime for it through a hook record (the
build sandbox: ``runtime.build_sandbox()``), so that installed alone it still says what is
missing. Tests (``plugins/<dist>/tests``) may exercise several plugins together.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
#: The one named exception: test support's ``wbx`` fixture drives the CLI (wbcore-cli) in-process for
#: the suites that list wbcore-cli in their test extra; wbcore-testing does not depend on it, and the
#: fixture fails with what to add when it is missing.
ALLOWED = {("wbcore-testing", "wbcore_cli")}


def _distributions() -> dict[Path, set[str]]:
    """Each plugin folder and the top-level packages it ships (``wbcore_lane_zig`` ...)."""
    out: dict[Path, set[str]] = {}
    for dist in sorted(p for p in PLUGINS.iterdir() if (p / "pyproject.toml").is_file()):
        out[dist] = {p.name for p in dist.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}
    return out


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))  # importlib.import_module("wb_x...")
        elif (isinstance(node, ast.Call)
              and getattr(node.func, "id", getattr(node.func, "attr", None)) == "lazy"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value.partition(":")[0]))  # plugins.lazy("wb_x.mod:attr")
    return found


def crossings(dist: Path, own: set[str], every: set[str]) -> list[str]:
    """``file:line: imports <module>`` for each import of another plugin's package."""
    bad: list[str] = []
    for path in sorted(dist.rglob("*.py")):
        rel = path.relative_to(dist)
        if rel.parts[0] in ("tests", "build") or ".egg-info" in str(rel):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imported_modules(tree):
            top = module.split(".")[0]
            if top in every and top not in own and (dist.name, top) not in ALLOWED:
                bad.append(f"{dist.name}/{rel}:{line}: imports {module}")
    return bad


def test_every_plugin_ships_a_package_of_its_own() -> None:
    dists = _distributions()
    assert dists, f"no plugins under {PLUGINS}"
    for dist, packages in dists.items():
        names = tomllib.loads((dist / "pyproject.toml").read_text())["project"]["name"]
        assert packages, f"{dist.name} ({names}) ships no package"


@pytest.mark.parametrize("dist", sorted(_distributions()), ids=lambda p: p.name)
def test_plugin_imports_only_the_core_and_itself(dist: Path) -> None:
    dists = _distributions()
    every = set().union(*dists.values())
    bad = crossings(dist, dists[dist], every)
    assert not bad, ("a plugin imports another plugin's package; ask the runtime for the service through a "
                     "hook record instead (see docs/plugins.md):\n" + "\n".join(bad))


def test_the_walk_catches_a_crossing(tmp_path: Path) -> None:
    dist = tmp_path / "wb-lane-x"
    (dist / "wb_lane_x").mkdir(parents=True)
    (dist / "wb_lane_x" / "__init__.py").write_text("")
    (dist / "wb_lane_x" / "lane.py").write_text(
        "import os\nfrom wbcore_runtime.contract.sandbox import Bind\nfrom wb_lane_x import lane\n\n"
        "def build():\n    from wbcore_process.sandbox import Sandbox\n    import wbcore_act.model as m\n"
        "    return lazy('wb_lane_x.lane:build'), plugins.lazy('wbcore_process.sandbox:probe')\n")
    (dist / "tests").mkdir()
    (dist / "tests" / "test_x.py").write_text("from wbcore_process.sandbox import probe\n")  # tests may cross
    every = {"wb_lane_x", "wbcore_process", "wbcore_act"}
    assert crossings(dist, {"wb_lane_x"}, every) == [
        "wb-lane-x/wb_lane_x/lane.py:6: imports wbcore_process.sandbox",
        "wb-lane-x/wb_lane_x/lane.py:7: imports wbcore_act.model",
        "wb-lane-x/wb_lane_x/lane.py:8: imports wbcore_process.sandbox",
    ]
