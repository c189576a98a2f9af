"""The python lane: argv/sandbox contract (fast) and a real componentize-py build (slow)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wbcore_runtime.build import BuildRequest, ResolvedSource
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.toolkit.manifest import parse
from wbcore_testing.fixtures import manifest_text

pytest.importorskip("componentize_py")

from wbcore_lane_python.lane import PythonLane, check  # noqa: E402

SHIPPED = Path(__file__).parents[3] / "toolkits" / "text-tools"


def _request(tk: Path, tmp_path: Path, **extra: str) -> BuildRequest:
    fields = {"BUILD_LANG": "python", "BUILD_SRC": "path:src", "WIT": "src/wit"} | extra
    m = parse(manifest_text("pykit", exec="component", extra=fields), tk / "manifest.org")
    return BuildRequest(manifest=m, source=ResolvedSource(digest="0" * 64, dir=tk / "src"),
                        outdir=tmp_path / "out")


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
    assert (argv[-2:] == ["--stub-wasi", "app"]
            and ["-w", "text-tools"] == argv[argv.index("-w"):argv.index("-w") + 2])
    assert argv[argv.index("-d") + 1] == "/src/wit" and src == pykit.joinpath("src").resolve()
    argv, _ = lane.argv(_request(pykit, tmp_path, WASI="p2"))
    assert "--stub-wasi" not in argv


def test_a_wit_folder_linked_out_of_the_toolkit_is_refused(make_runtime, pykit: Path, tmp_path: Path) -> None:
    import os

    outside = tmp_path / "outside-wit"
    shutil.copytree(pykit / "src" / "wit", outside)
    os.symlink(outside, pykit / "linked-wit")
    with pytest.raises(InvalidArgs, match="linked-wit: symlink to a path outside the toolkit root"):
        PythonLane(make_runtime(plugins=["lane-python"])).argv(_request(pykit, tmp_path, WIT="linked-wit"))


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


def test_without_a_build_sandbox_the_lane_says_what_to_install(make_runtime, wbx, pykit: Path,
                                                               tmp_path: Path) -> None:
    rt = make_runtime(plugins=["lane-python"])  # the lane alone with the core: no plugin serves a sandbox
    avail = rt.lanes.get("python").availability(rt)
    assert not avail.ok and "no build sandbox is installed; pip install wbcore-process" in avail.reason
    r = wbx("lanes", runtime=rt)
    assert r.exit_code == 0 and "no build sandbox is installed; pip install wbcore-process" in r.stdout
    with pytest.raises(NotFound, match="^no build sandbox is installed; pip install wbcore-process$"):
        rt.lanes.get("python").factory(rt).build(_request(pykit, tmp_path, WIT_WORLD="text-tools"))


@pytest.mark.slow
def test_shipped_toolkit_builds_in_the_sandbox_and_answers(make_runtime, build_sandbox,
                                                           tmp_path: Path) -> None:
    # the cross-plugin path: path: source, component shape
    for needed in ("wbcore_sources", "wbcore_wasmtime"):
        pytest.importorskip(needed)
    from wbcore_runtime.build.builder import build

    rt = make_runtime(roots=[SHIPPED.parent])
    result = build(rt, "text-tools")
    assert result.kind == "component" and result.entry.shape == "component"
    again = build(rt, "text-tools")
    assert again.cached and again.sha256 == result.sha256

    from wbcore_runtime.contract import tools

    provider = tools.service(rt).provider(only=["text-tools"])
    assert set(provider.tools()) == {"text-tools.count", "text-tools.top-words", "text-tools.slugify",
                                     "text-tools.wrap"}
    out = provider.call_json("text-tools.count", {"text": "one two\nthree"})
    assert out.structured == {"lines": 2, "words": 3, "chars": 13}
    out = provider.call_json("text-tools.top-words", {"text": "The cat the dog THE end", "n": 2})
    assert out.structured == [{"word": "the", "count": 3}, {"word": "cat", "count": 1}]
    assert provider.call_json("text-tools.slugify", {"text": "Héllo, Wörld!"}).structured == "hello-world"
    bad = provider.call_json("text-tools.wrap", {"text": "x", "width": 3})
    assert bad.error is not None and "outside 10..400" in bad.error.text


@pytest.mark.slow
def test_a_broken_app_fails_with_the_python_error_in_the_log(make_runtime, build_sandbox,
                                                             toolkit_root: Path) -> None:
    pytest.importorskip("wbcore_sources")
    from wbcore_runtime.build import BuildFailed
    from wbcore_runtime.build.builder import build

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


# --- the cache-poisoning scenario and module code at build time (issue 11) -----------------


def test_bytecode_in_the_source_is_refused_naming_the_file(make_runtime, pykit: Path, tmp_path: Path) -> None:
    """Fast: the lane refuses before anything runs, naming the .pyc (CPython would load it)."""
    from wbcore_runtime.build.products import BuildProductInSource

    lane = PythonLane(make_runtime(plugins=["lane-python"]))
    (pykit / "src" / "__pycache__").mkdir()
    (pykit / "src" / "__pycache__" / "app.cpython-313.pyc").write_bytes(b"\xf3\r\r\n" + b"\0" * 12)
    with pytest.raises(BuildProductInSource, match=r"python lane: .*'__pycache__/app.cpython-313.pyc'"):
        lane.argv(_request(pykit, tmp_path, WIT_WORLD="text-tools"))
    shutil.rmtree(pykit / "src" / "__pycache__")
    (pykit / "src" / "helper.pyc").write_bytes(b"\0")
    with pytest.raises(BuildProductInSource, match=r"'helper.pyc'"):
        lane.argv(_request(pykit, tmp_path, WIT_WORLD="text-tools"))


def test_the_key_declares_the_lanes_output_fields(make_runtime) -> None:
    rec = make_runtime(plugins=["lane-python"]).lanes.get("python")
    assert {"PY_MODULE", "WIT_WORLD", "WASI"} <= set(rec.output_fields)


def _text_tools(root: Path, ident: str, app: str | None = None) -> Path:
    tk = root / ident
    shutil.copytree(SHIPPED / "src", tk / "src")
    if app is not None:
        (tk / "src" / "app.py").write_text(app)
    (tk / "skills").mkdir()
    (tk / "skills" / "overview.org").write_text(f"#+TITLE: {ident}\n\nText tools, a copy.\n")
    (tk / "manifest.org").write_text(manifest_text(ident, exec="component", extra={
        "BUILD_LANG": "python", "BUILD_SRC": "path:src", "WIT": "src/wit", "WIT_WORLD": "text-tools",
        "PY_MODULE": "app"}))
    return tk


@pytest.mark.slow
def test_poisoned_bytecode_is_refused_and_never_served_to_the_victim(make_runtime, build_sandbox,
                                                                    toolkit_root: Path) -> None:
    """Acceptance (issue 11): two toolkits with the same app.py, the attacker's also carrying
    a crafted __pycache__/app.cpython-*.pyc. Build attacker then victim: the attacker's build
    is refused naming the .pyc; the victim's is no cache hit of anything the attacker made,
    and its call answers with the victim's code."""
    import py_compile
    import sys

    for needed in ("wbcore_sources", "wbcore_wasmtime"):
        pytest.importorskip(needed)
    from wbcore_runtime.contract import tools
    from wbcore_runtime.build.products import BuildProductInSource
    from wbcore_runtime.build.builder import build

    attacker = _text_tools(toolkit_root, "attacker")
    _text_tools(toolkit_root, "victim")
    evil = toolkit_root / "evil.py"
    evil.write_text((SHIPPED / "src" / "app.py").read_text().replace(
        'return "-".join(re.findall(r"[a-z0-9]+", ascii_text.lower()))', 'return "pwned"'))
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    py_compile.compile(str(evil), cfile=str(attacker / "src" / "__pycache__" / f"app.{tag}.pyc"),
                       doraise=True)
    rt = make_runtime()
    with pytest.raises(BuildProductInSource, match=rf"'__pycache__/app\.{tag}\.pyc'"):
        build(rt, "attacker")
    assert rt.registry.lookup("component", "attacker") is None
    victim = build(rt, "victim")
    assert not victim.cached
    out = tools.service(rt).provider(only=["victim"]).call_json("victim.slugify", {"text": "Hello World"})
    assert out.structured == "hello-world"


HOST_PROBE = '''
"""Module top level runs at build time (componentize-py pre-initializes the app): it
records what it can see of the host, and slugify returns it."""
import os

import wit_world

SEEN = []
for path in ("/etc/shadow", "/etc/passwd", os.path.expanduser("~/.ssh/id_rsa"), "/root/.ssh/id_rsa",
             os.environ.get("WB_HOME", "/nonexistent") + "/secret.txt"):
    try:
        with open(path, "rb") as fh:
            SEEN.append("READ " + path + " " + repr(fh.read(40)))
    except Exception as exc:
        SEEN.append("no " + path + " " + type(exc).__name__)
SEEN.append("env " + ",".join(sorted(k for k in os.environ if k.startswith(("WB_", "HOME", "SSH")))))
try:
    SEEN.append("ls / " + ",".join(sorted(os.listdir("/"))))
except Exception as exc:
    SEEN.append("ls / " + type(exc).__name__)


class WitWorld(wit_world.WitWorld):
    def count(self, text):
        return wit_world.Counts(lines=0, words=0, chars=0)

    def top_words(self, text, n):
        return []

    def slugify(self, text):
        return " | ".join(SEEN)

    def wrap(self, text, width):
        return text
'''


@pytest.mark.slow
def test_module_code_at_build_time_sees_no_host(make_runtime, build_sandbox, toolkit_root: Path,
                                                 wb_home: Path, monkeypatch) -> None:
    """componentize-py imports the module while building: its top level reads nothing of
    the host ($WB_HOME, ~/.ssh, /etc/shadow) — it runs inside wasmtime, in the sandbox."""
    for needed in ("wbcore_sources", "wbcore_wasmtime"):
        pytest.importorskip(needed)
    from wbcore_runtime.contract import tools
    from wbcore_runtime.build import BuildFailed
    from wbcore_runtime.build.builder import build

    (wb_home / "secret.txt").write_text("HOST-SECRET-PY\n")  # a real file in $WB_HOME the probe asks for
    _text_tools(toolkit_root, "probe", app=HOST_PROBE)
    monkeypatch.setenv("WB_HOME", str(wb_home))  # the building process has it: the build must not
    rt = make_runtime(env={"WB_HOME": str(wb_home), "HOME": str(Path.home())})
    try:
        build(rt, "probe")
    except BuildFailed as exc:  # refused inside the sandbox: also a pass, as long as nothing leaked
        assert "root:" not in exc.log and "HOST-SECRET-PY" not in exc.log
        return
    seen = tools.service(rt).provider(only=["probe"]).call_json("probe.slugify", {"text": ""}).structured
    assert "READ" not in seen and "root:" not in seen and "HOST-SECRET-PY" not in seen, seen
    assert "no /etc/shadow" in seen, seen
    env = next(part for part in seen.split(" | ") if part.startswith("env "))
    assert "WB_HOME" not in env and "SSH" not in env, seen
