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
        out = [r.value
               for r in fabric.map(rt, "kup", [b"abc", b"xyz"] * 300, kind="kernel", width=2, engine="ray",
                                           deadline=300)]
        assert out == [b"ABC", b"XYZ"] * 300
        stats = fabric.engine(rt, "ray").stats
        assert len({s["node"] for s in stats}) == 1  # one node: this machine
        assert [s["compiled"] for s in stats].count(True) == 1  # its two actors compiled once between them
    finally:
        ray.shutdown()


TRAP_AFTER_JOINING = """
import sys, tempfile
import wasmtime
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.runtime import Runtime
from wbcore_testing.fixtures import ECHO_OR_TRAP, register_wat
from wbcore_ray import cluster

home = tempfile.mkdtemp()
rt = Runtime.open(home=home, roots=[], cwd=home)
register_wat(rt, "echo", ECHO_OR_TRAP, wat2wasm=wasmtime.wat2wasm)

def trap(when):
    try:
        rt.call("echo", stdin=b"!trap")
    except WbError as exc:
        print(when, type(exc).__name__, flush=True)

trap("before")
cluster.connect()  # a local Ray for the process, as the ray engine starts one
trap("joined")
"""


@pytest.mark.slow
def test_a_guest_trap_in_the_driver_after_it_joined_ray_fails_its_call_not_the_process(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("WB_RAY_ADDRESS", "RAY_ADDRESS", "PYTHONFAULTHANDLER")}
    env["WB_RAY_NODE_HOME"] = str(tmp_path / "node")
    proc = subprocess.run([sys.executable, "-c", TRAP_AFTER_JOINING], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    # ray.init had turned faulthandler on over wasmtime's trap handlers: the second trap was SIGILL (-4)
    assert proc.returncode == 0 and proc.stdout.split() == ["before", "GuestTrap", "joined", "GuestTrap"], \
        (proc.returncode, proc.stdout, proc.stderr[-2000:])
