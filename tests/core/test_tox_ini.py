"""tox.ini is made from the distributions' pyproject.toml files, so it cannot drift from them or
from ``dev.py isolated`` (which installs the same sets): this fails when it is stale."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tox_ini_is_what_dev_py_makes_from_the_pyprojects() -> None:
    spec = importlib.util.spec_from_file_location("wb_dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    made = dev.tox_ini()
    assert (ROOT / "tox.ini").read_text() == made, "tox.ini is stale: run `python3 dev.py tox`"
    plugins = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
    assert all(f"[testenv:{name}]" in made for name in plugins)
