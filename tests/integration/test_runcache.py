"""``wbx run``'s kept resolution (``wbcore_cli.runcache``): a later run of the same command
skips the resolution only while nothing it was decided from has changed.

Each attack is made after the resolution was kept, then run twice: on the fast path (the
kept file in place) and on the full path (the kept file removed); both must refuse, with
the same exit code and message. Every ``wbx`` here gets a fresh runtime, as a new process
would.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("wasmtime")

from wbcore_audit_trail import reader
from wbcore_runtime.build import builder
from wbcore_runtime.trust import consent
from wbcore_cli import runcache
from wbcore_testing.fixtures import CliResult

SHIPPED = Path(__file__).resolve().parents[2] / "toolkits"
HELLO = b"hello from the kept resolution\n"
#: What each ``wbx run`` got from ``runcache.recall``: True when it used the kept resolution.
RECALLS: list[bool] = []


@pytest.fixture
def b64(monkeypatch: pytest.MonkeyPatch, wb_home: Path, toolkit_root: Path,
        make_runtime: Callable[..., Any]) -> Path:
    """The shipped b64 toolkit copied into the test root and built."""
    # Files written a moment ago are "racy" (they could change again within one timestamp
    # tick): the tests do not wait two seconds; every change below also changes a size,
    # an inode or a generation, which no tick hides.
    monkeypatch.setattr(runcache, "RACY_SECONDS", 0.0)
    real = runcache.recall

    def spy(*a: Any, **kw: Any) -> Any:
        hit = real(*a, **kw)
        RECALLS.append(hit is not None)
        return hit

    RECALLS.clear()
    monkeypatch.setattr(runcache, "recall", spy)
    folder = toolkit_root / "b64"
    shutil.copytree(SHIPPED / "b64", folder)
    builder.build(make_runtime(), "b64")
    return folder


def kept(home: Path) -> Path:
    return home / runcache.FOLDER / "command.b64.json"


def run(wbx: Callable[..., CliResult], make_runtime: Callable[..., Any], *args: str,
        input: bytes = HELLO) -> tuple[CliResult, Any]:
    rt = make_runtime()
    return wbx("run", "b64", *args, runtime=rt, input=input), rt


def both(wbx: Callable[..., CliResult], make_runtime: Callable[..., Any], home: Path, *args: str,
         input: bytes = HELLO, hit: bool = False) -> tuple[CliResult, CliResult]:
    """The same command with the kept file present and with it removed (the full path).
    ``hit``: whether the kept resolution may be used (its inputs did not change)."""
    fast, _ = run(wbx, make_runtime, *args, input=input)
    assert RECALLS[-1] is hit, "a changed input must not be run from the kept resolution"
    runcache.forget(home, "command", "b64")
    full, _ = run(wbx, make_runtime, *args, input=input)
    return fast, full


def warm(wbx: Callable[..., CliResult], make_runtime: Callable[..., Any], home: Path) -> None:
    first, _ = run(wbx, make_runtime)
    assert first.exit_code == 0, first.stderr
    assert kept(home).is_file(), "the first run keeps its resolution"
    again, rt = run(wbx, make_runtime)
    assert again.exit_code == 0 and again.stdout_bytes == first.stdout_bytes
    assert RECALLS[-1] is True, "the second run uses the kept resolution"
    assert rt._pm is None, "the kept resolution runs without importing the plugins"


def test_kept_resolution_runs_without_plugins_and_agrees(b64: Path, wb_home: Path, wbx: Any,
                                                          make_runtime: Any) -> None:
    warm(wbx, make_runtime, wb_home)
    for args, data in (((), HELLO), (("-d",), b"aGVsbG8K"), (("-d",), b"not base64!!"), (("--bogus",), b"")):
        runcache.forget(wb_home, "command", "b64")
        run(wbx, make_runtime, *args, input=data)  # keeps it
        assert kept(wb_home).is_file()
        fast, _ = run(wbx, make_runtime, *args, input=data)
        assert RECALLS[-1] is True, args
        runcache.forget(wb_home, "command", "b64")
        full, _ = run(wbx, make_runtime, *args, input=data)
        assert RECALLS[-1] is False
        assert ((fast.exit_code, fast.stdout_bytes, fast.stderr)
                == (full.exit_code, full.stdout_bytes, full.stderr)), args


def test_tampered_artifact_is_refused_on_the_fast_path(b64: Path, wb_home: Path, wbx: Any,
                                                       make_runtime: Any) -> None:
    warm(wbx, make_runtime, wb_home)
    rt = make_runtime()
    art = rt.artifacts.path(rt.registry.lookup("command", "b64").sha256)
    art.chmod(0o644)
    art.write_bytes(art.read_bytes() + b"\0")  # one more byte: the digest no longer matches
    # The artifact is not part of the stamp: the runner checks it on every call, on both paths.
    fast, full = both(wbx, make_runtime, wb_home, hit=True)
    assert fast.exit_code == full.exit_code == 70, fast.stderr
    assert "does not match its sha256" in fast.stderr and fast.stderr == full.stderr
    assert fast.stdout_bytes == b""


def test_changed_manifest_caps_are_refused(b64: Path, wb_home: Path, wbx: Any, make_runtime: Any) -> None:
    warm(wbx, make_runtime, wb_home)
    manifest = b64 / "manifest.org"
    manifest.write_text(manifest.read_text().replace("#+CLI_BIN: b64", "#+CLI_BIN: b64\n#+CAPS: net kv"))
    fast, full = both(wbx, make_runtime, wb_home)
    assert fast.exit_code == full.exit_code == 126, fast.stderr
    assert "content changed since the build" in fast.stderr and fast.stderr == full.stderr


def test_changed_trust_is_refused(b64: Path, wb_home: Path, wbx: Any, make_runtime: Any) -> None:
    warm(wbx, make_runtime, wb_home)
    manifest = b64 / "manifest.org"
    manifest.write_text(manifest.read_text().replace("#+EXEC: command",
                                                     "#+EXEC: command\n#+TRUST: third-party"))
    fast, full = both(wbx, make_runtime, wb_home)
    assert fast.exit_code == full.exit_code == 126, fast.stderr
    assert "#+TRUST changed" in fast.stderr and fast.stderr == full.stderr


def test_a_changed_source_file_is_refused(b64: Path, wb_home: Path, wbx: Any, make_runtime: Any) -> None:
    warm(wbx, make_runtime, wb_home)
    src = b64 / "src" / "b64.wat"
    src.write_text(src.read_text() + "\n;; edited after the build\n")
    fast, full = both(wbx, make_runtime, wb_home)
    assert fast.exit_code == full.exit_code == 126 and "content changed since the build" in fast.stderr
    assert fast.stderr == full.stderr


def test_policy_change_re_resolves(b64: Path, wb_home: Path, wbx: Any, make_runtime: Any) -> None:
    """A consent grant or revoke moves the home's change counter: the kept resolution is
    not used (the full one runs, with the grants as they are now)."""
    warm(wbx, make_runtime, wb_home)
    stamp_before = json.loads(kept(wb_home).read_text())["generation"]
    consent.ConsentStore(wb_home).grant("b64", [], None)
    again, _ = run(wbx, make_runtime)
    assert again.exit_code == 0 and RECALLS[-1] is False
    assert json.loads(kept(wb_home).read_text())["generation"] != stamp_before, "re-kept at the new counter"
    consent.ConsentStore(wb_home).revoke("b64")
    again, _ = run(wbx, make_runtime)
    assert again.exit_code == 0 and RECALLS[-1] is False


def test_removed_registration_is_not_run(b64: Path, wb_home: Path, wbx: Any, make_runtime: Any) -> None:
    warm(wbx, make_runtime, wb_home)
    make_runtime().registry.unregister("command", "b64")
    fast, full = both(wbx, make_runtime, wb_home)
    assert fast.exit_code == full.exit_code == 127 and fast.stderr == full.stderr


def test_toolkit_moved_off_the_search_path_is_refused(b64: Path, wb_home: Path, wbx: Any,
                                                      make_runtime: Any, tmp_path: Path) -> None:
    warm(wbx, make_runtime, wb_home)
    b64.rename(tmp_path / "elsewhere")
    fast, full = both(wbx, make_runtime, wb_home)
    assert fast.exit_code == full.exit_code == 126 and "left the search path" in fast.stderr
    assert fast.stderr == full.stderr


def test_another_toolkit_taking_the_id_is_refused(b64: Path, wb_home: Path, wbx: Any, make_runtime: Any,
                                                  toolkit_root: Path, tmp_path: Path) -> None:
    """A root earlier on the search path now holds a toolkit with the same id."""
    early = tmp_path / "early"
    early.mkdir()

    def make(**kw: Any) -> Any:
        return make_runtime(roots=[early, toolkit_root], **kw)

    warm(wbx, make, wb_home)
    shutil.copytree(b64, early / "b64")
    fast, full = both(wbx, make, wb_home)
    assert fast.exit_code == full.exit_code == 126 and fast.stderr == full.stderr, fast.stderr
    assert "a different toolkit now owns id" in fast.stderr


def test_edited_kept_file_is_not_trusted_beyond_its_stamp(b64: Path, wb_home: Path, wbx: Any,
                                                         make_runtime: Any) -> None:
    """A kept file that is unreadable is ignored (the full path runs)."""
    warm(wbx, make_runtime, wb_home)
    kept(wb_home).write_text("{not json")
    res, _ = run(wbx, make_runtime)
    assert res.exit_code == 0 and RECALLS[-1] is False


def test_not_kept_while_racy_or_for_an_explicit_tier(b64: Path, wb_home: Path, wbx: Any, make_runtime: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runcache, "RACY_SECONDS", 3600.0)  # every file is "just changed"
    res, _ = run(wbx, make_runtime)
    assert res.exit_code == 0 and not kept(wb_home).exists()
    monkeypatch.setattr(runcache, "RACY_SECONDS", 0.0)
    rt = make_runtime()
    res = wbx("run", "--tier", "instance", "b64", runtime=rt, input=HELLO)
    assert res.exit_code == 0 and not kept(wb_home).exists()
    res, _ = run(wbx, make_runtime)
    assert kept(wb_home).exists()


def test_the_stamp_sees_a_just_changed_toolkit_file(b64: Path, make_runtime: Any) -> None:
    """A file changed within the racy window keeps the resolution from being kept: the
    stamp's newest time covers the toolkit folder, not only the roots and the code."""
    src = b64 / "src" / "b64.wat"
    src.write_text(src.read_text() + "\n")
    stamp = runcache.stamp(make_runtime(), str(b64))
    assert stamp is not None
    st = src.stat()
    assert runcache._newest(stamp) >= max(st.st_mtime_ns, st.st_ctime_ns)
    assert runcache._newest(stamp["toolkit"]) >= st.st_ctime_ns


def test_a_builtin_resolves_once_and_is_kept(monkeypatch: pytest.MonkeyPatch, wb_home: Path, wbx: Any,
                                             make_runtime: Any) -> None:
    """``wbx run upper`` (a reserved built-in) resolves once per process, keeps the resolution
    as a shipped command does, and the next process runs it without resolving or loading
    the plugins; a registry change (a forced reinstall of the built-in) resolves in full."""
    from wbcore_runtime.dispatch import resolve as resolution

    monkeypatch.setattr(runcache, "RACY_SECONDS", 0.0)
    counts = {"resolve": 0, "full": 0}
    resolve, full = resolution.resolve, resolution._resolve_uncached

    def counted(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **kw: Any) -> Any:
            counts[key] += 1
            return fn(*a, **kw)
        return call

    monkeypatch.setattr(resolution, "resolve", counted("resolve", resolve))
    monkeypatch.setattr(resolution, "_resolve_uncached", counted("full", full))
    path = wb_home / runcache.FOLDER / "command.upper.json"
    # Registered by an earlier use: the run that installs a built-in moves the change counter
    # after reading it, so what it resolved is not kept (the next run keeps it).
    make_runtime().install_builtins(["upper"])

    first = wbx("run", "upper", runtime=make_runtime(), input=b"abc\n")
    assert (first.exit_code, first.stdout_bytes) == (0, b"ABC\n"), first.stderr
    assert counts == {"resolve": 1, "full": 1}, "one resolution for one run, not one more for the call"
    assert path.is_file(), "a built-in's resolution is kept as a shipped command's is"
    kept_stamp = json.loads(path.read_bytes())["stamp"]
    assert any(e[0].endswith("upper.wat")
               for e in kept_stamp["builtin"]), "the serving package is in the stamp"

    rt = make_runtime()
    again = wbx("run", "upper", "ignored-arg", runtime=rt, input=b"xyz\n")
    assert (again.exit_code, again.stdout_bytes) == (0, b"XYZ\n"), again.stderr
    assert counts == {"resolve": 1, "full": 1}, "the kept resolution is used: nothing resolves again"
    assert rt._pm is None, "the kept built-in runs without importing the plugins"

    make_runtime().install_builtins(["upper"], force=True)  # a registry write: the counter moves
    third = wbx("run", "upper", runtime=make_runtime(), input=b"q\n")
    assert (third.exit_code, third.stdout_bytes) == (0, b"Q\n"), third.stderr
    assert counts == {"resolve": 2, "full": 2}, "a changed registry is resolved in full"


from wbcore_testing.fixtures import KV_GET as KV_WAT  # noqa: E402


def test_a_command_with_caps_audits_alike_on_both_paths(monkeypatch: pytest.MonkeyPatch, wb_home: Path,
                                                        toolkit_root: Path, wbx: Any,
                                                        make_runtime: Any) -> None:
    """The kept resolution carries the effective caps; the Dock brokers and audits them as
    on the full path (the brokers load when the guest first calls one)."""
    from wbcore_runtime.dispatch.audit import AuditLog
    from wbcore_testing.fixtures import manifest_text, write_toolkit

    monkeypatch.setattr(runcache, "RACY_SECONDS", 0.0)
    real, hits = runcache.recall, []
    monkeypatch.setattr(runcache, "recall", lambda *a, **kw: hits.append(real(*a, **kw)) or hits[-1])
    fields = {"BUILD_LANG": "wat", "BUILD_SRC": "path:src/main.wat", "CLI_BIN": "kvget"}
    write_toolkit(toolkit_root, "kvget", manifest_text("kvget", exec="command", caps="kv", extra=fields),
                  files={"src/main.wat": KV_WAT})
    builder.build(make_runtime(), "kvget")

    def go() -> tuple[CliResult, list[dict[str, Any]]]:
        log = AuditLog.for_home(wb_home)
        before = len(list(reader.entries(log)))
        res = wbx("run", "kvget", runtime=make_runtime(), input=b"")
        volatile = {"seq", "ts", "time", "prev", "hash", "chain", "ms", "pid"}
        new = [{k: v for k, v in e.items() if k not in volatile}
               for e in list(reader.entries(log))[before:]]
        return res, new

    first, _ = go()
    assert first.exit_code == 0, first.stderr
    assert (wb_home / runcache.FOLDER / "command.kvget.json").is_file()
    fast, fast_audit = go()
    assert hits[-1] is not None
    runcache.forget(wb_home, "command", "kvget")
    full, full_audit = go()
    assert hits[-1] is None
    assert ((fast.exit_code, fast.stdout_bytes, fast.stderr)
            == (full.exit_code, full.stdout_bytes, full.stderr))
    assert fast_audit and fast_audit == full_audit, (fast_audit, full_audit)


def test_the_plugin_index_names_runners_and_defers_misses(wb_home: Path, make_runtime: Any) -> None:
    """The index hands dispatch the same records without importing the plugins; a name it
    does not hold is asked of the real registry (same error); a changed plugin file makes
    it stale."""
    from wbcore_runtime.plugins import index as plugin_index
    from wbcore_runtime.contract.errors import WbError

    full = make_runtime()
    full.collect_all()  # loads every plugin: the index is written
    rt = make_runtime()
    index = rt.plugin_index
    assert index is not None
    command = index.registry("shapes").get("command")
    assert isinstance(command.runner, plugin_index.Ref) and command.default_tier == "instance"
    real = full.shapes.get("command").runner  # the plugin names it lazily: a Ref as well
    assert command.runner.resolve() is (real.resolve() if isinstance(real, plugin_index.Ref) else real)
    assert sorted(t.name for t in index.registry("tiers")) == full.tiers.names()
    assert rt._pm is None, "reading the index imports no plugin"
    with pytest.raises(WbError) as via_index:
        index.registry("shapes").get("no-such-shape")
    with pytest.raises(WbError) as real:
        full.shapes.get("no-such-shape")
    assert str(via_index.value) == str(real.value)

    path = wb_home / plugin_index.INDEX_FILE
    data = json.loads(path.read_text())
    data["files"][0][3] += 1  # as if a plugin's source file was edited since
    path.write_text(json.dumps(data))
    assert plugin_index.load(make_runtime()) is None


def test_a_kept_builtin_still_refuses_a_changed_artifact_or_package(monkeypatch: pytest.MonkeyPatch,
                                                                    wb_home: Path, tmp_path: Path, wbx: Any,
                                                                    make_runtime: Any) -> None:
    """The fast path of a built-in weakens no check: a tampered artifact is refused by the
    runner exactly as the full path refuses it, and an edited file of the package that
    serves the built-in (its ``.wat``) makes the next run resolve in full."""
    monkeypatch.setattr(runcache, "RACY_SECONDS", 0.0)
    real = runcache.recall
    hits: list[bool] = []

    def spy(*a: Any, **kw: Any) -> Any:
        hit = real(*a, **kw)
        hits.append(hit is not None)
        return hit

    monkeypatch.setattr(runcache, "recall", spy)
    path = wb_home / runcache.FOLDER / "command.upper.json"
    make_runtime().install_builtins(["upper"])
    assert wbx("run", "upper", runtime=make_runtime(), input=b"a\n").exit_code == 0
    assert path.is_file() and hits == [False]
    ok = wbx("run", "upper", runtime=make_runtime(), input=b"b\n")
    assert (ok.exit_code, ok.stdout_bytes, hits[-1]) == (0, b"B\n", True), ok.stderr

    # A package the built-in is served from, edited after the resolution was kept: the stamp
    # (taken of the folder the kept file names) differs, so the run does not use it.
    kept = json.loads(path.read_bytes())
    package = tmp_path / "served"
    shutil.copytree(kept["resolved"]["builtin_dir"], package, ignore=shutil.ignore_patterns("__pycache__"))
    kept["resolved"]["builtin_dir"] = str(package)
    kept["stamp"] = runcache.stamp(make_runtime(), None, str(package))
    path.write_text(json.dumps(kept))
    assert wbx("run", "upper", runtime=make_runtime(), input=b"c\n").exit_code == 0
    assert hits[-1] is True, "the re-stamped copy is what the kept file names now"
    wat = next(package.rglob("upper.wat"))
    wat.write_text(wat.read_text() + "\n;; edited\n")
    edited = wbx("run", "upper", runtime=make_runtime(), input=b"d\n")
    assert hits[-1] is False, "an edited serving package must not run from the kept resolution"
    assert (edited.exit_code, edited.stdout_bytes) == (0, b"D\n"), edited.stderr

    # Kept again by that full run; now the artifact the registry names is tampered with.
    rt = make_runtime()
    art = rt.artifacts.path(rt.registry.lookup("command", "upper").sha256)
    art.chmod(0o644)
    art.write_bytes(art.read_bytes() + b"\0")
    fast = wbx("run", "upper", runtime=make_runtime(), input=b"e\n")
    assert hits[-1] is True, "the artifact is not in the stamp: the runner checks it on every call"
    runcache.forget(wb_home, "command", "upper")
    full = wbx("run", "upper", runtime=make_runtime(), input=b"e\n")
    assert hits[-1] is False
    assert fast.exit_code == full.exit_code == 70, fast.stderr
    assert "does not match its sha256" in fast.stderr and fast.stderr == full.stderr
    assert fast.stdout_bytes == full.stdout_bytes == b""


def test_every_deciding_core_module_is_in_the_code_stamp() -> None:
    """The stamp names each core module whose code decides a resolution, and each exists: a
    module split off one of them (dispatch/tiers from dispatch/resolve) would otherwise change
    what a kept resolution means without invalidating it."""
    import wbcore_runtime

    core = Path(wbcore_runtime.__file__).parent
    missing = [name for name in runcache._DECIDERS if not (core / f"{name}.py").is_file()]
    assert not missing, f"runcache._DECIDERS names modules that do not exist: {missing}"
    # Every core module resolve.py imports at its top decides part of the answer.
    src = (core / "dispatch" / "resolve.py").read_text()
    for name in ("dispatch/tiers", "trust/policy", "trust/verdict", "store/registry"):
        assert f"wbcore_runtime.{name.replace('/', '.')}" in src or name.split("/")[1] in src
        assert name in runcache._DECIDERS, name
