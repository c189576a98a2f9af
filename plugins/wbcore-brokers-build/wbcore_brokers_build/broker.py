"""The BuildBroker: a guest builds other tools without native execution.

Operations (CBOR maps in, CBOR maps out; see docs/dock.md):

``lanes``        ``{}`` → ``{"lanes": [{"name", "kind", "available", "reason"}]}``
``compile``      ``{"lang", "files": {path: bytes|str}, "entry"?, "flags"?}``
                 → ``{"sha256", "size", "cached", "log"}``
``run``          ``{"sha256", "argv"?, "stdin"?, "timeout"?}`` → ``{"stdout", "stderr", "exit_code"}``
``compile_run``  both in one call → the union of the two responses

Why it is safe: the source goes through the core's build pipeline (``wbcore_runtime.build.pipeline``,
the same stages and cache key as ``wbx toolkit build``) to the same lane drivers, so it
compiles only inside that lane's sandbox, which the runtime provides; every input is
capped (files, bytes, path shape); a principal runs at most ``MAX_CONCURRENT`` builds at
once; ``run`` accepts only artifacts this broker built for the caller's tenant, and runs
them under the ``compute`` profile with *no* caps, inside the caller's remaining deadline.
The Dock's cadence (default-deny, revocation, rate limit, response cap, audit) sits in
front of every operation.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path, PurePosixPath
from typing import Any

from wbcore_runtime.dispatch import dispatcher as dispatch
from wbcore_runtime.trust import policy
from wbcore_runtime.build import BuildFailed, ResolvedSource, pipeline, tree_digest
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.dispatch.dock import refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, unknown_name
from wbcore_runtime.toolkit.manifest import Manifest

MAX_FILES = 256
MAX_SOURCE_BYTES = 4 << 20
MAX_PATH = 200
MAX_ARGS = 256
MAX_STDIN = 16 << 20
MAX_LOG = 16 << 10
MAX_CONCURRENT = 2
RUN_PROFILE = "compute"


def _safe_rel(path: str) -> str:
    """A relative POSIX path with no ``..``, no absolute part, no NUL or backslash."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH:
        raise InvalidArgs(f"build: source path {path!r} must be 1..{MAX_PATH} characters")
    if "\x00" in path or "\\" in path:
        raise InvalidArgs(f"build: source path {path!r} contains NUL or backslash")
    p = PurePosixPath(path)
    if p.is_absolute() or any(part in ("..", "") for part in p.parts) or path.endswith("/"):
        raise InvalidArgs(f"build: source path {path!r} must be relative, without '..'")
    return p.as_posix()


class BuildBroker:
    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.root = runtime.home / "brokers" / "build"
        self.root.mkdir(parents=True, exist_ok=True)
        self._db_path = self.root / "built.db"
        self._lock = threading.Lock()
        self._active: dict[str, int] = defaultdict(int)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS built (tenant TEXT NOT NULL, sha256 TEXT NOT NULL, lane TEXT NOT "
                "NULL, created REAL NOT NULL, PRIMARY KEY (tenant, sha256))"
            )

    def _db(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._db_path, timeout=10.0)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    # --- dispatch --------------------------------------------------------------

    def handle(self, call: Any) -> Any:
        op = call.op
        if op == "lanes":
            return {"lanes": self.lanes()}
        if op == "compile":
            return self.compile(call)
        if op == "run":
            return self.run(call, call.arg("sha256", str))
        if op == "compile_run":
            built = self.compile(call)
            return built | self.run(call, built["sha256"])
        raise InvalidArgs(unknown_name("build operation", op, ["compile", "compile_run", "lanes", "run"]))

    def lanes(self) -> list[dict[str, Any]]:
        out = []
        for lane in self.runtime.lanes:
            avail = lane.availability(self.runtime)
            out.append({"name": lane.name, "kind": lane.kind, "available": avail.ok, "reason": avail.reason})
        return out

    # --- compile ---------------------------------------------------------------

    def _files(self, call: Any) -> dict[str, bytes]:
        files = call.arg("files", dict)
        if not files:
            raise InvalidArgs("build.compile: 'files' is empty")
        if len(files) > MAX_FILES:
            raise refuse(InvalidArgs, "too-large",
                         f"build.compile: {len(files)} files is over the {MAX_FILES}-file cap")
        out: dict[str, bytes] = {}
        total = 0
        for raw_path, content in files.items():
            rel = _safe_rel(raw_path)
            if isinstance(content, str):
                content = content.encode()
            if not isinstance(content, (bytes, bytearray)):
                raise InvalidArgs(f"build.compile: file {rel!r} must be bytes or text")
            total += len(content)
            if total > MAX_SOURCE_BYTES:
                raise refuse(InvalidArgs, "too-large",
                             f"build.compile: source is over the {MAX_SOURCE_BYTES}-byte cap")
            out[rel] = bytes(content)
        return out

    def _slot(self, principal: Principal) -> None:
        key = str(principal)
        with self._lock:
            if self._active[key] >= MAX_CONCURRENT:
                raise refuse(InvalidArgs, "busy", f"build: {MAX_CONCURRENT} builds already running for {key}")
            self._active[key] += 1

    def _release(self, principal: Principal) -> None:
        with self._lock:
            self._active[str(principal)] -= 1

    def compile(self, call: Any) -> dict[str, Any]:
        lang = call.arg("lang", str)
        files = self._files(call)
        entry = call.arg("entry", str, None)
        if entry is not None:
            entry = _safe_rel(entry)
            if entry not in files:
                raise InvalidArgs(f"build.compile: entry {entry!r} is not among the files")
        flags = tuple(call.arg("flags", list, []))
        if len(flags) > 32 or not all(isinstance(f, str) and len(f) < 200 for f in flags):
            raise InvalidArgs("build.compile: 'flags' must be at most 32 short strings")
        lane = self.runtime.lanes.get(lang)
        avail = lane.availability(self.runtime)
        if not avail.ok:
            raise NotFound(f"build: lane {lang} is not available here: {avail.reason}")
        principal = call.ctx.principal
        self._slot(principal)
        try:
            return self._compile(call, lane, files, entry, flags)
        finally:
            self._release(principal)

    def _compile(self, call: Any, lane: Any, files: dict[str, bytes], entry: str | None,
                 flags: tuple[str, ...]) -> dict[str, Any]:
        tmp_root = self.root / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="b-", dir=tmp_root))
        try:
            src = work / "src"
            for rel, content in files.items():
                target = src / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            digest = tree_digest(src)
            manifest = self._manifest(work, lane.name, digest)
            resolved = ResolvedSource(digest=digest, dir=src, entry=entry)
            try:
                # The core's one pipeline and key; the broker's records live apart from the
                # builder's (cache_dir), so a guest's build is never served to a toolkit build.
                done = pipeline.compile_source(self.runtime, lane.name, manifest, resolved, work=work,
                                               flags=flags, cache_dir=self.root / "cache")
            except BuildFailed as exc:
                raise BuildFailed(exc.message, log=(exc.log or "")[-MAX_LOG:]) from None
            sha, cached, log = done.sha256, done.cached, done.log[-MAX_LOG:]
            with self._db() as db:
                db.execute("INSERT OR IGNORE INTO built VALUES (?,?,?,?)",
                           (call.ctx.principal.tenant, sha, lane.name, time.time()))
            call.target(f"lane:{lane.name}")
            return {"sha256": sha, "size": self.runtime.artifacts.path(sha).stat().st_size, "cached": cached,
                    "log": log}
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _manifest(self, work: Path, lane: str, digest: str) -> Manifest:
        ident = f"build-{digest[:12]}"
        return Manifest(
            path=work / "manifest.org", id=ident, title=ident, version="0.0.0", status="experimental",
            tagline="built through the build capability", exec="command", trust="third-party",
            build_lang=lane, build_src="path:src", cli_bin="main",
        )

    # --- run -------------------------------------------------------------------

    def run(self, call: Any, sha: str) -> dict[str, Any]:
        tenant = call.ctx.principal.tenant
        with self._db() as db:
            row = db.execute("SELECT lane FROM built WHERE tenant=? AND sha256=?", (tenant, sha)).fetchone()
        if row is None:
            raise refuse(CapabilityDenied, "not-built-here",
                         f"build.run: artifact {sha[:12]}… was not built by the build cap for tenant "
                         f"{tenant!r}")
        argv = tuple(call.arg("argv", list, []))
        if len(argv) > MAX_ARGS or not all(isinstance(a, str) for a in argv):
            raise InvalidArgs(f"build.run: 'argv' must be at most {MAX_ARGS} strings")
        stdin = call.arg("stdin", (bytes, str), b"")
        if isinstance(stdin, str):
            stdin = stdin.encode()
        if len(stdin) > MAX_STDIN:
            raise refuse(InvalidArgs, "too-large", f"build.run: stdin over the {MAX_STDIN}-byte cap")
        prof = policy.profile(RUN_PROFILE)
        wanted = call.arg("timeout", (int, float), prof.timeout_s)
        timeout = max(0.01, min(float(wanted), prof.timeout_s, call.ctx.remaining(prof.timeout_s)))
        # One call path: dispatch verifies the bytes, picks the tier (third-party escalates)
        # and runs it with no caps under the run profile.
        result = dispatch.call_artifact(self.runtime, name=f"build-{sha[:12]}", sha256=sha, lane=row[0],
                                        argv=argv,
                                        stdin=bytes(stdin), principal=call.ctx.principal, timeout=timeout,
                                        profile=RUN_PROFILE)
        return {"stdout": result.stdout, "stderr": result.stderr, "exit_code": result.exit_code}
