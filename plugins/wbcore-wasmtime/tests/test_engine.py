"""One engine per process; compiled caches keyed by engine; the wat lane."""

from __future__ import annotations

import hashlib

import pytest
from conftest import ECHO
from wbcore_wasmtime import engine

from wbcore_runtime.build import BuildRequest, ResolvedSource
from wbcore_runtime.contract.errors import InvalidArgs


def test_one_engine_and_its_cache_key():
    e = engine.get()
    assert engine.get() is e
    assert e.cache_key.startswith(f"wasmtime-{engine.wasmtime_version()}-")
    assert e.config["epoch_interruption"] is True


def test_second_load_uses_the_compiled_cache(rt, register):
    entry = register("echo", ECHO)
    rt.call("echo", [], b"a")
    cpath = rt.artifacts.compiled_path(entry.sha256, engine.get().cache_key)
    assert cpath.is_file()
    before = cpath.stat().st_mtime_ns
    engine.modules().clear()  # as a new process would
    assert rt.call("echo", [], b"b").stdout == b"b"
    assert cpath.stat().st_mtime_ns == before  # loaded, not rebuilt


def test_a_compiled_cache_the_engine_refuses_is_rebuilt(rt, register):
    entry = register("echo", ECHO)
    rt.call("echo", [], b"a")
    cpath = rt.artifacts.compiled_path(entry.sha256, engine.get().cache_key)
    # bytes from "another wasmtime": a consistent digest, but not loadable by this engine
    alien = b"\x7fELF not a wasmtime artifact for this engine" * 10
    cpath.write_bytes(alien)
    cpath.with_name(cpath.name + ".sha256").write_text(hashlib.sha256(alien).hexdigest() + "\n")
    engine.modules().clear()
    assert rt.call("echo", [], b"again").stdout == b"again"
    assert cpath.read_bytes() != alien


def test_wat_lane_builds_and_reports_errors(tmp_path):
    from wbcore_wasmtime.lanes import WatLane

    src = tmp_path / "src"
    src.mkdir()
    (src / "main.wat").write_text(ECHO)
    lane = WatLane()
    out = lane.build(BuildRequest(manifest=None,  # type: ignore[arg-type]
                                  source=ResolvedSource(digest="d", dir=src), outdir=tmp_path / "out"))
    assert out.artifact.read_bytes()[:4] == b"\0asm" and "validated" in out.log
    (src / "main.wat").write_text("(module (func (export \"f\") (result i32) i64.const 1))")
    with pytest.raises(InvalidArgs, match="wat lane: main.wat"):
        lane.build(BuildRequest(manifest=None,  # type: ignore[arg-type]
                                source=ResolvedSource(digest="d", dir=src), outdir=tmp_path / "out"))


def test_instance_tier_runs_commands_and_kernels(rt, register):
    from conftest import K_UPPER

    from wbcore_runtime.dispatch import kernels

    register("echo", ECHO)
    register("kup", K_UPPER, kind="kernel")
    tier = rt.tiers.get("instance")
    assert tier.rung == 0 and tier.available().ok
    driver = tier.factory(rt)
    entry = rt.registry.get("command", "echo")
    from wbcore_runtime.contract.calls import CommandRequest, Principal
    from wbcore_runtime.trust.policy import profile

    req = CommandRequest(name="echo", sha256=entry.sha256, artifact=rt.artifacts.path(entry.sha256), argv=(),
                         stdin=b"via tier", profile=profile("compute"), timeout_s=1.0, principal=Principal())
    assert driver.call(req).stdout == b"via tier"
    assert driver.call(kernels.kernel_request(rt.resolve("kernel", "kup"))) == b""
    with pytest.raises(InvalidArgs):
        driver.call("not a request")


def test_fuel_metering_is_reported_when_enabled(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "from wbcore_runtime.runtime import Runtime; from wbcore_wasmtime import engine;"
        f"rt = Runtime.open(plugins=['wasmtime'], home={str(tmp_path)!r});"
        "r = rt.call('upper', [], b'abc' * 100);"
        "print(engine.get().fuel, r.usage.fuel, r.stdout[:3].decode())"
    )
    env = dict(os.environ, WB_WASM_FUEL="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    fuel_on, used, head = out.stdout.split()
    assert fuel_on == "True" and int(used) > 300 and head == "ABC", out.stderr


def test_the_engine_record_behaves_as_the_dataclass_it_was() -> None:
    """``Engine`` is written by hand (``wbcore_runtime.contract.frozen.Record``: every ``wbx run``
    creates it): ``==``, repr, unhashability and ``dataclasses.replace`` as ``@dataclass`` gave."""
    import dataclasses

    ref = dataclasses.make_dataclass("Engine", ["wasm", "config", "fuel", "ticker"])
    eng = engine.get()
    mine, theirs = (cls(eng.wasm, eng.config, eng.fuel, eng.ticker) for cls in (engine.Engine, ref))
    assert repr(mine) == repr(theirs) and mine == eng and mine is not eng and (mine == theirs) is False
    assert engine.Engine.__hash__ is None and ref.__hash__ is None
    assert [f.name for f in dataclasses.fields(mine)] == [f.name for f in dataclasses.fields(theirs)]
    assert dataclasses.replace(mine, fuel=not eng.fuel) != mine
    mine.fuel = not eng.fuel  # mutable, as before
    assert mine != eng
