"""docs/plugins.md "Our distributions" agrees with the installed plugins, and every distribution
folder carries what its wheel and sdist need (LICENSE, README.md, metadata)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from wbcore_runtime.runtime import Runtime

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "plugins.md"
FOLDERS = [REPO, *sorted(p for p in (REPO / "plugins").iterdir() if (p / "pyproject.toml").is_file())]


def _table() -> dict[str, tuple[str, str]]:
    """distribution → (entry point cell, serves cell) of the "Our distributions" table."""
    text = DOC.read_text()
    body = text[text.index("## Our distributions"):]
    rows = {}
    for line in body.splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \| (.*?) \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_the_plugin_map_names_every_plugin_and_what_it_serves(wb_home: Path) -> None:
    rows = _table()
    dists = {tomllib.loads((f / "pyproject.toml").read_text())["project"]["name"] for f in FOLDERS}
    assert set(rows) == dists, f"table rows vs distributions in this repository: {set(rows) ^ dists}"
    rt = Runtime.open(home=wb_home)
    rt.collect_all()
    ours = [i for i in rt.plugin_infos if (i.distribution or "").startswith("wbcore-")]
    # Runtime plugins: the distributions registering a wbcore.plugins entry point (not the core,
    # not wbcore-testing, the pytest plugin).
    plugins = sum(1 for f in FOLDERS
                  if "wbcore.plugins"
                  in tomllib.loads((f / "pyproject.toml").read_text())["project"].get("entry-points", {}))
    if len(ours) < plugins:
        pytest.skip(f"only {len(ours)} of our {plugins} plugins are installed "
                    "(python3 dev.py setup installs all)")
    for info in ours:
        assert info.loaded, f"{info.name}: {info.error}"
        entry, serves = rows[info.distribution]
        assert entry == f"`{info.name}`", (
            f"{info.distribution}: entry point {info.name!r}, the table says {entry}")
        readme = (REPO / "plugins" / info.distribution / "README.md").read_text()
        for kind, names in info.serves.items():
            for name in names:
                assert f"`{name}`" in serves and kind in serves, \
                    f"{info.distribution} serves {kind} {name!r}; docs/plugins.md says: {serves}"
                assert f"`{name}`" in readme, (
                    f"plugins/{info.distribution}/README.md does not name {kind} {name!r}")


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name if f != REPO else "wbcore-runtime")
def test_every_distribution_ships_license_readme_and_metadata(folder: Path) -> None:
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    assert ("Apache License" in (folder / "LICENSE").read_text()[:200]
            and "Version 2.0" in (folder / "LICENSE").read_text()[:300])
    assert project["license"] == {"text": "Apache-2.0"}
    assert project["readme"] == "README.md" and (folder / "README.md").is_file()
    readme = (folder / "README.md").read_text()
    if folder != REPO:
        assert (readme.startswith(f"# {project['name']}\n")
                and f"pip install wbcore-runtime {project['name']}" in readme)
    assert project["requires-python"] == ">=3.11"
    assert "License :: OSI Approved :: Apache Software License" in project["classifiers"]
    assert "wbcore" in project["keywords"]
    assert "urls" not in project  # none is real yet: do not invent one
