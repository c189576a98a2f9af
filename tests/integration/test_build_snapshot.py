"""What was verified is what runs: every lane compiles a private snapshot of its inputs.

The races of issue 22, made deterministic by a hook at the lane's start (the moment the
lane reads its source and starts the build sandbox) and at its end:

- a concurrent writer swaps the source while the compiler runs and swaps it back before
  the post-build check: the artifact must still be the one its cache key (the snapshot's
  digest) names, and a clean copy of the toolkit in another root, served from the cache,
  must run that same benign code;
- ``src/`` swapped for a symlink to a host folder when the sandbox starts: nothing of that
  folder may reach the artifact;
- a writer that swaps the source while the toolkit is being copied is caught by the
  copy's check against the provenance digest (the build is refused, nothing registers).

Each is run for the c, c-wasm, zig, go, js, ts, rust and python lanes (skipped where a
lane's toolchain is missing).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from wbcore_runtime.build import builder
from wbcore_runtime.build import BuildRequest, cache, snapshot
from wbcore_runtime.contract.errors import WbError
from wbcore_testing.fixtures import manifest_text

BENIGN, EVIL, SECRET = "BENIGN-7f3a", "EVILX-19c2", "HOSTSECRET-55d1"

ZIG = """const std = @import("std");
pub fn main(init: std.process.Init) !u8 {
    var buf: [64]u8 = undefined;
    var w: std.Io.File.Writer = .init(.stdout(), init.io, &buf);
    try w.interface.writeAll("%s\\n");
    try w.interface.flush();
    return 0;
}
"""

#: The python lane builds a WIT component (componentize-py): the text-tools world, every
#: export answering with the marker, so the marker sits in the component's heap snapshot.
PYTHON = """import wit_world
from wit_world import Counts

MARK = "%s"


class WitWorld(wit_world.WitWorld):
    def count(self, text: str) -> Counts:
        return Counts(lines=0, words=0, chars=len(MARK))

    def top_words(self, text: str, n: int) -> list:
        return []

    def slugify(self, text: str) -> str:
        return MARK

    def wrap(self, text: str, width: int) -> str:
        return MARK
"""
TEXT_TOOLS_WIT = (Path(__file__).resolve().parents[2] / "toolkits" / "text-tools" / "src" / "wit"
                  / "world.wit")

#: lane → (source file, program printing the marker, other files)
SOURCES: dict[str, tuple[str, str, dict[str, str]]] = {
    "rust": ("main.rs", 'fn main() { println!("%s"); }\n', {}),
    "ts": ("main.ts", 'const mark: string = "%s";\nconsole.log(mark);\n', {}),
    "c-wasm": ("main.c", '#include <stdio.h>\nint main(void) { puts("%s"); return 0; }\n', {}),
    "python": ("app.py", PYTHON, {"wit/world.wit": TEXT_TOOLS_WIT.read_text()}),
    "c": ("main.c", '#include <stdio.h>\nint main(void) { puts("%s"); return 0; }\n', {}),
    "zig": ("main.zig", ZIG, {}),
    "go": ("main.go", 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("%s") }\n',
           {"go.mod": "module example.local/mark\n\ngo 1.21\n"}),
    "js": ("main.js", 'std.out.puts("%s\\n");\n', {}),
}
#: The zig lane warms its own cache on a fresh home (a minute or more) and componentize-py
#: takes ~15 s a build: marked slow.
SLOW_LANES = {"zig", "python"}
LANES = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_LANES else name for name in SOURCES]
#: Lanes whose artifact is a command the test runs; a component is checked by its bytes.
COMMANDS = {"c", "zig", "go", "js", "rust", "ts", "c-wasm"}


def write_source(folder: Path, lane: str, marker: str) -> None:
    name, text, others = SOURCES[lane]
    folder.mkdir(parents=True, exist_ok=True)
    for rel, content in others.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(content)
    (folder / name).write_text(text % marker)


def make_toolkit(root: Path, lane: str, ident: str) -> Path:
    tk = root / ident
    tk.mkdir(parents=True)
    if lane == "python":
        (tk / "manifest.org").write_text(manifest_text(ident, exec="component", extra={
            "BUILD_LANG": lane, "BUILD_SRC": "path:src", "WIT": "src/wit", "WIT_WORLD": "text-tools",
            "PY_MODULE": "app"}))
    else:
        (tk / "manifest.org").write_text(manifest_text(
            ident, exec="command", extra={"BUILD_LANG": lane, "BUILD_SRC": "path:src", "CLI_BIN": ident},
            drawer={"CLI_BIN": ident}))
    write_source(tk / "src", lane, BENIGN)
    return tk


@pytest.fixture
def lane_runtime(make_runtime: Callable[..., Any], tmp_path: Path) -> Callable[[str, Path], Any]:
    def make(lane: str, root: Path) -> Any:
        rt = make_runtime(roots=[root], env={"PATH": os.environ.get("PATH", "")})
        if lane not in rt.lanes.names():
            pytest.skip(f"lane {lane} is not installed")
        avail = rt.lanes.get(lane).availability(rt)
        if not avail.ok:
            pytest.skip(f"lane {lane} is unavailable here: {avail.reason}")
        return rt

    return make


@pytest.fixture
def around_lane(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[BuildRequest]]:
    """``around_lane(rt, lane, before, after)``: run ``before(request)`` when the lane's
    driver starts a build and ``after(request)`` when it returns (or fails); the requests
    the lane received are returned in a list."""

    def install(rt: Any, lane: str, before: Callable[[BuildRequest], None],
                after: Callable[[BuildRequest], None]) -> list[BuildRequest]:
        cls = type(rt.lanes.get(lane).factory(rt))
        original = cls.build
        seen: list[BuildRequest] = []

        def build(self: Any, request: BuildRequest) -> Any:
            seen.append(request)
            before(request)
            try:
                return original(self, request)
            finally:
                after(request)

        monkeypatch.setattr(cls, "build", build)
        return seen

    return install


def call_stdout(rt: Any, name: str) -> bytes:
    out = rt.call(name, [], b"")
    assert out.exit_code == 0, out.stderr
    return bytes(out.stdout)


def runs_benign(rt: Any, lane: str, name: str, sha256: str) -> None:
    """The built code is the benign one: a command prints the benign marker; a component
    (python) carries it in its bytes, and the evil and host markers in neither."""
    if lane in COMMANDS:
        assert call_stdout(rt, name) == f"{BENIGN}\n".encode()
        return
    art = rt.artifacts.path(sha256).read_bytes()
    assert BENIGN.encode() in art and EVIL.encode() not in art and SECRET.encode() not in art


def cache_record(rt: Any, artifact: str) -> dict[str, Any]:
    records = [json.loads(p.read_text()) for p in (rt.home / "build" / "cache").glob("*.json")]
    mine = [r for r in records if r["sha256"] == artifact]
    assert len(mine) == 1, records
    return mine[0]


@pytest.mark.parametrize("lane", LANES)
def test_a_writer_during_the_compile_cannot_poison_the_cache(lane: str, tmp_path: Path, lane_runtime,
                                                             around_lane) -> None:
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    tk = make_toolkit(root_a, lane, "victim")
    rt = lane_runtime(lane, root_a)
    name = SOURCES[lane][0]
    live = tk / "src" / name

    def swap_in(request: BuildRequest) -> None:
        # in place, same inode: the writer the issue describes
        with open(live, "r+b") as fh:
            fh.truncate(0)
            fh.write((SOURCES[lane][1] % EVIL).encode())

    def swap_back(_request: BuildRequest) -> None:
        with open(live, "r+b") as fh:
            fh.truncate(0)
            fh.write((SOURCES[lane][1] % BENIGN).encode())

    seen = around_lane(rt, lane, swap_in, swap_back)
    done = builder.build(rt, "victim")
    assert len(seen) == 1 and not done.cached
    art = rt.artifacts.path(done.sha256).read_bytes()
    assert EVIL.encode() not in art
    runs_benign(rt, lane, "victim", done.sha256)
    compiled = seen[0].source.dir
    assert compiled is not None and not compiled.is_relative_to(tk)  # the lane was handed a snapshot
    # the key's source part is the snapshot's digest, which is the folder the toolkit verified as
    record = cache_record(rt, done.sha256)
    assert record["source"] == cache.tree_digest(tk / "src") and record["toolkit"] == "victim"
    # a clean copy of the same toolkit in another root is a cache hit, and runs the same benign code
    shutil.copytree(tk, root_b / "victim")
    rt_b = lane_runtime(lane, root_b)
    again = builder.build(rt_b, "victim")
    assert again.cached and again.sha256 == done.sha256
    runs_benign(rt_b, lane, "victim", again.sha256)


@pytest.mark.parametrize("lane", LANES)
def test_src_swapped_for_a_link_to_a_host_folder_at_sandbox_start(lane: str, tmp_path: Path, lane_runtime,
                                                                   around_lane) -> None:
    root = tmp_path / "roots"
    tk = make_toolkit(root, lane, "linked")
    host = tmp_path / "host-folder"
    write_source(host, lane, SECRET)  # a world-readable host folder the compiler would happily build
    (host / "marker.txt").write_text(SECRET)
    for p in [host, *host.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    rt = lane_runtime(lane, root)
    src, aside = tk / "src", tk / "src.real"

    def to_link(_request: BuildRequest) -> None:
        os.rename(src, aside)
        src.symlink_to(host, target_is_directory=True)

    def back(_request: BuildRequest) -> None:
        src.unlink()
        os.rename(aside, src)

    around_lane(rt, lane, to_link, back)
    done = builder.build(rt, "linked")
    art = rt.artifacts.path(done.sha256).read_bytes()
    assert SECRET.encode() not in art
    runs_benign(rt, lane, "linked", done.sha256)


@pytest.mark.parametrize("lane", LANES)
def test_a_writer_during_the_copy_is_refused(lane: str, tmp_path: Path, lane_runtime,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap lands while the toolkit is being copied and is undone right after: the copy
    no longer matches the provenance digest, and nothing is built or registered."""
    root = tmp_path / "roots"
    tk = make_toolkit(root, lane, "racy")
    rt = lane_runtime(lane, root)
    live = tk / "src" / SOURCES[lane][0]
    original = snapshot.take

    def take(source: Path, dest: Path, **kw: Any) -> snapshot.Snapshot:
        if Path(source) == tk:
            live.write_text(SOURCES[lane][1] % EVIL)
            try:
                return original(source, dest, **kw)
            finally:
                live.write_text(SOURCES[lane][1] % BENIGN)
        return original(source, dest, **kw)

    monkeypatch.setattr(snapshot, "take", take)
    with pytest.raises(WbError, match="changed while it was being built"):
        builder.build(rt, "racy")
    assert rt.registry.lookup("command", "racy") is None


# --- the snapshot itself ----------------------------------------------------------------


def _tree(root: Path) -> Iterator[Path]:
    yield from sorted(root.rglob("*"))


def test_snapshot_is_read_only_and_keyed_by_what_it_holds(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "deep").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "a.c").write_text("int a;\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (src / "pkg" / "deep" / "b.h").write_text("#define B 1\n")
    (src / "pkg" / "to-deep").symlink_to("deep", target_is_directory=True)
    snap = snapshot.take(src, tmp_path / "snap")
    try:
        assert snap.digest == cache.tree_digest(snap.dir) == cache.tree_digest(src)
        assert sorted(p.relative_to(snap.dir) for p in _tree(snap.dir)) == sorted(
            p.relative_to(src) for p in _tree(src))
        for p in _tree(snap.dir):
            if not p.is_symlink():
                assert not os.stat(p).st_mode & 0o222, p
        if os.geteuid() != 0:  # root ignores modes: there the sandbox's read-only bind is what holds
            with pytest.raises(PermissionError):
                (snap.dir / "new").write_text("x")
        (src / "a.c").write_text("int evil;\n")
        assert (snap.dir / "a.c").read_text() == "int a;\n"
    finally:
        snapshot.discard(snap.dir)
    assert not snap.dir.exists()


@pytest.mark.parametrize("make_bad", ["abs-link", "link-out", "chain-out", "fifo", "hardlink"])
def test_snapshot_refuses_what_containment_refuses(tmp_path: Path, make_bad: str) -> None:
    from wbcore_runtime.guard.paths import Refused

    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "ok.c").write_text("int x;\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("host\n")
    if make_bad == "abs-link":
        (src / "l").symlink_to(outside)
    elif make_bad == "link-out":
        (src / "l").symlink_to("../outside.txt")
    elif make_bad == "chain-out":  # each link looks local; together they leave the tree
        (src / "d" / "up").symlink_to("..", target_is_directory=True)
        (src / "d" / "l").symlink_to("up/../outside.txt")
    elif make_bad == "fifo":
        os.mkfifo(src / "pipe")
    else:
        os.link(src / "ok.c", src / "twin.c")
    with pytest.raises(Refused):
        snapshot.take(src, tmp_path / "snap")
    assert not (tmp_path / "snap").exists()


def test_a_folder_swapped_for_a_link_mid_walk_is_refused(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk is anchored to open folders: a subfolder replaced by a link to a host folder
    after it was listed is never entered."""
    from wbcore_runtime.guard import paths
    from wbcore_runtime.guard.paths import Refused

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.c").write_text("int a;\n")
    (src / "sub" / "b.c").write_text("int b;\n")
    host = tmp_path / "host"
    host.mkdir()
    (host / "b.c").write_text(SECRET)
    real_open = os.open

    def racing_open(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if path == "sub" and kw.get("dir_fd") is not None and not (src / "sub").is_symlink():
            os.rename(src / "sub", tmp_path / "sub.aside")
            (src / "sub").symlink_to(host, target_is_directory=True)
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(paths.os, "open", racing_open)
    with pytest.raises(Refused, match="sub"):
        snapshot.take(src, tmp_path / "snap")
    assert not (tmp_path / "snap").exists()


def test_only_the_pipeline_hands_a_lane_its_request() -> None:
    """Every lane gets the snapshot by construction: the one place a ``BuildRequest`` is
    made is ``compile_source``, right after the snapshot is taken."""
    import ast

    repo = Path(__file__).resolve().parents[2]
    files = [*(repo / "wbcore_runtime").rglob("*.py"),
             *(p for p in (repo / "plugins").glob("*/wbcore_*/**/*.py") if "vendor" not in p.parts)]
    makers = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if (isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", "")) == "BuildRequest"):
                makers.append(path.relative_to(repo).as_posix())
    assert makers == ["wbcore_runtime/build/pipeline.py"]
    src = (repo / "wbcore_runtime/build/pipeline.py").read_text()
    assert src.index("snapshot.take(resolved.dir") < src.index("driver.build(BuildRequest(")
