"""Without a cluster address, the ray engine starts a local Ray for the process (slow)."""

from __future__ import annotations

import pytest
from ray_fixtures import K_UPPER

from wbcore_runtime.dispatch import fabric


@pytest.mark.slow
def test_without_an_address_a_local_ray_runs_the_map(rt, register, monkeypatch):
    import ray

    monkeypatch.delenv("WB_RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if ray.is_initialized():
        ray.shutdown()
    register("kup", K_UPPER, kind="kernel")
    try:
        out = [r.value for r in fabric.map(rt, "kup", [b"abc", b"xyz"] * 300, kind="kernel", width=2, engine="ray",
                                           deadline=300)]
        assert out == [b"ABC", b"XYZ"] * 300
        stats = fabric.engine(rt, "ray").stats
        assert len({s["node"] for s in stats}) == 1  # one node: this machine
        assert [s["compiled"] for s in stats].count(True) == 1  # its two actors compiled once between them
    finally:
        ray.shutdown()
