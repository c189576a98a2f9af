"""Run a js artifact: the command shape's contract (argv + stdin → stdout + exit).

``JsRunner.call`` takes the same ``wbcore_runtime.contract.calls.CommandRequest`` the wasmtime command
runner takes and returns a ``CallResult``, so the run engine can hand it any artifact
whose ``wbcore.runner`` custom section names ``js`` (see ``artifact.runner_of``).

What the guest sees: argv (as ``scriptArgs``), stdin, and ``/app`` (the artifact's
own sources, extracted once per artifact sha256 under ``$WB_HOME/cache/js/``,
preopened read-only). No environment, no other files, no network. Limits: the
profile's memory is the wasm memory cap and (less 16 MiB) QuickJS's heap limit;
``stack_bytes`` is QuickJS's stack limit; the deadline is an epoch deadline.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.guard import paths
from wbcore_runtime.store import locks
from wbcore_runtime.contract import guest
from wbcore_runtime.contract.errors import InvalidArgs, Timeout

from wbcore_lane_js import artifact, qjs
from wbcore_lane_js.dock import DockSink, make_folder
from wbcore_lane_js.lane import materialize

#: How long an extraction waits for another into the same home (one writes a few small files).
EXTRACT_WAIT_S = 120.0


def _matches(dest: Path, files: Any) -> bool:
    """Whether ``dest`` holds exactly ``files`` (the artifact's own sources, byte for byte)."""
    # The containment walk (openat + O_NOFOLLOW): a link, a FIFO or a folder swapped for a
    # link is a mismatch, never followed, and each file is compared as the very inode opened.
    seen: set[str] = set()
    try:
        for node in paths.walk(dest, label="the js app folder"):
            if node.kind == "empty":
                continue
            want = files.get(node.rel) if node.kind == "file" else None
            if want is None:
                return False
            expected = want.encode("utf-8")
            with os.fdopen(os.dup(node.fd), "rb") as fh:  # the walk closes node.fd itself
                if fh.read(len(expected) + 1) != expected:
                    return False
            seen.add(node.rel)
    except (OSError, paths.Refused):
        return False
    return seen == set(files)


def _tree_stamp(dest: Path) -> tuple[tuple[str, int, int, int, int], ...] | None:
    """Every entry under ``dest`` (itself included) with (inode, size, mtime, ctime): any
    write, rename, added or removed file changes it (ctime cannot be set back by a user)."""
    out: list[tuple[str, int, int, int, int]] = []
    try:
        st = os.lstat(dest)
        out.append((".", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        stack = [dest]
        while stack:
            d = stack.pop()
            with os.scandir(d) as it:
                for e in it:
                    st = e.stat(follow_symlinks=False)
                    out.append((e.path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
                    if e.is_dir(follow_symlinks=False):
                        stack.append(Path(e.path))
    except OSError:
        return None
    return tuple(sorted(out))


@contextlib.contextmanager
def _extracting(base: Path) -> Iterator[None]:
    """One extraction at a time per home: an exclusive ``flock`` on ``base/.extract.lock``.
    Each open is its own lock, so it orders this process's threads as well as other
    processes sharing the home."""
    with locks.held(base / ".extract.lock", what="the js runtime's extraction", wait_s=EXTRACT_WAIT_S):
        yield


def _extract(files: Mapping[str, str], base: Path, dest: Path, sha: str) -> None:
    """``files`` written to a fresh folder beside ``dest`` and renamed into place; a folder
    already there (changed since it was extracted) is moved aside first and removed."""
    tmp = Path(tempfile.mkdtemp(prefix=".x-", dir=base))
    old = base / f".old-{sha}-{os.getpid()}"
    try:
        materialize(files, tmp)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


#: Extracted app dirs checked byte for byte in this process: path → the tree's stamp then.
_checked: dict[Path, tuple[tuple[str, int, int, int, int], ...]] = {}
_checked_lock = threading.Lock()


def app_dir(home: Path, data: bytes | Prepared, sha256: str | None = None) -> Path:
    """The artifact's sources, extracted under ``home`` and checked against the artifact
    before use (a changed or extra file is replaced, never run). The byte-for-byte check
    runs once per process and tree; later calls compare the tree's stamp (every entry's
    inode, size, mtime, ctime), so any change since is caught and checked again."""
    prep = data if isinstance(data, Prepared) else None
    sha = prep.sha256 if prep is not None else (sha256 or hashlib.sha256(data).hexdigest())  # type: ignore[arg-type]
    base = home / "cache" / "js" / "app"
    dest = base / sha
    stamp = _tree_stamp(dest)
    with _checked_lock:
        if stamp is not None and _checked.get(dest) == stamp:
            return dest
    files = prep.files if prep is not None else artifact.unpack(data).files  # type: ignore[arg-type]
    if not _matches(dest, files):
        base.mkdir(parents=True, exist_ok=True)
        with _extracting(base):
            # checked again under the lock: another thread or process (two fabric workers'
            # first calls) may have extracted it meanwhile, and renaming over its folder
            # would pull /app from under the call it is running
            if not _matches(dest, files):
                _extract(files, base, dest, sha)
        # stamp first, then compare: a change after the stamp makes the next call's differ
        stamp = _tree_stamp(dest)
        if stamp is None or not _matches(dest, files):
            raise InvalidArgs(
                f"js: the extracted sources at {dest} changed while being written; retry the call"
            )
    if stamp is not None:
        with _checked_lock:
            if len(_checked) > 1024:
                _checked.clear()
            _checked[dest] = stamp
    return dest


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a call needs from a js artifact, read and checked once per process and file
    version (bytes hashed as read and held to the store's digest): the bundle's files and
    the compiled reactor."""

    sha256: str
    files: Mapping[str, str]
    module: Any
    snapshot: bool = False  # a pre-initialized guest (wbcore_lane_js.snapshot); else the plain reactor


_prepared: dict[tuple[str, str], tuple[tuple[int, int, int, int], Prepared]] = {}
_prepared_lock = threading.Lock()
atexit.register(_prepared.clear)  # compiled modules go before wasmtime's bindings do


def prepare(path: Path, home: Path, sha256: str | None = None, *, guests: guest.GuestRunner) -> Prepared:
    """The artifact at ``path`` read, its runner section checked, its bundle parsed and its
    reactor compiled: once per process and file version (inode, size, mtime, ctime), so a
    replaced or rewritten artifact is read again before it can run. ``sha256`` is the
    store's digest: bytes that hash otherwise are refused (``IntegrityError``)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InvalidArgs(f"js artifact {path}: {exc.strerror}") from None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    key = (str(path), sha256 or "")
    with _prepared_lock:
        hit = _prepared.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    data = path.read_bytes()
    sections = {n: bytes(p) for n, p in artifact.custom_sections(data) if n.startswith("wbcore.")}
    runner = sections.get(artifact.RUNNER_SECTION, b"").decode("utf-8", "replace") or None
    if runner != "js":
        raise InvalidArgs(f"{path.name} is not a js artifact (no wbcore.runner=js section)")
    sha = hashlib.sha256(data).hexdigest()
    if sha256 is not None and sha != sha256:
        from wbcore_runtime.store.artifacts import IntegrityError

        raise IntegrityError(
            f"js artifact {path} does not match its sha256 {sha256[:12]}… (tampered or corrupt); "
            "it will not run — rebuild the toolkit"
        )
    prep = Prepared(
        sha, artifact.unpack(data).files, qjs.module(artifact.code_part(data), home / "cache" / "js", guests),
        snapshot=sections.get(artifact.SNAPSHOT_SECTION) == b"1",
    )
    with _prepared_lock:
        if len(_prepared) > 256:
            _prepared.clear()
        _prepared[key] = (stamp, prep)
    return prep


@contextlib.contextmanager
def _stdin_file(data: bytes) -> Iterator[Path]:
    """``data`` as a file WASI can open for stdin: an anonymous memory file where Linux has
    them (no directory entry to make and unlink), else a private temporary file."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("wb-js-stdin", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            yield Path(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(prefix="wb-js-stdin-") as fh:
        fh.write(data)
        fh.flush()
        yield Path(fh.name)


def run_artifact(
    path: Path,
    argv: list[str],
    *,
    stdin: bytes = b"",
    home: Path,
    memory_bytes: int = 64 << 20,
    timeout_s: float = 5.0,
    stack_bytes: int = qjs.DEFAULT_STACK,
    output_bytes: int = 1 << 20,
    sha256: str | None = None,
    cancel: Any = None,
    dock: Callable[[str, bytes], tuple[int, bytes]] | None = None,
    guests: guest.GuestRunner,
) -> guest.GuestResult:
    """Run the js artifact at ``path``; ``argv[0]`` is the command name."""
    prep = prepare(path, home, sha256, guests=guests)
    app = app_dir(home, prep)
    args = qjs.qjs_args("/app/__wb_entry.mjs", argv, memory_bytes=memory_bytes, stack_bytes=stack_bytes)
    limits = guest.GuestLimits(timeout_s=timeout_s, memory_bytes=memory_bytes, output_bytes=output_bytes)
    with _stdin_file(stdin) as stdin_path:
        def go(bridge: Any) -> guest.GuestResult:
            if prep.snapshot:
                return qjs.resume(prep.module, app, argv, memory_bytes=memory_bytes, stack_bytes=stack_bytes,
                                  stdin=stdin_path, limits=limits, cancel=cancel, dock=bridge)
            return qjs.run(
                prep.module, app, args, stdin=stdin_path, limits=limits, cancel=cancel, dock=bridge
            )

        if dock is None:
            return go(None)
        # taken here, on the calling thread: wasmtime runs the sink on a thread of its own
        context = contextvars.copy_context()
        with tempfile.TemporaryDirectory(prefix="wb-js-dock-") as tmp:
            folder, token = make_folder(Path(tmp))
            return go((folder, lambda out: DockSink(out, dock, folder, token, context)))


class JsRunner:
    """Runs js artifacts for ``CommandRequest`` s (the command shape's contract)."""

    def __init__(self, runtime: Any, guests: guest.GuestRunner | None = None) -> None:
        self.runtime = runtime
        self._guests = guests

    @property
    def guests(self) -> guest.GuestRunner:
        """The runtime's WASI guest runner, picked once (not per call)."""
        if self._guests is None:
            self._guests = guest.runner(self.runtime)
        return self._guests

    def load_ahead(self, path: Path, sha256: str) -> None:
        """Ready the artifact at ``path`` before its first call: read and held to ``sha256``,
        its reactor compiled (into ``cache/js``) and its sources extracted and checked. A
        fabric node does this while it loads a job (``wbcore_ray.actor``), so the node's
        actors do it once, under its load lock, rather than in their first calls."""
        home = Path(self.runtime.home)
        app_dir(home, prepare(path, home, sha256, guests=self.guests))

    def call(self, req: Any) -> Any:
        from wbcore_runtime.contract.calls import CallResult, LimitExceeded, Usage

        argv, stdin = req.guest_input()
        prof = req.profile
        bridge: Callable[[str, bytes], tuple[int, bytes]] | None = None
        if req.caps:  # the Dock bridge, for the granted caps only (wbcore_lane_js.dock)
            dock = self.runtime.dock
            ctx = dock.context(
                principal=req.principal, caps=req.caps, timeout=req.timeout_s, toolkit=req.toolkit,
                allowed_hosts=req.allowed_hosts,
            )
            bridge = functools.partial(dock.call_raw, ctx)

        t0 = time.perf_counter()
        res = run_artifact(Path(req.artifact), argv, stdin=stdin, home=Path(self.runtime.home),
                           memory_bytes=prof.memory_bytes, timeout_s=req.timeout_s,
                           output_bytes=max(prof.stdout_bytes, prof.stderr_bytes), sha256=req.sha256,
                           cancel=getattr(req, "cancel", None), dock=bridge, guests=self.guests)
        wall = time.perf_counter() - t0
        if res.cancelled:
            raise Timeout(f"{req.name}: cancelled by the caller after {wall:.3f} s; the guest was stopped")
        if res.timed_out:
            raise Timeout(f"{req.name}: stopped after {wall:.3f} s: over its {req.timeout_s:g} s deadline")
        if res.truncated:
            raise LimitExceeded(
                f"{req.name}: output passed the cap of profile {prof.name}; output stopped", limit="stdout"
            )
        if res.trap:
            from wbcore_runtime.contract.calls import GuestTrap

            raise GuestTrap(f"{req.name}: guest trapped: {res.trap}")
        return CallResult(
            res.stdout, res.stderr, res.exit_code,
            Usage(wall_s=wall, bytes_out=len(res.stdout) + len(res.stderr)),
        )
