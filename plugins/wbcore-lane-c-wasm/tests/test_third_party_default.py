"""Third-party C is built by c-wasm by default (wbcore_runtime.build.lane_for), overridable per language."""

from __future__ import annotations

from pathlib import Path

from wbcore_runtime import hookimpl
from wbcore_runtime.build import lane_for
from wbcore_runtime.toolkit.manifest import parse
from wbcore_runtime.contract.records import BuildLane
from wbcore_testing.fixtures import manifest_text


class NativeC:
    """A stand-in native ``c`` lane (test fixture): only its name matters here."""

    @hookimpl
    def wbcore_build_lanes(self):
        yield BuildLane(name="c", summary="test c lane", where="nowhere (test)", factory=lambda rt: None)


def manifest(trust: str | None, lang: str = "c"):
    return parse(manifest_text("t", trust=trust, extra={"BUILD_LANG": lang}), Path("t/manifest.org"))


def test_third_party_c_goes_to_c_wasm_first_party_keeps_its_lane(make_runtime):
    rt = make_runtime(plugins=["lane-c-wasm", NativeC()])
    assert lane_for(manifest("third-party"), rt.lanes, {}) == "c-wasm"
    assert lane_for(manifest("first-party"), rt.lanes, {}) == "c"
    assert lane_for(manifest(None), rt.lanes, {}) == "c"
    assert lane_for(manifest("third-party", "go"), rt.lanes, {}) == "go"


def test_setting_overrides_and_missing_lane_falls_back(make_runtime):
    rt = make_runtime(plugins=["lane-c-wasm", NativeC()])
    assert lane_for(manifest("third-party"), rt.lanes, {"WB_THIRD_PARTY_LANE_C": "c"}) == "c"
    assert lane_for(manifest("third-party"), rt.lanes, {"WB_THIRD_PARTY_LANE_C": "no-such-lane"}) == "c"
    only_native = make_runtime(plugins=[NativeC()])
    assert lane_for(manifest("third-party"), only_native.lanes, {}) == "c"
