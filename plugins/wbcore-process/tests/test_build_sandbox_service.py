"""wbcore-process serves the build sandbox: lanes get it from their runtime, never by import."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime.contract import sandbox as contract
from wbcore_runtime.contract.errors import NotFound
from wbcore_runtime.contract.records import BuildLane
from wbcore_runtime.contract.sandbox import Bind, SandboxLimits, SandboxResult

from wbcore_process.sandbox import SandboxDriver, probe


def test_the_runtime_serves_the_namespace_sandbox(make_runtime) -> None:
    rt = make_runtime(plugins=["process"])
    assert rt.build_sandboxes.names() == ["namespaces"]
    box = rt.build_sandbox()
    assert isinstance(box, SandboxDriver)
    ok, reason, _ = probe()
    assert (box.probe().ok, box.probe().reason) == (ok, reason)
    assert rt.build_sandboxes.get("namespaces").available().ok == ok
    assert all(b.dst in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32") for b in box.system_binds())
    info = next(i for i in rt.plugin_infos if i.name == "process")
    rt.collect_all()
    assert info.serves["build sandbox"] == ["namespaces"]


def test_an_unknown_sandbox_name_lists_the_served_ones(make_runtime) -> None:
    rt = make_runtime(plugins=["process"])
    with pytest.raises(NotFound, match="unknown build sandbox 'bwrap'.*namespaces"):
        rt.build_sandbox("bwrap")
    rt = make_runtime(plugins=["process"], env={"WB_BUILD_SANDBOX": "bwrap"})
    with pytest.raises(NotFound, match="unknown build sandbox 'bwrap'"):
        rt.build_sandbox()


def test_without_the_plugin_the_runtime_names_what_to_install(make_runtime) -> None:
    rt = make_runtime(plugins=[])
    with pytest.raises(NotFound, match="^no build sandbox is installed; pip install wbcore-process$"):
        rt.build_sandbox()
    lane = BuildLane(name="native", summary="s", where="w", factory=lambda _rt: None,
                     needs_build_sandbox=True)
    avail = lane.availability(rt)
    assert (avail.ok, avail.reason) == (False, contract.NONE_INSTALLED)
    assert lane.availability(make_runtime(plugins=["process"])).ok == probe()[0]


@pytest.mark.skipif(not probe()[0], reason=f"sandbox unavailable here: {probe()[1]}")
def test_a_run_through_the_service_speaks_the_core_types(make_runtime, tmp_path: Path) -> None:
    box = make_runtime(plugins=["process"]).build_sandbox()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("data")
    res = box.run(["/bin/sh", "-c", "cp /src/f /out/g; id -u"],
                  binds=box.system_binds() + [Bind(src, "/src")],
                  out_dir=tmp_path / "o", limits=SandboxLimits(wall_seconds=20))
    assert isinstance(res, SandboxResult) and res.ok, res.log
    assert res.stdout.split() == [b"1000"] and (tmp_path / "o" / "g").read_text() == "data"
    assert res.check("cp") is res
