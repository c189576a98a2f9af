"""Fixtures of the go lane's tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wbcore_lane_go import cache as gocache
from wbcore_lane_go import lane as golane


@pytest.fixture(scope="session")
def go_cache(tmp_path_factory, build_sandbox) -> Path:
    """The machine cache every test home seeds from: the one setup warmed when it is one the
    lane trusts, else one warmed for this session (never the machine's, rewritten)."""
    go = golane.find()
    if isinstance(go, str):
        pytest.skip(go)
    machine = gocache.machine_dir(os.environ)
    if not gocache.is_trusted(machine, gocache.recipe(go.version)):
        machine = tmp_path_factory.mktemp("go-machine") / "go"
        gocache.warm(go.goroot, go.version, machine, build_sandbox, for_sandbox=False)
    return machine
