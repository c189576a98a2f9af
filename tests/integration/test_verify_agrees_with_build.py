"""``verify`` says ✗ for exactly what ``build`` refuses, with the same reason and fix
(``wbcore_runtime.build.buildable``), and re-hashes registered artifacts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wbcore_runtime.build import buildable, builder
from wbcore_runtime import hookimpl
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import BuildLane
from wbcore_testing.fixtures import manifest_text

TOOLKITS = Path(__file__).resolve().parents[2] / "toolkits"
WAT = (TOOLKITS / "b64" / "src" / "b64.wat").read_text()


class NoLanePlugin:
    """A lane installed but unavailable here, as a lane whose toolchain is missing."""

    @hookimpl
    def wbcore_build_lanes(self):
        def factory(_runtime):
            raise AssertionError("an unavailable lane is never instantiated")

        yield BuildLane(name="frob", summary="test lane", where="nowhere", factory=factory,
                        available=lambda: Availability.no(
                            "needs the frobnicator; install it with apt-get install frob"))


def _kit(make_toolkit, ident: str, src: str, lang: str | None = None, **extra: str) -> None:
    fields = {"CLI_BIN": ident, "BUILD_SRC": src, **extra}
    if lang:
        fields["BUILD_LANG"] = lang
    make_toolkit(ident, manifest=manifest_text(ident, exec="command", extra=fields),
                 files={"src/main.wat": WAT, "src/main.c": "int main(void){return 0;}\n"})


CASES = [
    ("fetched-wasm", "wasm:https://example.invalid/m.wasm", None, {}, 2, "needs #+SHA256"),
    ("fetched-archive", "archive:https://example.invalid/a.tar.gz", "c", {}, 2, "needs #+SHA256"),
    ("loose-git", "git+https://example.invalid/repo@main", "c", {}, 2, "40-hex commit"),
    ("bad-c-flag", "path:src", "c", {"BUILD_FLAGS": "-O2 --sysroot=/etc"}, 2,
     "flag '--sysroot=/etc' is not allowed"),
    ("bad-js-flag", "path:src", "js", {"BUILD_FLAGS": "-O2"}, 2, "js takes no build flags"),
    ("no-lane", "path:src", "frob", {}, 127, "lane frob is not available here: needs the frobnicator"),
    ("unknown-lane", "path:src", "cobol", {}, 127, "unknown BUILD_LANG lane 'cobol'"),
]


@pytest.mark.parametrize(("ident", "src", "lang", "extra", "code", "reason"), CASES,
                         ids=[c[0] for c in CASES])
def test_what_build_refuses_verify_shows_as_a_cross_with_the_same_reason(
        make_toolkit, make_runtime, wbx, ident, src, lang, extra, code, reason):
    _kit(make_toolkit, ident, src, lang, **extra)
    rt = make_runtime()
    rt.register_plugin(NoLanePlugin(), name="nolane")
    with pytest.raises(WbError) as refused:
        builder.build(rt, ident)
    assert reason in refused.value.message
    assert refused.value.exit_code == code
    report = rt.verify(ident)
    crossed = [c for c in report.checks if not c.ok and not c.warning]
    assert not report.ok and any(refused.value.message in c.message for c in crossed), report.render()
    r = wbx("toolkit", "build", ident, runtime=rt)
    assert r.exit_code == code and refused.value.message in r.stderr
    r = wbx("toolkit", "verify", ident, runtime=rt)
    assert r.exit_code == 1 and "✗ exec: not yet built, and the build would refuse: " in r.stdout
    # nothing was fetched or compiled: no work folder was left and none was made
    assert not any((rt.home / "build" / "tmp").glob(f"{ident}-*"))


def test_a_buildable_toolkit_verifies_and_builds(make_toolkit, make_runtime):
    _kit(make_toolkit, "fine", "path:src/main.wat", "wat")
    rt = make_runtime()
    assert buildable.refusals(rt, rt.toolkit("fine").manifest) == []
    assert rt.verify("fine").ok
    assert builder.build(rt, "fine").kind == "command"


def test_verify_rehashes_a_registered_artifact(make_runtime, wbx, tmp_path):
    root = tmp_path / "kits"
    shutil.copytree(TOOLKITS / "b64", root / "b64")
    rt = make_runtime(roots=[root])
    res = builder.build(rt, "b64")
    report = rt.verify("b64")
    assert report.ok and any(c.area == "artifact" and c.ok for c in report.checks), report.render()
    path = rt.artifacts.path(res.sha256)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    r = wbx("toolkit", "verify", "b64", runtime=make_runtime(roots=[root]))
    assert r.exit_code == 1
    assert "✗ artifact: command 'b64': artifact" in r.stdout and "does not match its sha256" in r.stdout
    assert "wbx toolkit build b64" in r.stdout
    builder.build(rt, "b64")  # the rebuild rewrites the damaged file
    assert make_runtime(roots=[root]).verify("b64").ok


def test_a_registered_toolkit_whose_lane_went_away_warns(make_toolkit, make_runtime):
    _kit(make_toolkit, "gone", "path:src/main.wat", "wat")
    rt = make_runtime()
    builder.build(rt, "gone")
    manifest = rt.toolkit("gone").dir / "manifest.org"
    manifest.write_text(manifest.read_text().replace("#+BUILD_LANG: wat", "#+BUILD_LANG: frob"))
    rt2 = make_runtime()
    rt2.register_plugin(NoLanePlugin(), name="nolane")
    lines = [c for c in rt2.verify("gone").checks if c.area == "build"]
    assert (lines and lines[0].warning
            and "a rebuild would be refused: lane frob is not available here" in lines[0].message)


def test_build_all_one_line_each_goes_on_past_failures(make_toolkit, make_runtime, wbx):
    import json

    _kit(make_toolkit, "aaa-good", "path:src/main.wat", "wat")
    _kit(make_toolkit, "bbb-bad-flag", "path:src", "c", BUILD_FLAGS="--sysroot=/etc")
    _kit(make_toolkit, "ccc-no-lane", "path:src", "frob")
    _kit(make_toolkit, "ddd-good", "path:src/main.wat", "wat")
    make_toolkit("eee-docs-only")
    rt = make_runtime()
    rt.register_plugin(NoLanePlugin(), name="nolane")
    r = wbx("toolkit", "build", "--all", runtime=rt)
    assert r.exit_code == 1, r.stderr
    lines = r.stdout.splitlines()
    assert ([ln.split(":")[0] for ln in lines[:4]]
            == ["✓ aaa-good", "✗ bbb-bad-flag", "- ccc-no-lane", "✓ ddd-good"])
    assert "flag '--sysroot=/etc' is not allowed" in lines[1] and "needs the frobnicator" in lines[2]
    # the same source and lane, but two toolkits: the cache key carries the toolkit id, so
    # no build is shared between toolkits (wbcore_runtime.build.cache); a second --all is all hits
    assert lines[4] == "4 buildable toolkit(s): 2 built, 0 cached, 1 skipped, 1 failed"
    rows = json.loads(wbx("toolkit", "build", "--all", "--json", runtime=rt).stdout)
    assert [(row["toolkit"], row["state"]) for row in rows] == [
        ("aaa-good", "cached"), ("bbb-bad-flag", "failed"), ("ccc-no-lane", "skipped"),
        ("ddd-good", "cached")]
    assert rt.registry.lookup("command", "ddd-good") is not None
    assert wbx("toolkit", "build", "--all", "aaa-good", runtime=rt).exit_code == 2
    assert wbx("toolkit", "build", runtime=rt).exit_code == 2
