"""The python lane: argv/sandbox contract (fast) and a real componentize-py build (slow)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wbcore.build import BuildRequest, ResolvedSource
from wbcore.errors import InvalidArgs, NotFound
from wbcore.manifest import parse
from wbcore.testing import manifest_text

pytest.importorskip("componentize_py")

from wb_lane_python.lane import PythonLane, check  # noqa: E402

SHIPPED = Path(__file__).parents[3] / "toolkits" / "text-tools"


def _request(tk: Path, tmp_path: Path, **extra: str) -> BuildRequest:
    fields = {"BUILD_LANG": "python", "BUILD_SRC": "path:src", "WIT": "src/wit"} | extra
    m = parse(manifest_text("pykit", exec="component", extra=fields), tk / "manifest.org")
    return BuildRequest(manifest=m, source=ResolvedSource(digest="0" * 64, dir=tk / "src"), outdir=tmp_path / "out")


@pytest.fixture
def pykit(tmp_path: Path) -> Path:
    tk = tmp_path / "pykit"
    shutil.copytree(SHIPPED / "src", tk / "src")
    return tk


def test_available_names_the_version() -> None:
    assert check().ok and "componentize-py" in check().reason


def test_argv_stubs_wasi_unless_asked(make_runtime, pykit: Path, tmp_path: Path) -> None:
    lane = PythonLane(make_runtime(plugins=["lane-python"]))
    argv, src = lane.argv(_request(pykit, tmp_path, WIT_WORLD="text-tools"))
    assert argv[-2:] == ["--stub-wasi", "app"] and ["-w", "text-tools"] == argv[argv.index("-w"):argv.index("-w") + 2]
    assert argv[argv.index("-d") + 1] == "/src/wit" and src == pykit.joinpath("src").resolve()
    argv, _ = lane.argv(_request(pykit, tmp_path, WASI="p2"))
    assert "--stub-wasi" not in argv


def test_a_wit_folder_linked_out_of_the_toolkit_is_refused(pykit: Path, tmp_path: Path) -> None:
    import os

    outside = tmp_path / "outside-wit"
    shutil.copytree(pykit / "src" / "wit", outside)
    os.symlink(outside, pykit / "linked-wit")
    with pytest.raises(InvalidArgs, match="linked-wit: symlink to a path outside the toolkit root"):
        PythonLane().argv(_request(pykit, tmp_path, WIT="linked-wit"))


@pytest.mark.parametrize("extra, match", [
    ({"WIT": "../elsewhere"}, "escapes"),
    ({"WIT": "nowit"}, "inside the BUILD_SRC|does not exist"),
    ({"PY_MODULE": "os.system"}, "not a module name"),
    ({"PY_MODULE": "missing"}, "not found"),
    ({"WIT_WORLD": "Bad World"}, "not a world name"),
])
def test_bad_manifests_are_refused_before_anything_runs(make_runtime, pykit: Path, tmp_path: Path, extra,
                                                        match) -> None:
    (pykit / "nowit").mkdir()
    with pytest.raises(InvalidArgs, match=match):
        PythonLane(make_runtime(plugins=["lane-python"])).argv(_request(pykit, tmp_path, **extra))


def test_without_a_build_sandbox_the_lane_says_what_to_install(make_runtime, wbx, pykit: Path, tmp_path: Path) -> None:
    rt = make_runtime(plugins=["lane-python"])  # the lane alone with the core: no plugin serves a sandbox
    avail = rt.lanes.get("python").availability(rt)
    assert not avail.ok and "no build sandbox is installed; pip install wb-process" in avail.reason
    r = wbx("lanes", runtime=rt)
    assert r.exit_code == 0 and "no build sandbox is installed; pip install wb-process" in r.stdout
    with pytest.raises(NotFound, match="^no build sandbox is installed; pip install wb-process$"):
        rt.lanes.get("python").factory(rt).build(_request(pykit, tmp_path, WIT_WORLD="text-tools"))


@pytest.mark.slow
def test_shipped_toolkit_builds_in_the_sandbox_and_answers(make_runtime, build_sandbox, tmp_path: Path) -> None:
    for needed in ("wb_sources", "wb_wasmtime"):  # the cross-plugin path: path: source, component shape
        pytest.importorskip(needed)
    from wbcore.builder import build

    rt = make_runtime(roots=[SHIPPED.parent])
    result = build(rt, "text-tools")
    assert result.kind == "component" and result.entry.shape == "component"
    again = build(rt, "text-tools")
    assert again.cached and again.sha256 == result.sha256

    from wbcore.act.provider import ToolkitProvider

    provider = ToolkitProvider(rt, only=["text-tools"])
    assert set(provider.tools()) == {"text-tools.count", "text-tools.top-words", "text-tools.slugify", "text-tools.wrap"}
    out = provider.call_json("text-tools.count", {"text": "one two\nthree"})
    assert out.structured == {"lines": 2, "words": 3, "chars": 13}
    out = provider.call_json("text-tools.top-words", {"text": "The cat the dog THE end", "n": 2})
    assert out.structured == [{"word": "the", "count": 3}, {"word": "cat", "count": 1}]
    assert provider.call_json("text-tools.slugify", {"text": "Héllo, Wörld!"}).structured == "hello-world"
    bad = provider.call_json("text-tools.wrap", {"text": "x", "width": 3})
    assert bad.error is not None and "outside 10..400" in bad.error.text


@pytest.mark.slow
def test_a_broken_app_fails_with_the_python_error_in_the_log(make_runtime, build_sandbox, toolkit_root: Path) -> None:
    pytest.importorskip("wb_sources")
    from wbcore.build import BuildFailed
    from wbcore.builder import build

    tk = toolkit_root / "broken"
    shutil.copytree(SHIPPED / "src", tk / "src")
    (tk / "src" / "app.py").write_text("import wit_world\n\nclass WitWorld(wit_world.WitWorld:\n    pass\n")
    (tk / "skills").mkdir()
    (tk / "skills" / "overview.org").write_text("#+TITLE: broken\n\nA broken app.\n")
    (tk / "manifest.org").write_text(manifest_text("broken", exec="component", extra={
        "BUILD_LANG": "python", "BUILD_SRC": "path:src", "WIT": "src/wit", "WIT_WORLD": "text-tools"}))
    rt = make_runtime()
    with pytest.raises(BuildFailed) as info:
        build(rt, "broken")
    assert "SyntaxError" in info.value.log
    assert rt.registry.lookup("component", "broken") is None
