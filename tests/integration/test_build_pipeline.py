"""The one build pipeline: the one cache key, what it covers, the poisoning scenario, and
progress on the CLI (a test lane stands in for a compiler)."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

from wbcore_runtime.build import builder
from wbcore_runtime import hookimpl
from wbcore_runtime.build import BuildOutput, BuildRequest, cache, pipeline, products
from wbcore_runtime.contract.records import BuildLane

REPO = Path(__file__).resolve().parents[2]


def _wasm(payload: bytes) -> bytes:
    """A valid empty module carrying ``payload`` in a custom section named ``src``."""
    body = b"\x03src" + payload
    size, n = b"", len(body)
    while True:
        byte, n = n & 0x7F, n >> 7
        size += bytes([byte | (0x80 if n else 0)])
        if not n:
            break
    return b"\0asm\x01\0\0\0" + b"\x00" + size + body


def payload(wasm: bytes) -> bytes:
    return wasm[wasm.index(b"\x03src") + 4:]


class PyishDriver:
    """Emulates CPython's loader: bytecode in ``__pycache__`` wins over the source, as a
    real interpreter would use it — so only the cache key stands between toolkits."""

    version = "pyish 1.0"

    def __init__(self, sleep: float = 0.0) -> None:
        self.sleep = sleep

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        assert src is not None
        if request.progress:
            request.progress("pyish: compiling app.py")
        time.sleep(self.sleep)
        code = (src / "app.py").read_bytes()
        cached = sorted((src / "__pycache__").glob("app.*.pyc")) if (src / "__pycache__").is_dir() else []
        if cached:
            code = cached[0].read_bytes()
        out = request.outdir / "app.wasm"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(_wasm(code + b"|" + (request.manifest.extra("PY_MODULE") or "app").encode()))
        return BuildOutput(artifact=out, log="pyish built\n")


def pyish_lane(sleep: float = 0.0) -> object:
    class Lane:
        @hookimpl
        def wbcore_build_lanes(self):
            yield BuildLane(name="pyish", summary="a test lane", where="in-process test lane",
                            factory=lambda rt: PyishDriver(sleep), output_fields=("PY_MODULE",))

    return Lane()


def pyish_toolkit(make_toolkit, ident: str, *, app: bytes = b"print('victim')\n",
                  extra_files: dict[str, bytes] | None = None, module: str | None = None) -> Path:
    fields = {"BUILD_LANG": "pyish", "BUILD_SRC": "path:src", "CLI_BIN": ident}
    if module:
        fields["PY_MODULE"] = module
    return make_toolkit(ident, exec="command", extra=fields, files={"src/app.py": app, **(extra_files or {})})


@pytest.fixture
def rt_factory(make_runtime):
    def make(sleep: float = 0.0):
        return make_runtime(plugins=["sources", pyish_lane(sleep)])

    return make


# --- the one key --------------------------------------------------------------------


def _sha256_of_json(node: ast.AST) -> bool:
    """``sha256(... json.dumps(...) ...)``: the shape of a cache-key recipe."""
    if not isinstance(node, ast.Call):
        return False
    fn = node.func
    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
    if name != "sha256":
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "dumps":
            return True
    return False


def test_no_second_cache_key_recipe_exists() -> None:
    """Only wbcore_runtime/build/cache.py hashes a JSON of build inputs; the BuildBroker and the
    built-ins go through the pipeline (and so through ``cache.key``)."""
    files = [p for p in (REPO / "wbcore_runtime").rglob("*.py")]
    files += [p for p in (REPO / "plugins").glob("*/wbcore_*/**/*.py") if "vendor" not in p.parts]
    # Content addresses of other things than builds (each named, with what it addresses):
    not_builds = {
        REPO / "wbcore_runtime" / "build" / "cache.py",  # the build-cache key itself
        # the container root's recipe
        REPO / "plugins" / "wbcore-container" / "wbcore_container" / "rootfs.py",
        # the micro-VM guest image's recipe
        REPO / "plugins" / "wbcore-microvm" / "wbcore_microvm" / "image.py",
        # a saved VM layer's identity
        REPO / "plugins" / "wbcore-microvm" / "wbcore_microvm" / "snapshots.py",
    }
    offenders = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if _sha256_of_json(node) and path not in not_builds:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
    broker = (REPO / "plugins/wbcore-brokers-build/wbcore_brokers_build/broker.py").read_text()
    builtins = (REPO / "plugins/wbcore-lane-zig/wbcore_lane_zig/builtins/__init__.py").read_text()
    builder_src = (REPO / "wbcore_runtime/build/builder.py").read_text()
    assert "pipeline.compile_source(" in broker and "pipeline.compile_source(" in builtins
    assert "pipeline.cache_key(" in builtins and "pipeline.compile_source(" in builder_src
    pipeline_src = (REPO / "wbcore_runtime/build/pipeline.py").read_text()
    assert "cache.key(" in pipeline_src


def test_tree_digest_covers_every_byte_the_sandbox_shows(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "app.py").write_text("print('x')\n")
    base = cache.tree_digest(src)
    seen = {base}
    for rel, content in [("__pycache__/app.cpython-313.pyc", b"evil"), (".git/HEAD", b"ref"),
                         ("pkg/__pycache__/m.pyc", b"evil2"), ("deep/.git/x", b"y")]:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(content)
        d = cache.tree_digest(src)
        assert d not in seen, rel
        seen.add(d)
    (src / "empty").mkdir()
    assert cache.tree_digest(src) not in seen
    (src / "linkdir").symlink_to("pkg", target_is_directory=True)  # a folder link: recorded, not walked
    assert cache.tree_digest(src) not in seen


def test_key_moves_with_every_input() -> None:
    base = {"lane": "python", "version": "componentize-py 1", "source_digest": "a" * 64, "flags": ("-O2",),
            "entry": None, "fields": {"PY_MODULE": "app", "WASI": None}}
    k = cache.key(**base)
    assert k == cache.key(**base)
    variants = [{"lane": "c"}, {"version": "componentize-py 2"}, {"source_digest": "b" * 64},
                {"flags": ("-O3",)},
                {"flags": ()}, {"entry": "app.py"}, {"fields": {"PY_MODULE": "other", "WASI": None}},
                {"fields": {"PY_MODULE": "app", "WASI": "p2"}}, {"fields": {"PY_MODULE": "app"}}]
    keys = {cache.key(**(base | v)) for v in variants}
    assert k not in keys and len(keys) == len(variants)


def test_products_refusal_names_the_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "libx.so.1").write_bytes(b"\x7fELF")
    with pytest.raises(products.BuildProductInSource, match=r"'lib/libx.so.1'.*#\+BUILD_OBJECTS"):
        products.refuse(src, lane="c", suffixes=products.NATIVE_PRODUCTS[1],
                        hint=", or list it in #+BUILD_OBJECTS if it is meant to be there")
    products.refuse(src, lane="c", suffixes=products.NATIVE_PRODUCTS[1], declared=["lib/libx.so.1"])
    (src / "__pycache__").mkdir()
    with pytest.raises(products.BuildProductInSource, match=r"python lane: .*folder '__pycache__'"):
        products.refuse(src, lane="python", dirs=products.PYTHON_PRODUCTS[0],
                        suffixes=products.PYTHON_PRODUCTS[1])
    (src / "__pycache__").rmdir()
    (src / "stale.pyc").write_bytes(b"\x00")
    with pytest.raises(products.BuildProductInSource, match=r"file 'stale.pyc'"):
        products.refuse(src, lane="python", dirs=products.PYTHON_PRODUCTS[0],
                        suffixes=products.PYTHON_PRODUCTS[1])


# --- the poisoning scenario through the pipeline ------------------------------------


def test_bytecode_beside_the_same_source_is_never_a_cache_hit(rt_factory, make_toolkit) -> None:
    """The attacker ships the victim's app.py plus a crafted __pycache__/*.pyc. Even with a
    lane that loads the bytecode (as CPython would), the victim's build is its own."""
    pyish_toolkit(make_toolkit, "attacker", extra_files={"src/__pycache__/app.cpython-313.pyc": b"EVIL"})
    pyish_toolkit(make_toolkit, "victim")
    rt = rt_factory()
    bad = builder.build(rt, "attacker")
    assert payload(rt.artifacts.path(bad.sha256).read_bytes()).startswith(b"EVIL")
    good = builder.build(rt, "victim")
    assert not good.cached and good.sha256 != bad.sha256
    assert payload(rt.artifacts.path(good.sha256).read_bytes()) == b"print('victim')\n|app"
    assert builder.build(rt, "victim").cached  # its own build is a hit


def test_bytecode_appearing_in_the_same_toolkit_rebuilds(rt_factory, make_toolkit) -> None:
    tk = pyish_toolkit(make_toolkit, "same")
    rt = rt_factory()
    first = builder.build(rt, "same")
    (tk / "src" / "__pycache__").mkdir()
    (tk / "src" / "__pycache__" / "app.cpython-313.pyc").write_bytes(b"EVIL")
    second = builder.build(rt, "same")
    assert not second.cached and second.sha256 != first.sha256


def test_an_output_field_change_rebuilds(rt_factory, make_toolkit, toolkit_root: Path) -> None:
    pyish_toolkit(make_toolkit, "mod", module="app")
    rt = rt_factory()
    first = builder.build(rt, "mod")
    assert builder.build(rt, "mod").cached
    pyish_toolkit(make_toolkit, "mod", module="app2")
    second = builder.build(rt_factory(), "mod")
    assert not second.cached and second.sha256 != first.sha256


def test_pipeline_reports_lane_progress(rt_factory, make_toolkit) -> None:
    pyish_toolkit(make_toolkit, "talk")
    seen: list[tuple[str, str]] = []
    builder.build(rt_factory(), "talk", progress=lambda p, d: seen.append((p, d)))
    assert ("compile", "pyish: compiling app.py") in seen  # the lane's own line reached the caller
    assert [p for p, _ in seen if p in pipeline.PHASES][:1] == ["resolve"]
    assert {"resolve", "compile", "store", "register"} <= {p for p, _ in seen}


# --- progress on the CLI ------------------------------------------------------------


def test_json_streams_one_event_per_line(rt_factory, make_toolkit, wbx) -> None:
    pyish_toolkit(make_toolkit, "stream")
    r = wbx("toolkit", "build", "stream", "--json", runtime=rt_factory())
    assert r.exit_code == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    phases = events[:-1]
    assert phases and all(set(e) == {"event", "phase", "detail", "elapsed"} and e["event"] == "phase"
                          for e in phases)
    assert ("compile", "pyish: compiling app.py") in {(e["phase"], e["detail"]) for e in phases}
    assert [e["elapsed"] for e in phases] == sorted(e["elapsed"] for e in phases)
    assert (events[-1]["event"] == "result" and events[-1]["name"] == "stream"
            and len(events[-1]["sha256"]) == 64)


def test_a_long_phase_ticks_on_a_tty(rt_factory, make_toolkit, wbx, monkeypatch) -> None:
    """A lane step of 12 s prints its phase with the elapsed time at least twice."""
    from wbcore_cli import build as cli_build

    monkeypatch.setattr(cli_build, "interactive", lambda: True)
    pyish_toolkit(make_toolkit, "slow")
    r = wbx("toolkit", "build", "slow", runtime=rt_factory(sleep=12.0))
    assert r.exit_code == 0, r.stderr
    lines = r.stderr.splitlines()
    start = next(i for i, ln in enumerate(lines) if "pyish: compiling app.py" in ln)
    end = next(i for i, ln in enumerate(lines) if " store " in ln)
    ticks = [ln for ln in lines[start + 1:end] if "compile" in ln and "still working" in ln]
    assert len(ticks) >= 2, r.stderr


def test_not_a_tty_prints_phase_lines_only(rt_factory, make_toolkit, wbx) -> None:
    pyish_toolkit(make_toolkit, "quiet")
    r = wbx("toolkit", "build", "quiet", runtime=rt_factory(sleep=5.0))
    assert r.exit_code == 0 and "still working" not in r.stderr and "pyish: compiling" in r.stderr


def test_manifest_fields_read_keywords_and_core_fields(tmp_path: Path) -> None:
    from wbcore_runtime.toolkit.manifest import parse
    from wbcore_testing.fixtures import manifest_text

    m = parse(manifest_text("kern", exec="kernel",
                            extra={"CLI_BIN": "k", "KERNEL_ENTRY": "run", "PY_MODULE": "app"}),
              tmp_path / "manifest.org")
    got = cache.manifest_fields(m, (*cache.ALWAYS_FIELDS, "PY_MODULE", "WASI"))
    assert got["CLI_BIN"] == "k" and got["ID"] == "kern" and got["EXEC"] == "kernel"
    assert got["KERNEL_ENTRY"] == "run" and got["PY_MODULE"] == "app" and got["WASI"] is None
