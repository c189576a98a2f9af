"""The go lane's build cache (GOCACHE): warmed once per machine, copied into each home.

Building the wasip1 standard library is most of a small toolkit's first build (≈20–40 s on
two cores). The lane warms a cache with its own first-party program (``warmup/main.go``,
which imports the commonly used standard packages), and a home's first build starts from a
copy of that cache instead of from nothing.

Where the caches are:

- **machine cache**: ``$WB_GO_CACHE``, else ``~/.cache/wbcore/go``. Written only by
  ``python -m wbcore_lane_go warm`` (``dev.py setup``, CI): never by a build.
- **home cache**: ``$WB_HOME/cache/go-<version>``. A toolkit build sees it through a private
  overlay (``/cache``): it reads it, and whatever it writes vanishes with the sandbox, so
  one toolkit cannot poison another's build.

Why the machine cache is trusted, and how far. Go checks a cache entry only by its action
ID (a hash of the inputs); the compiled output an entry points at is used as it is. A
planted or damaged cache could therefore put code of someone else's choosing into every
toolkit built from it. So a home seeds only from a cache that:

1. the lane itself wrote: the warm-up builds into a fresh staging folder in the build
   sandbox, then :func:`copy_tree` publishes it, and the marker ``.wb-warm`` records the
   recipe (Go version + warm-up sources) and the digest of every byte published;
2. sits where only its owner writes: the cache, each folder and file in it, and its parent
   are this user's (or root's) and not writable by group or others; no symlink, no device,
   no hard-linked file inside; bounded in size and file count;
3. still matches its marker: the recipe is this lane's, and the bytes *copied into the home*
   hash to the digest the marker records (checked on the copy, so a change during the copy
   cannot slip through).

Anything else is refused with a reason, and the home warms its own cache as before. The
copy is a copy: new files owned by the home, never a hard link or a bind of the machine
cache, so nothing a home's build does can reach the machine cache. What this does not
guard against: a process of the same user that rewrites cache and marker together; such a
process could as well rewrite the Go toolchain in the venv.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

from wbcore_runtime.store import leftovers
from wbcore_runtime.build import BuildFailed
from wbcore_runtime.contract.sandbox import Bind, BuildSandboxDriver, SandboxLimits

WARMUP = Path(__file__).parent / "warmup"
MARKER = ".wb-warm"
#: The marker's first line; a change of format or of what the cache holds changes it.
MARKER_HEAD = "wbcore-lane-go warm cache v1"
#: Bounds of a cache being copied (go1.27's warm cache: 35 MB in under 600 files).
MAX_BYTES = 2 << 30
MAX_FILES = 100_000
_CHUNK = 1 << 20


def machine_dir(env: Mapping[str, str]) -> Path:
    """``$WB_GO_CACHE``, else ``~/.cache/wbcore/go``: the cache ``python -m wbcore_lane_go warm`` writes."""
    base = env.get("WB_GO_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "wbcore" / "go"


def home_dir(version: str, home: Path) -> Path:
    return home / "cache" / f"go-{version}"


def recipe(version: str) -> str:
    """What a warm cache was warmed with: the Go version and the warm-up program's files."""
    h = hashlib.sha256(version.encode() + b"\0")
    for p in sorted(WARMUP.iterdir()):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def marker_text(recipe_id: str, tree: str) -> str:
    return f"{MARKER_HEAD}\nrecipe {recipe_id}\ntree {tree}\n"


def read_marker(cache: Path) -> tuple[str, str] | None:
    """(recipe, tree digest) of ``cache``'s marker, or None when it has none or a malformed one."""
    try:
        lines = (cache / MARKER).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if (len(lines) != 3 or lines[0] != MARKER_HEAD or not lines[1].startswith("recipe ")
            or not lines[2].startswith("tree ")):
        return None
    return lines[1].removeprefix("recipe "), lines[2].removeprefix("tree ")


def is_warm(cache: Path, recipe_id: str) -> bool:
    found = read_marker(cache)
    return found is not None and found[0] == recipe_id


class Untrusted(Exception):
    """A cache this lane may not seed from; the message says why."""


def _private(path: Path, st: os.stat_result) -> None:
    """``Untrusted`` unless ``path`` (lstat ``st``) is this user's (or root's) and not
    writable by group or others."""
    if st.st_uid not in (os.geteuid(), 0):
        raise Untrusted(f"{path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o022 and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        raise Untrusted(f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")


def _create(path: Path | None) -> BinaryIO:
    if path is None:
        return open(os.devnull, "wb")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    os.fchmod(fd, 0o644)  # whatever the umask: a group-writable cache is refused
    return os.fdopen(fd, "wb")


def copy_tree(src: Path, dst: Path | None, *, check: bool) -> str:
    """Copy ``src`` into the new folder ``dst`` (read, hash, write: never a link), skipping
    the marker; returns the digest of what was copied (``dst`` None: only the digest).

    Anything but folders and regular files (a symlink, a device), or a tree past
    :data:`MAX_BYTES` / :data:`MAX_FILES`, is ``Untrusted``; with ``check``, so is a tree
    not private to this user (:func:`_private`) or a hard-linked file."""
    tree = hashlib.sha256()
    files = total = 0
    if dst is not None:
        os.mkdir(dst)
        os.chmod(dst, 0o755)
    stack = [Path()]
    while stack:
        rel = stack.pop()
        with os.scandir(src / rel) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            name = rel / entry.name
            if name == Path(MARKER):
                continue
            st = entry.stat(follow_symlinks=False)
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise Untrusted(f"{src / name} is not a regular file or folder")
            if check:
                _private(src / name, st)
            if stat.S_ISDIR(st.st_mode):
                if dst is not None:
                    os.mkdir(dst / name)
                    os.chmod(dst / name, 0o755)  # whatever the umask: a group-writable cache is refused
                tree.update(b"D" + str(name).encode() + b"\0")
                stack.append(name)
                continue
            if check and st.st_nlink != 1:
                raise Untrusted(f"{src / name} is hard-linked ({st.st_nlink} names)")
            files += 1
            if files > MAX_FILES:
                raise Untrusted(f"{src} holds more than {MAX_FILES} files")
            h = hashlib.sha256()
            # O_NOFOLLOW: a file swapped for a symlink after the scan is refused, not followed
            fd = os.open(src / name, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fin, _create(dst / name if dst is not None else None) as fout:
                while chunk := fin.read(_CHUNK):
                    total += len(chunk)
                    if total > MAX_BYTES:
                        raise Untrusted(f"{src} holds more than {MAX_BYTES} bytes")
                    h.update(chunk)
                    fout.write(chunk)
            tree.update(b"F" + str(name).encode() + b"\0" + h.digest())
    return tree.hexdigest()


def trusted_source(machine: Path, recipe_id: str) -> tuple[str, str]:
    """(recipe, tree digest) of the machine cache's marker, or ``Untrusted`` saying why the
    lane may not seed from it (the bytes themselves are checked as they are copied)."""
    try:
        st = os.lstat(machine)
        parent = os.lstat(machine.parent)
    except FileNotFoundError:
        raise Untrusted(f"there is no machine cache at {machine} (python -m wbcore_lane_go warm)") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{machine} is not a folder (a symlink is not followed)")
    _private(machine.parent, parent)
    _private(machine, st)
    mst = os.lstat(machine / MARKER) if (machine / MARKER).is_file() else None
    if mst is None or not stat.S_ISREG(mst.st_mode):
        raise Untrusted(f"{machine} has no {MARKER} marker: not a cache this lane warmed")
    _private(machine / MARKER, mst)
    found = read_marker(machine)
    if found is None:
        raise Untrusted(f"{machine / MARKER} is not a marker this lane writes")
    if found[0] != recipe_id:
        raise Untrusted(f"{machine} was warmed for another Go version or warm-up recipe")
    return found


def seed(machine: Path, target: Path, recipe_id: str, own: Callable[[Path], None]) -> None:
    """Make ``target`` (absent, or not warm) a checked copy of the machine cache, handed to
    the sandbox's user by ``own``; ``Untrusted`` (nothing changed) when it may not be."""
    _, want = trusted_source(machine, recipe_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.seeding-", dir=target.parent))
    try:
        got = copy_tree(machine, staging / "cache", check=True)
        if got != want:
            raise Untrusted(f"{machine} does not match its marker (changed or damaged since it was warmed)")
        (staging / "cache" / MARKER).write_text(marker_text(recipe_id, got))
        own(staging / "cache")
        leftovers.replace_dir(staging / "cache", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def limits(wall: float) -> SandboxLimits:
    # go build runs several compiler processes, each with many threads (RLIMIT_NPROC counts threads)
    return SandboxLimits(wall_seconds=wall, cpu_seconds=int(wall * 2) + 10, processes=512, tmp_bytes=1 << 30,
                  out_bytes=1 << 30, out_files=200_000)


def go_env(cache_dir: str) -> dict[str, str]:
    return {
        "GOROOT": "/go", "GOOS": "wasip1", "GOARCH": "wasm", "CGO_ENABLED": "0",
        "GOCACHE": cache_dir, "GOPATH": "/tmp/gopath", "GOMODCACHE": "/tmp/gopath/pkg/mod",
        "GOPROXY": "off", "GOSUMDB": "off", "GOTOOLCHAIN": "local", "GOTELEMETRY": "off",
        "GOENV": "off", "GOWORK": "off", "GOFLAGS": "-mod=readonly", "HOME": "/tmp",
    }


def _locked(cache: Path) -> int:
    cache.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache.parent / f".{cache.name}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # one warm-up or seeding at a time; the others wait and reuse it
    return fd


def warm(goroot: Path, version: str, cache: Path, box: BuildSandboxDriver, *, for_sandbox: bool,
         progress: Callable[[str], None] | None = None, wall: float = 600) -> float:
    """Warm ``cache`` with the lane's warm-up program unless warm; seconds spent.

    The build writes a fresh ``/out/cache`` in the sandbox; :func:`copy_tree` publishes it
    (files owned by this process, the marker records their digest). ``for_sandbox``: a
    home's cache, handed to the sandbox's user so its overlay is writable inside; the
    machine cache stays this user's."""
    rid = recipe(version)
    good = is_warm if for_sandbox else is_trusted
    if good(cache, rid):
        return 0.0
    fd = _locked(cache)
    try:
        if good(cache, rid):
            return 0.0
        if progress:
            progress(f"{version}: building the wasip1 standard library into {cache} (once, ~20-40 s)")
        t0 = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix=f".{cache.name}.warming-", dir=cache.parent))
        try:
            res = box.run(
                ["/go/bin/go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o",
                 "/tmp/warm.wasm", "."],
                binds=[Bind(goroot, "/go"), Bind(WARMUP, "/src")],
                out_dir=staging / "out", limits=limits(wall), env=go_env("/out/cache"), cwd="/src",
            )
            if not res.ok:
                raise BuildFailed(f"go cache warm-up failed (exit {res.returncode}, limit {res.limit})",
                                  log=res.log)
            try:
                tree = copy_tree(staging / "out" / "cache", staging / "cache", check=False)
            except Untrusted as exc:
                raise BuildFailed(f"go cache warm-up wrote a cache the lane cannot publish: {exc}",
                                  log=res.log) from None
            (staging / "cache" / MARKER).write_text(marker_text(rid, tree))
            if for_sandbox:
                # Go updates its cache as it reads it; through the overlay, writes need the
                # sandbox user to own the tree (they still vanish with the overlay).
                box.own_for_sandbox(staging / "cache")
            leftovers.replace_dir(staging / "cache", cache)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return time.monotonic() - t0
    finally:
        os.close(fd)


def is_trusted(cache: Path, rid: str) -> bool:
    """Whether the machine cache at ``cache`` is one a home would seed from (else warm it anew)."""
    try:
        return trusted_source(cache, rid)[1] == copy_tree(cache, None, check=True)
    except (Untrusted, OSError):
        return False


def ready(goroot: Path, version: str, home: Path, env: Mapping[str, str], box: BuildSandboxDriver, *,
          progress: Callable[[str], None] | None = None, wall: float = 600) -> tuple[Path, str]:
    """The home's warm cache, and what it took: seeded from the machine cache when that is
    trusted (:func:`seed`), else warmed in the home; "" when it was warm already."""
    rid = recipe(version)
    cache = home_dir(version, home)
    if is_warm(cache, rid):
        return cache, ""
    fd = _locked(cache)
    try:
        if is_warm(cache, rid):
            return cache, ""
        machine = machine_dir(env)
        t0 = time.monotonic()
        try:
            seed(machine, cache, rid, box.own_for_sandbox)
            return cache, f"seeded the go build cache from {machine} in {time.monotonic() - t0:.1f}s"
        except Untrusted as why:
            refused = str(why)
    finally:
        os.close(fd)
    if progress:
        progress(f"not seeding from the machine cache: {refused}")
    spent = warm(goroot, version, cache, box, for_sandbox=True, progress=progress, wall=wall)
    return cache, f"not seeded ({refused}); warmed the go build cache in {spent:.1f}s"
