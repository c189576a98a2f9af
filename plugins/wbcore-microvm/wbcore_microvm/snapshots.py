"""Named snapshots of prepared micro-VMs (``wbx snapshot save|restore|list|delete``).

The tier's own snapshot (:func:`wbcore_microvm.tiers.prepare`) is a guest that booted and
answered its agent's handshake. A *named* snapshot is a layer over it: a VM restored from
its parent (the tier's snapshot, or another named snapshot), set up by a few steps — files
put into the guest (``--put HOST:GUEST``) and commands run by its agent (``--run``), e.g. a
toolkit's files installed and warmed — and migrated again to a file. Restoring it gives a
guest in exactly that state in well under a second of QEMU work (``bench/snapshots.py``).

The layers::

    guest image (kernel + initramfs, content-addressed in the tier's cache)
      └─ the tier's snapshot (booted, handshake-ready; per image, accelerator, QEMU)
           └─ named snapshot  (parent + steps)
                └─ named snapshot --from it  (a per-toolkit layer) ...

The guest has no disk (its root is an initramfs, its ``/tmp`` a tmpfs), so every layer is a
whole migration stream (the VM's RAM and devices), not a disk delta; what is layered is the
*identity*: a layer's key is ``sha256(parent key, steps)`` (:func:`layer_key`), so saving
the same steps over the same parent again finds the layer already there, and a layer whose
base image, accelerator or QEMU changed is refused at restore with the fix named.

Where: ``$WB_HOME/snapshots/microvm/<name>/`` (``vm.mig``, ``meta.json``; folder 0700, the
files 0600: a snapshot holds its guest's session secret). A save builds in a hidden
folder beside it and renames it into place (a killed save leaves no half snapshot; hidden
leftovers are removed by the next save). The store is bounded by a size budget
(``WB_SNAPSHOT_BUDGET``, e.g. ``2G``; default :data:`DEFAULT_BUDGET`): after each save, the
least recently used snapshots (restore and save touch a snapshot) are evicted until the
store fits (:func:`evict_lru`); the one just saved is never evicted, and one that alone
exceeds the budget is refused.

Security: every VM restored from one snapshot shares its guest state, including the
kernel's RNG (the agent reseeds it from the host at each handshake) and its session secret
(on the guest's kernel command line). Snapshots are the deployer's: only ``wbx`` on this
home makes them, from the tier's own image.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_microvm import image as _image
from wbcore_microvm import tiers
from wbcore_microvm import vm as _vm
from wbcore_runtime.wire import frames
from wbcore_runtime.contract.calls import LimitExceeded
from wbcore_runtime.contract.canonical import canonical_json
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout

#: The store's size budget when ``WB_SNAPSHOT_BUDGET`` is unset.
DEFAULT_BUDGET = 2 << 30
#: A name: what a folder, a command line and a log line can all carry unquoted.
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
#: Bounds of a save's steps.
MAX_STEPS = 32
MAX_PUT_BYTES = 8 << 20
STEP_TIMEOUT_S = 120.0
#: The most output a restore's command returns (each of stdout and stderr).
OUTPUT_CAP = 4 << 20
#: A migration stream is the guest's RAM and devices: anything much larger is not one.
MAX_SNAPSHOT_BYTES = (_vm.MEMORY_MB + 64) << 20


def store_root(home: Path) -> Path:
    return home / "snapshots" / "microvm"


def budget(env: dict[str, str]) -> int:
    """``WB_SNAPSHOT_BUDGET`` in bytes (``500M``, ``2G``, ``1048576``), else :data:`DEFAULT_BUDGET`."""
    raw = (env.get("WB_SNAPSHOT_BUDGET") or "").strip()
    if not raw:
        return DEFAULT_BUDGET
    m = re.match(r"^(\d+)\s*([kmgt]?)i?b?$", raw, re.IGNORECASE)
    if not m or int(m.group(1)) <= 0:
        raise InvalidArgs(
            f"WB_SNAPSHOT_BUDGET={raw!r}: write a size in bytes or with K, M, G (e.g. 2G, 500M)"
        )
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise InvalidArgs(
            f"snapshot name {name!r}: use 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        )
    return name


def layer_key(parent_key: str, steps: list[dict[str, Any]]) -> str:
    """A layer's cache identity: its parent's key and its steps (a put by its content's digest)."""
    return hashlib.sha256(canonical_json([parent_key, steps])).hexdigest()


def base_key(snap: tiers.Snapshot) -> str:
    """The tier snapshot's key: its folder's name is the hash of image, accelerator, QEMU, memory."""
    return "base:" + snap.path.parent.name


@dataclass(frozen=True, slots=True)
class Saved:
    """One named snapshot in the store."""

    name: str
    dir: Path
    meta: dict[str, Any]

    @property
    def path(self) -> Path:
        return self.dir / "vm.mig"

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.dir.iterdir() if p.is_file())

    @property
    def last_used(self) -> float:
        return self.dir.stat().st_mtime

    def touch(self) -> None:
        try:
            os.utime(self.dir)
        except OSError:
            pass


def _load(d: Path) -> Saved | None:
    try:
        meta = json.loads((d / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not (d / "vm.mig").is_file():
        return None
    return Saved(d.name, d, meta)


def list_saved(home: Path) -> list[Saved]:
    root = store_root(home)
    out = [s for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")
           for s in [_load(d)] if s is not None] if root.is_dir() else []
    return out


def get(home: Path, name: str) -> Saved:
    check_name(name)
    s = _load(store_root(home) / name)
    if s is None:
        have = ", ".join(x.name for x in list_saved(home)) or "none yet"
        raise NotFound(f"no snapshot {name!r} in {store_root(home)} (have: {have}); make one with: "
                       f"wbx snapshot save {name} --run '...'")
    return s


def _remove(d: Path) -> None:
    """Rename aside, then remove: a reader never sees half a snapshot."""
    trash = d.with_name(f".trash-{d.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(d, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def delete(home: Path, name: str) -> Saved:
    s = get(home, name)
    with _store_lock(home):
        _remove(s.dir)
    return s


def evict_lru(home: Path, max_bytes: int, keep: frozenset[str] = frozenset()) -> list[Saved]:
    """Remove the least recently used snapshots until the store is within ``max_bytes``;
    never one named in ``keep``. Returns the evicted ones, oldest first."""
    saved = sorted(list_saved(home), key=lambda s: s.last_used)
    total = sum(s.size for s in saved)
    evicted: list[Saved] = []
    for s in saved:
        if total <= max_bytes:
            break
        if s.name in keep:
            continue
        size = s.size
        _remove(s.dir)
        total -= size
        evicted.append(s)
    return evicted


class _store_lock:
    """One save, delete or eviction at a time per home (restores need none: renames are atomic)."""

    def __init__(self, home: Path) -> None:
        self.root = store_root(home)

    def __enter__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.fh = open(self.root / ".lock", "a+")
        fcntl.flock(self.fh, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        self.fh.close()


# --- what a restore needs --------------------------------------------------------------


def _base(runtime: Any) -> tiers.Snapshot:
    ok, why = tiers._probe_tools()
    if not ok:
        raise NotFound(f"tier microvm is unavailable: {why}")
    return tiers.prepare(_image.cache_root(runtime.home, dict(runtime.env)))


def as_tier_snapshot(runtime: Any, saved: Saved) -> tiers.Snapshot:
    """The named snapshot as the tier restores it: refused when it was made from another
    guest image, accelerator, QEMU or memory size than this machine's tier snapshot."""
    base = _base(runtime)
    meta = saved.meta
    if meta.get("base") != base_key(base):
        raise InvalidArgs(
            f"snapshot {saved.name!r} was saved over another base "
            f"(guest image {str(meta.get('image'))[:12]}, "
            f"{meta.get('accel')}, {meta.get('qemu')}); this machine's is image {base.image.digest[:12]}, "
            f"{base.accel}, {_vm.qemu_version()}: save it again (wbx snapshot delete {saved.name}, then "
            f"wbx snapshot save {saved.name} ...)"
        )
    return tiers.Snapshot(base.image, base.accel, saved.path, bytes.fromhex(meta["secret"]), 0.0,
                          float(meta.get("save_s", 0.0)))


# --- the guest conversation ------------------------------------------------------------


def exec_in(
    vm: _vm.Vm, secret: bytes, argv: list[str], stdin: bytes, timeout_s: float
) -> tuple[int, bytes, bytes]:
    """Run ``argv`` through the guest agent (allowlist, uid 1000, a fresh ``/tmp/w``); no caps."""
    deadline = time.monotonic() + timeout_s
    vm.send_frame(
        frames.seal(
            frames.EXEC,
            secret,
            {
                "id": 1, "argv": argv, "deadline_ms": int(timeout_s * 1000), "stdout_cap": OUTPUT_CAP,
                "stderr_cap": OUTPUT_CAP,
            },
            stdin,
        )
    )
    while True:
        kind, payload = vm.recv(deadline + 2.0)
        if kind == frames.EXEC_RESULT:
            break
        if kind == frames.BROKER_CALL:
            raise InvalidArgs(f"{argv[0]}: snapshot steps and restores have no caps (wb-cap is for calls: "
                              "wbx run with WB_MICROVM_SNAPSHOT)")
        if kind == frames.REFUSED:
            obj, _ = frames.unpack(payload)
            raise InvalidArgs(f"the guest agent refused {argv[0]}: {obj.get('message')}")
    obj, blobs = frames.unpack(payload)
    if "denied" in obj:
        raise InvalidArgs(f"{argv[0]}: {obj['denied']} (the guest runs busybox applets of its allowlist)")
    out, err = frames.blobs_of(blobs, 2, frames.EXEC_RESULT)
    if obj.get("timed_out") is True:
        raise Timeout(f"{' '.join(argv)}: over its {timeout_s:g} s deadline in the guest")
    if obj.get("over") in ("stdout", "stderr"):
        raise LimitExceeded(
            f"{' '.join(argv)}: its {obj['over']} passed {OUTPUT_CAP} bytes", limit=str(obj["over"])
        )
    sig = int(obj.get("signal") or 0)
    return (128 + sig if sig else int(obj.get("exit", 1))), out, err


def _read_put(p: str, host: str) -> bytes:
    """The deployer's file, read once: checked on the open descriptor (a FIFO is refused, not
    waited on) and capped while it is read (a file that grows after its size was seen)."""
    bad = f"--put {p!r}: {host} must be a regular file of at most {MAX_PUT_BYTES >> 20} MiB"
    try:
        fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgs(f"--put {p!r}: cannot read {host}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PUT_BYTES:
            raise InvalidArgs(bad)
        data = fh.read(MAX_PUT_BYTES + 1)
    if len(data) > MAX_PUT_BYTES:
        raise InvalidArgs(bad)
    return data


def parse_steps(runs: list[str], puts: list[str]) -> list[dict[str, Any]]:
    """``--put HOST:GUEST`` steps (first, in order) then ``--run 'CMD ARGS'`` steps."""
    import shlex

    steps: list[dict[str, Any]] = []
    for p in puts:
        host, sep, guest = p.rpartition(":")
        if not sep or not host or not guest.startswith("/tmp/") or ".." in guest.split("/"):
            raise InvalidArgs(
                f"--put {p!r}: write it as HOST_FILE:/tmp/GUEST_PATH (the guest's writable place is /tmp; "
                "/tmp/w is each command's own scratch, emptied per command)"
            )
        if guest == "/tmp/w" or guest.startswith("/tmp/w/"):
            raise InvalidArgs(
                f"--put {p!r}: /tmp/w is emptied before every command; put it elsewhere under /tmp"
            )
        data = _read_put(p, host)
        steps.append({"put": guest, "sha256": hashlib.sha256(data).hexdigest(), "_data": data})
    for r in runs:
        try:
            argv = shlex.split(r)
        except ValueError as exc:
            raise InvalidArgs(f"--run {r!r}: {exc}") from None
        if not argv:
            raise InvalidArgs("--run '': give a command")
        steps.append({"run": argv})
    if len(steps) > MAX_STEPS:
        raise InvalidArgs(f"a snapshot takes at most {MAX_STEPS} steps (got {len(steps)})")
    return steps


def _run_steps(vm: _vm.Vm, secret: bytes, steps: list[dict[str, Any]], say: Any) -> None:
    for st in steps:
        if "put" in st:
            guest = st["put"]
            argv = ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", guest]
            code, _, err = exec_in(vm, secret, argv, st["_data"], STEP_TIMEOUT_S)
            what = f"--put {guest}"
        else:
            code, _, err = exec_in(vm, secret, st["run"], b"", STEP_TIMEOUT_S)
            what = f"--run {' '.join(st['run'])}"
        if code != 0:
            raise InvalidArgs(
                f"{what}: exit {code} in the guest: {err.decode(errors='replace').strip()[-400:]}"
            )
        say(f"{what}: ok")


def save(
    runtime: Any, name: str, steps: list[dict[str, Any]],
    *,
    parent: str | None = None, replace: bool = False, progress: Any = None,
) -> tuple[Saved, bool, list[Saved]]:
    """Restore ``parent`` (default: the tier's snapshot), run ``steps``, migrate to the store
    as ``name``. Returns the snapshot, whether it was already there (same key), and the
    snapshots evicted to fit the budget."""
    say = progress or (lambda _msg: None)
    check_name(name)
    limit = budget(dict(runtime.env))
    base = _base(runtime)
    if parent is None:
        src, pkey, pname = base, base_key(base), "(tier snapshot)"
    else:
        psaved = get(runtime.home, parent)
        src, pkey, pname = as_tier_snapshot(runtime, psaved), str(psaved.meta["key"]), parent
    public = [{k: v for k, v in st.items() if not k.startswith("_")} for st in steps]
    key = layer_key(pkey, public)
    home = runtime.home
    root = store_root(home)
    with _store_lock(home):
        for d in root.iterdir():  # what a killed save or delete left
            if d.name.startswith((".tmp-", ".trash-")) and time.time() - d.stat().st_mtime > 3600:
                shutil.rmtree(d, ignore_errors=True)
        old = _load(root / name)
        if old is not None and old.meta.get("key") == key:
            old.touch()
            return old, True, []
        if old is not None and not replace:
            raise InvalidArgs(
                f"snapshot {name!r} exists with other steps or another parent: pick another name, "
                f"or replace it with --replace (or wbx snapshot delete {name})"
            )
        tmp = root / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        try:
            t0 = time.monotonic()
            say(f"restoring {pname}")
            vm = _vm.Vm(src.image, src.accel, src.secret, incoming=src.path, qmp=True, sandbox=False)
            try:
                end = t0 + tiers.RESTORE_S
                try:
                    vm.connect(end)
                    vm.handshake(end)
                except (Timeout, _vm.GuestGone, frames.FrameError) as exc:
                    raise NotFound(
                        f"the micro-VM did not come up from {pname} ({exc}): {vm.stderr()}"
                    ) from None
                _run_steps(vm, src.secret, steps, say)
                # As prepare does: hang up so the agent forgets this handshake before the save.
                vm.hangup()
                time.sleep(tiers.HANGUP_S)
                say("saving")
                t1 = time.monotonic()
                vm.snapshot(tmp / "vm.mig")
                save_s = time.monotonic() - t1
            finally:
                vm.kill()
            size = (tmp / "vm.mig").stat().st_size
            if size > MAX_SNAPSHOT_BYTES or size > limit:
                over = ("the store budget (WB_SNAPSHOT_BUDGET)" if size > limit
                        else "what a guest migration can be")
                raise LimitExceeded(f"snapshot {name!r}: {size >> 20} MiB is over {over}",
                                    limit="snapshot_bytes")
            meta = {
                "name": name, "key": key, "parent": parent, "parent_key": pkey, "base": base_key(base),
                "image": base.image.digest, "accel": base.accel, "qemu": _vm.qemu_version(),
                "memory_mb": _vm.MEMORY_MB, "secret": src.secret.hex(), "steps": public,
                "created": time.time(), "save_s": round(save_s, 3),
                "total_s": round(time.monotonic() - t0, 3),
            }
            fd = os.open(tmp / "meta.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(meta, sort_keys=True, indent=1) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            if old is not None:
                _remove(old.dir)
            os.rename(tmp, root / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        evicted = evict_lru(home, limit, keep=frozenset({name}))
    saved = _load(root / name)
    assert saved is not None
    return saved, False, evicted


@dataclass(frozen=True, slots=True)
class Restored:
    name: str
    accel: str
    restore_s: float
    exit: int | None
    stdout: bytes
    stderr: bytes


def restore(
    runtime: Any, name: str, argv: list[str], stdin: bytes = b"", timeout_s: float = 60.0
) -> Restored:
    """A VM restored from ``name`` (sandboxed as a call's), authenticated (``restore_s``
    is the time from QEMU's start to the agent's answer), ``argv`` run in it if given,
    then torn down."""
    saved = get(runtime.home, name)
    snap = as_tier_snapshot(runtime, saved)
    saved.touch()
    t0 = time.monotonic()
    vm = _vm.Vm(snap.image, snap.accel, snap.secret, incoming=snap.path)
    try:
        end = t0 + min(tiers.RESTORE_S, timeout_s)
        try:
            vm.connect(end)
            vm.handshake(end)
        except (Timeout, _vm.GuestGone, frames.FrameError) as exc:
            raise NotFound(f"the micro-VM did not come up from snapshot {name!r} ({exc}): {vm.stderr()}; "
                           f"delete it and save it again (wbx snapshot delete {name})") from None
        restore_s = time.monotonic() - t0
        code: int | None = None
        out = err = b""
        if argv:
            code, out, err = exec_in(vm, snap.secret, argv, stdin, max(1.0, timeout_s - restore_s))
        return Restored(name, snap.accel, restore_s, code, out, err)
    finally:
        vm.kill()


__all__ = ["DEFAULT_BUDGET", "Restored", "Saved", "as_tier_snapshot", "budget", "delete", "evict_lru", "get",
           "layer_key", "list_saved", "parse_steps", "restore", "save", "store_root"]
