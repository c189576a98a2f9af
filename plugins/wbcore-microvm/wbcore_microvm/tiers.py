"""The ``microvm`` tier (rung 3): a posix command in a QEMU micro-VM restored from a snapshot.

Once per image (and accelerator, and QEMU version) a VM boots cold, its guest agent
answers the handshake, and QMP migrates it to a snapshot file under the cache
(:func:`wbcore_microvm.image.cache_root`). Every call then gets a QEMU restored from that
snapshot (``-incoming fd:N``, QEMU's seccomp sandbox on, no network device) — one the
:class:`Pool` restored, authenticated and warmed up ahead of it, else its own — and:

1. ``Ping`` with the session secret → ``Pong`` (the agent answers only that secret);
2. ``Exec`` (sealed with the secret): argv, stdin, the time left of the call's deadline,
   the output caps and rlimits of the call's profile. The agent resolves argv[0] on the
   guest's PATH and runs it only if it is on the image's allowlist, as uid 1000 under the
   rlimits, and SIGKILLs it at the deadline;
3. each ``wb-cap <cap> <json>`` of the command is a ``BrokerCall``; the host answers it with
   the Dock (``Dock.call_raw`` under a context made from the request: principal, caps,
   deadline, allowed hosts, toolkit), converting the guest's JSON to the Dock's CBOR and
   back, on a broker thread while the caller keeps the deadline — the core's one caps
   bridge (``wbcore_runtime.wire.capbridge.HostBridge.answer_posix``), as at os_process and container;
4. ``ExecResult``: exit code and output, mapped to the results and errors of the other
   tiers (``Timeout``, ``LimitExceeded``, ``GuestTrap``).

The host's watchdog SIGKILLs QEMU at the deadline + :data:`GRACE_S` whatever the guest
does; every VM is torn down after its call (a call never sees another's guest).
The call's usage names the accelerator (``isolation: kvm|tcg``).

A call with ``--mount`` folders (``wbx run --mount``, checked by the core) restores the
snapshot with virtio-9p slots that ``wbx shell --mount`` uses (:mod:`wbcore_microvm.shell`),
its QEMU exporting the folders, and the agent mounts them before the ``Exec``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import math
import os
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_microvm import image as _image
from wbcore_microvm import vm as _vm
from wbcore_runtime.wire import frames
from wbcore_runtime.build.builder import read_posix_manifest
from wbcore_runtime.contract.calls import CallResult, CommandRequest, GuestTrap, LimitExceeded, Usage
from wbcore_runtime.wire.capbridge import HostBridge
from wbcore_runtime.contract.errors import CapabilityDenied, Internal, InvalidArgs, NotFound, Timeout
from wbcore_runtime.contract.drivers import Availability

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime

#: The host's watchdog fires this long after the call's deadline (the guest's own fires at it).
GRACE_S = 1.0
#: A cold boot (and the accelerator probe's) must reach the agent's Pong within these.
COLD_BOOT_S = 300.0
KVM_PROBE_S = 20.0
#: A restored VM must answer its Ping within this, outside the call's deadline.
RESTORE_S = 60.0
#: Bumped when what a snapshot holds changes (its folder's name includes it).
SNAPSHOT_RECIPE = 2
#: How long the agent is given to notice the host hung up before the snapshot.
HANGUP_S = 1.0
PROCESSES = 64
#: The most stdout (and stderr) one call returns: both fit in one frame under ``frames.MAX_FRAME``.
OUTPUT_CAP = 31 << 20
#: Images and snapshots of other inputs are removed after this long unused (a new one is built).
PRUNE_S = 86400.0
#: VMs restored ahead of calls, per snapshot and process.
POOL_SIZE = 1
NOFILE = 256
FILE_BYTES = 32 << 20
#: The largest broker request a guest may send (JSON text) and answer it gets.
MAX_BROKER_JSON = 1 << 20

_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A booted guest saved to a file: restore it with the same image, accelerator and secret."""

    image: _image.Image
    accel: str
    path: Path
    secret: bytes
    cold_boot_s: float
    snapshot_s: float


@lru_cache(maxsize=1)
def _probe_tools() -> tuple[bool, str]:
    if _vm.qemu_path() is None:
        return False, (
            "qemu-system-x86_64 is not installed; install with: apt-get install "
            "--no-install-recommends qemu-system-x86 busybox-static (or wbx tiers install microvm)"
        )
    try:
        _image.busybox()
        _image.compiler()
    except NotFound as exc:
        return False, exc.message
    return True, _vm.qemu_version()


def available() -> Availability:
    ok, why = _probe_tools()
    if not ok:
        return Availability.no(why)
    accel = _cached_accel()
    how = (
        f"accelerator {accel}"
        if accel
        else "accelerator probed at first use (kvm if a guest answers, else tcg)"
    )
    return Availability.yes(f"{why}, {how}; posix commands from a busybox guest; caps bridged")


_accel_seen: dict[str, str] = {}


def _cached_accel() -> str:
    """The accelerator this process (or, with ``$WB_MICROVM_CACHE``, an earlier one) probed."""
    if _accel_seen:
        return next(iter(_accel_seen.values()))
    shared = os.environ.get("WB_MICROVM_CACHE")
    if shared:
        try:
            known = json.loads((Path(shared) / "accel.json").read_text())
        except (OSError, ValueError):
            return ""
        if not isinstance(known, dict):
            return ""
        qv = _vm.qemu_version()
        found = [v for k, v in known.items() if k.endswith(f":{qv}") and v in ("kvm", "tcg")]
        return found[-1] if found else ""
    return ""


def probe_accel(img: _image.Image, cache: Path) -> str:
    """``kvm`` when a guest actually answers under KVM within :data:`KVM_PROBE_S`, else
    ``tcg``; decided once per guest kernel and QEMU version and kept in ``cache``."""
    key = f"{img.kernel_version}:{_vm.qemu_version()}"
    if key in _accel_seen:
        return _accel_seen[key]
    record = cache / "accel.json"
    try:
        known = json.loads(record.read_text())
    except (OSError, ValueError):
        known = {}
    accel = known.get(key) if isinstance(known, dict) else None
    if accel not in ("kvm", "tcg"):
        accel = "tcg"
        if _vm.kvm_openable():
            vm = _vm.Vm(img, "kvm", frames.new_secret(), sandbox=False)
            try:
                end = time.monotonic() + KVM_PROBE_S
                vm.connect(end)
                vm.handshake(end)
                accel = "kvm"
            except (Timeout, _vm.GuestGone, frames.FrameError):
                accel = "tcg"
            finally:
                vm.kill()
        known = known if isinstance(known, dict) else {}
        known[key] = accel
        tmp = record.with_name(f".accel.{os.getpid()}")
        tmp.write_text(json.dumps(known, sort_keys=True, indent=1) + "\n")
        os.rename(tmp, record)
    _accel_seen[key] = accel
    return accel


def prepare(cache: Path, progress: Any = None, *, mount_slots: int = 0) -> Snapshot:
    """The snapshot for this machine: built once (image, probe, cold boot, migrate), under a
    file lock so concurrent processes share one cold boot. ``mount_slots`` > 0: a separate
    snapshot whose VM has that many virtio-9p devices (shells with ``--mount``; calls never
    use it)."""
    say = progress or (lambda _msg: None)
    cache.mkdir(parents=True, exist_ok=True)
    with _lock, open(cache / ".lock", "a+") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        say("building the guest image (kernel, busybox, agent)")
        img = _image.build(cache)
        say("probing the accelerator")
        accel = probe_accel(img, cache)
        qv = _vm.qemu_version()
        import hashlib

        slots = f":9p{mount_slots}" if mount_slots else ""
        tag = hashlib.sha256(
            f"{SNAPSHOT_RECIPE}:{img.digest}:{accel}:{qv}:{_vm.MEMORY_MB}{slots}".encode()
        ).hexdigest()[:24]
        sdir = cache / "snapshots" / tag
        meta_path = sdir / "meta.json"
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            try:
                os.utime(sdir)  # in use: another snapshot's build prunes only unused ones (_prune)
            except OSError:
                pass
            return Snapshot(img, accel, sdir / "vm.mig", bytes.fromhex(meta["secret"]), meta["cold_boot_s"],
                            meta["snapshot_s"])
        sdir.mkdir(parents=True, exist_ok=True)
        os.chmod(sdir, 0o700)  # the snapshot holds the guest's secret
        say(f"cold boot under {accel} (once; then calls restore the snapshot)")
        secret = frames.new_secret()
        t0 = time.monotonic()
        vm = _vm.Vm(img, accel, secret, qmp=True, sandbox=False,
                    shares=[(None, False)] * mount_slots if mount_slots else None)
        try:
            end = t0 + COLD_BOOT_S
            try:
                vm.connect(end)
                vm.handshake(end)
            except (Timeout, _vm.GuestGone) as exc:
                raise NotFound(f"the micro-VM did not boot under {accel} within {COLD_BOOT_S:g} s "
                               f"({exc}): {vm.stderr()}") from None
            cold = time.monotonic() - t0
            # Hang up first: the agent sees the host leave and forgets the handshake, so a
            # restored guest answers nothing before a new Ping with the secret.
            vm.hangup()
            time.sleep(HANGUP_S)
            say(f"booted in {cold:.1f} s; snapshotting")
            t1 = time.monotonic()
            vm.snapshot(sdir / "vm.mig")
            snap = time.monotonic() - t1
        finally:
            vm.kill()
        meta = {
            "secret": secret.hex(), "accel": accel, "qemu": qv, "image": img.digest,
            "cold_boot_s": round(cold, 3), "snapshot_s": round(snap, 3), "memory_mb": _vm.MEMORY_MB,
        }
        tmp = sdir / f".meta.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(meta, sort_keys=True, indent=1) + "\n")
        os.rename(tmp, meta_path)
        _prune(cache, keep={sdir, img.dir})
        return Snapshot(img, accel, sdir / "vm.mig", secret, cold, snap)


def _prune(cache: Path, keep: set[Path]) -> None:
    """Remove images and snapshots of other inputs untouched for :data:`PRUNE_S` (a process
    still restoring from one holds it open; only a day-old one goes)."""
    import shutil

    now = time.time()
    for kind in ("images", "snapshots"):
        for d in (cache / kind).iterdir() if (cache / kind).is_dir() else ():
            try:
                stale = d not in keep and not d.name.startswith(".") and now - d.stat().st_mtime > PRUNE_S
            except OSError:
                continue
            if stale:
                shutil.rmtree(d, ignore_errors=True)


class Pool:
    """Up to ``size`` VMs restored from one snapshot and authenticated ahead of calls, so a
    call finds one ready; each VM serves one call and is torn down after it.

    One long-lived thread restores them (QEMU is started with ``--pdeathsig``: it dies with
    the thread that started it, so that thread must outlive its VMs — it does, until the
    process exits, and every pooled VM dies with the process)."""

    def __init__(self, snap: Snapshot, size: int) -> None:
        self.snap, self.size = snap, size
        self.ready: list[_vm.Vm] = []
        self.pending: _vm.Vm | None = None
        self.lock = threading.Lock()
        self.want = threading.Event()
        if size > 0:
            threading.Thread(target=self._fill, daemon=True, name="wbcore-microvm-pool").start()
            self.want.set()
            import atexit

            atexit.register(self.close)  # the VMs die with the process; their folders too

    def close(self) -> None:
        """Tear down the VMs waiting for a call; restore no more."""
        self.size = 0
        with self.lock:
            ready, self.ready = self.ready, []
        if self.pending is not None:
            ready.append(self.pending)  # being restored: its handshake fails, the thread stops
        for vm in ready:
            vm.kill()

    def _fill(self) -> None:
        while True:
            self.want.wait()
            self.want.clear()
            while len(self.ready) < self.size:
                snap = self.snap
                vm = _vm.Vm(snap.image, snap.accel, snap.secret, incoming=snap.path)
                self.pending = vm
                try:
                    end = time.monotonic() + RESTORE_S
                    vm.connect(end)
                    vm.handshake(end)
                    warm_up(vm, snap.secret, end)
                except (Timeout, _vm.GuestGone, frames.FrameError, OSError):
                    vm.kill()
                    self.pending = None
                    time.sleep(1.0)  # a call restores its own VM meanwhile, and says why if it cannot
                    break
                with self.lock:
                    self.pending = None
                    if self.size == 0:  # closed meanwhile
                        vm.kill()
                        break
                    self.ready.append(vm)

    def take(self) -> _vm.Vm | None:
        """A ready VM (the pool starts restoring the next one), or ``None``."""
        with self.lock:
            while self.ready:
                vm = self.ready.pop(0)
                if vm.proc.poll() is None:
                    self.want.set()
                    return vm
                vm.kill()
        self.want.set()
        return None

    def wait_ready(self, timeout: float) -> bool:
        """Whether a VM is ready within ``timeout`` (benchmarks measure calls that find one)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if self.ready:
                    return True
            time.sleep(0.01)
        return False


def warm_up(vm: _vm.Vm, secret: bytes, deadline: float) -> None:
    """One ``true`` through the agent: a restored guest's code is translated afresh (TCG's
    cache is not in the snapshot), so the first fork and exec are slow; a pooled VM pays
    that before its call. The command is the agent's own and leaves nothing (every call
    starts in a new, empty ``/tmp/w``)."""
    vm.send_frame(frames.seal(frames.EXEC, secret, {"id": 0, "argv": ["true"], "deadline_ms": 10000}, b""))
    kind, _ = vm.recv(deadline)
    if kind != frames.EXEC_RESULT:
        raise frames.FrameError("unexpected", f"the warm-up got {frames.name(kind)}")


_pools: dict[Path, Pool] = {}


def pool(snap: Snapshot) -> Pool:
    """The process's pool for ``snap`` (size ``$WB_MICROVM_POOL``, default :data:`POOL_SIZE`; 0: none)."""
    with _lock:
        p = _pools.get(snap.path)
        if p is None:
            try:
                size = max(0, min(8, int(os.environ.get("WB_MICROVM_POOL", POOL_SIZE))))
            except ValueError:
                size = POOL_SIZE
            p = _pools[snap.path] = Pool(snap, size)
        return p


class MicrovmTier:
    """The tier driver: ``call(CommandRequest) -> CallResult`` in a VM restored for the call."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._snap: Snapshot | None = None

    @property
    def cache(self) -> Path:
        return _image.cache_root(self.runtime.home, dict(self.runtime.env))

    def snapshot(self) -> Snapshot:
        """The tier's snapshot, or the named one ``$WB_MICROVM_SNAPSHOT`` selects (``wbx
        snapshot save``: a guest prepared ahead, e.g. with a toolkit's files in place)."""
        if self._snap is None:
            named = self.runtime.env.get("WB_MICROVM_SNAPSHOT")
            if named:
                from wbcore_microvm import snapshots

                self._snap = snapshots.as_tier_snapshot(self.runtime, snapshots.get(self.runtime.home, named))
            else:
                self._snap = prepare(self.cache)
        return self._snap

    def call(self, request: Any) -> CallResult:
        if not isinstance(request, CommandRequest):
            raise InvalidArgs(f"tier microvm cannot run a {type(request).__name__} (commands only)")
        ok, why = _probe_tools()
        if not ok:
            raise NotFound(f"tier microvm is unavailable: {why}")
        data = self.runtime.artifacts.read_verified(request.sha256)  # a tampered artifact never runs
        posix = read_posix_manifest(data)
        if posix is None:
            raise InvalidArgs(
                f"{request.name}: tier microvm runs posix commands (native CLIs of its guest image); "
                "a wasm command runs in tiers instance, os_process or container"
            )
        images = posix.get("skill_images") or []
        if images or request.mounts:
            from wbcore_microvm.shell import MOUNT_SLOTS

            mounts = _call_mounts(self.runtime, request, images)
            snap = prepare(self.cache, mount_slots=MOUNT_SLOTS)
            return _Call(self.runtime, snap, request, str(posix["cli_bin"]), mounts).run()
        snap = self.snapshot()
        return _Call(self.runtime, snap, request, str(posix["cli_bin"])).run()

    def open_shell(self, request: Any) -> Any:
        """A VM restored for one terminal session's life (``wbx shell --tier microvm``)."""
        from wbcore_microvm.shell import check_mounts, open_shell

        check_mounts(request)  # before any image build or restore
        ok, why = _probe_tools()
        if not ok:
            raise NotFound(f"tier microvm is unavailable: {why}")
        if request.mounts:
            from wbcore_microvm.shell import MOUNT_SLOTS

            return open_shell(prepare(self.cache, mount_slots=MOUNT_SLOTS), request)
        return open_shell(self.snapshot(), request)


def _call_mounts(runtime: Runtime, request: CommandRequest, images: list[Any]) -> list[Any]:
    """The folders one call exports over virtio-9p (a VM restored from the snapshot with mount
    slots): its OCI skill images (``#+SKILL_IMAGES``, pulled once and verified by digest,
    read-only) and the host folders granted to the call (``wbx run --mount``, checked by the
    core), at most ``MOUNT_SLOTS`` together; ``InvalidArgs`` saying which limit is hit."""
    from wbcore_microvm.shell import MOUNT_SLOTS, check_call_mounts
    from wbcore_runtime.contract import distribution
    from wbcore_runtime.store import skill_images
    from wbcore_runtime.dispatch.mounts import Mount, unreachable_by

    mounts: list[Any] = []
    if images:
        if runtime.env.get("WB_MICROVM_SNAPSHOT"):
            raise InvalidArgs(
                f"{request.name}: its skill images need the tier's snapshot with virtio-9p "
                "slots; a named snapshot (WB_MICROVM_SNAPSHOT) has none: unset it for this toolkit"
            )
        parsed = skill_images.parse(" ".join(f"{r}={m}" for r, m in images))
        # wbcore-oci, through the runtime, asked for only to pull: a cached image needs no client
        mounts = [Mount(str(skill_images.cached(runtime.home, im)
                            or distribution.service(runtime).skill_image(runtime.home, im, runtime.env)),
                        im.mount)
                  for im in parsed]
        if os.geteuid() == 0:
            for m in mounts:
                why = unreachable_by(m.host, False, _vm.QEMU_UID)
                if why:
                    raise InvalidArgs(f"skill image at {m.guest}: the micro-VM's QEMU runs as host uid "
                                      f"{_vm.QEMU_UID}, which cannot read its cache folder {m.host}: {why}")
    check_call_mounts(request.mounts)
    mounts += list(request.mounts)
    if len(mounts) > MOUNT_SLOTS:
        raise InvalidArgs(f"{request.name}: tier microvm exports at most {MOUNT_SLOTS} folders (skill images "
                          f"and --mount folders together; this call has {len(mounts)})")
    return mounts


class _Call:
    """One call: restore a VM, authenticate, exec, bridge caps, tear the VM down."""

    def __init__(
        self, runtime: Runtime, snap: Snapshot, req: CommandRequest, cli: str, mounts: list[Any] | None = None
    ) -> None:
        self.runtime, self.snap, self.req, self.cli = runtime, snap, req, cli
        #: Folders (``dispatch.mounts.Mount``) exported over the snapshot's virtio-9p slots: skill
        #: images (read-only) and the call's granted ``--mount`` folders.
        self.mounts = mounts or []
        self.killed_by_watchdog = False
        self.cancelled = False

    def run(self) -> CallResult:
        req, snap = self.req, self.snap
        # The call's deadline counts from here: restoring the VM is part of the call.
        started = time.monotonic()
        deadline = started + req.timeout_s
        # The guest's wb-cap calls: the core's one caps bridge answers them through the Dock.
        bridge = HostBridge(self.runtime, req, snap.secret, 1, req.timeout_s,
                            run=lambda fn, *args: _on_broker_thread(fn, deadline, *args))
        shares = _shares(self.mounts)
        pooled = pool(snap).take() if shares is None else None  # pooled VMs have no folders to export
        vm = pooled or _vm.Vm(snap.image, snap.accel, snap.secret, incoming=snap.path, shares=shares)
        done = threading.Event()
        watchdog = threading.Thread(target=self._watchdog, args=(vm, deadline + GRACE_S, done), daemon=True,
                                    name="wbcore-microvm-watchdog")
        watchdog.start()
        try:
            try:
                end = min(deadline, started + RESTORE_S)
                if pooled is None:
                    vm.connect(end)
                    vm.handshake(end)
                if self.mounts:
                    from wbcore_microvm.shell import mount_all

                    mount_all(vm, snap.secret, self.mounts, end)
            except (Timeout, _vm.GuestGone, frames.FrameError) as exc:
                if self.cancelled:
                    raise Timeout(f"{req.name}: cancelled by the caller; its micro-VM was killed") from None
                if time.monotonic() >= deadline or self.killed_by_watchdog:
                    raise Timeout(
                        f"{req.name}: its micro-VM was not up from the snapshot within the "
                        f"{req.timeout_s:g} s deadline"
                    ) from None
                raise Internal(
                    f"{req.name}: the micro-VM did not come up from its snapshot ({exc}): {vm.stderr()}; "
                    "run the call again (delete the cache's snapshots folder if it persists)"
                ) from None
            self.send_exec(vm, deadline)
            try:
                return self.conversation(vm, bridge, started, deadline)
            except frames.FrameError as exc:  # whatever the guest sends is untrusted input
                raise Internal(f"{req.name}: the guest agent sent a frame the host refuses ({exc.message}); "
                               "its micro-VM was killed") from None
        finally:
            done.set()
            vm.kill()

    def _watchdog(self, vm: _vm.Vm, kill_at: float, done: threading.Event) -> None:
        """SIGKILL the VM at the deadline + grace, or as soon as the caller cancels."""
        cancel = self.req.cancel
        while not done.wait(0.05):
            if cancel is not None and cancel.is_set():
                self.cancelled = True
                vm.kill()
                return
            if time.monotonic() >= kill_at:
                self.killed_by_watchdog = True
                vm.kill()
                return

    def send_exec(self, vm: _vm.Vm, deadline: float) -> None:
        req, prof = self.req, self.req.profile
        argv, stdin = req.guest_input(self.cli)
        obj = {"id": 1, "argv": argv, "deadline_ms": max(1, int((deadline - time.monotonic()) * 1000)),
               "stdout_cap": _cap(prof.stdout_bytes), "stderr_cap": _cap(prof.stderr_bytes),
               "rlimit_as": prof.memory_bytes, "rlimit_nproc": PROCESSES, "rlimit_nofile": NOFILE,
               "rlimit_cpu": max(1, math.ceil(req.timeout_s) + 1), "rlimit_fsize": FILE_BYTES}
        vm.send_frame(frames.seal(frames.EXEC, self.snap.secret, obj, stdin))

    def conversation(self, vm: _vm.Vm, bridge: HostBridge, started: float, deadline: float) -> CallResult:
        req = self.req
        while True:
            try:
                kind, payload = vm.recv(deadline + GRACE_S + 0.5)
            except (Timeout, _vm.GuestGone) as exc:
                if self.cancelled:
                    raise Timeout(
                        f"{req.name}: cancelled by the caller after {time.monotonic() - started:.3f} s; "
                        "its micro-VM was killed"
                    ) from None
                if self.killed_by_watchdog or time.monotonic() >= deadline:
                    raise Timeout(f"{req.name}: stopped after {time.monotonic() - started:.3f} s: over its "
                                  f"{req.timeout_s:g} s deadline (its micro-VM was killed)") from None
                raise Internal(f"{req.name}: the micro-VM ended mid-call ({exc}): {vm.stderr()}") from None
            if kind == frames.EXEC_RESULT:
                return self.finish(*frames.unpack(payload), started)
            if kind == frames.BROKER_CALL:
                vm.send_frame(bridge.answer_posix(payload, _json_to_cbor, _cbor_to_json))
            elif kind == frames.REFUSED:
                obj, _ = frames.unpack(payload)
                raise Internal(
                    f"{req.name}: the guest agent refused the call "
                    f"({obj.get('reason')}: {obj.get('message')})"
                )
            else:
                raise Internal(f"{req.name}: the guest agent sent an unexpected {frames.name(kind)} frame")

    def finish(self, obj: dict[str, Any], blobs: list[bytes], started: float) -> CallResult:
        req, prof = self.req, self.req.profile
        wall = time.monotonic() - started
        if "denied" in obj:
            raise CapabilityDenied(
                f"{req.name}: {frames.field(obj, 'denied', str)} (the microvm guest runs only "
                "the commands of its image's allowlist)"
            )
        out, err = frames.blobs_of(blobs, 2, frames.EXEC_RESULT)
        if obj.get("timed_out") is True:
            raise Timeout(f"{req.name}: stopped after {wall:.3f} s: over its {req.timeout_s:g} s deadline "
                          "(the guest agent SIGKILLed it)")
        over = obj.get("over")
        if over in ("stdout", "stderr"):
            cap = _cap(prof.stdout_bytes if over == "stdout" else prof.stderr_bytes)
            raise LimitExceeded(f"{req.name}: {over} passed the {cap}-byte cap of profile {prof.name}; "
                                "output stopped (the guest agent killed it)", limit=over)
        code = frames.field(obj, "exit", int)
        sig = frames.field(obj, "signal", int, 0)
        if sig:
            raise GuestTrap(f"{req.name}: {self.cli} was killed by signal {sig} in the micro-VM")
        usage = Usage(wall_s=wall, peak_memory=0, bytes_out=len(out) + len(err), isolation=self.snap.accel)
        return CallResult(out, err, code, usage)


def _shares(mounts: Any) -> list[tuple[str | None, bool]] | None:
    """The virtio-9p exports of a call with ``--mount`` folders (every slot of the mount
    snapshot, unused ones empty), or ``None`` for a call without."""
    if not mounts:
        return None
    from wbcore_microvm.shell import MOUNT_SLOTS

    shares: list[tuple[str | None, bool]] = [(m.host, m.rw) for m in mounts]
    return shares + [(None, False)] * (MOUNT_SLOTS - len(shares))


def _cap(profile_cap: int) -> int:
    """An output cap the guest can honour: stdout and stderr travel in one ExecResult frame."""
    return min(profile_cap, OUTPUT_CAP)


def _json_to_cbor(cap: str, body: bytes) -> bytes:
    """The guest's JSON request as the Dock's CBOR (text stays text: the brokers take str
    where they take bytes)."""
    import cbor2

    if len(body) > MAX_BROKER_JSON:
        raise InvalidArgs(f"{cap}: request of {len(body)} bytes exceeds the {MAX_BROKER_JSON}-byte cap")
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidArgs(f"{cap}: the request is not valid JSON (wb-cap {cap} '{{\"op\": ...}}')") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("op"), str):
        raise InvalidArgs(f"{cap}: the request must be a JSON object with a text 'op'")
    return cbor2.dumps(obj)


def _cbor_to_json(answer: bytes) -> bytes:
    """The Dock's CBOR answer as JSON for the guest (bytes as UTF-8 text, else base64 under ``$b64``)."""
    import cbor2

    def plain(v: Any) -> Any:
        if isinstance(v, (bytes, bytearray)):
            try:
                return bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                return {"$b64": base64.b64encode(bytes(v)).decode()}
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return str(v)

    try:
        return json.dumps(plain(cbor2.loads(answer)), separators=(",", ":")).encode()
    except Exception:  # noqa: BLE001 - cbor2 raises several types; the Dock's answers are well formed
        return json.dumps({"error": "the broker's answer could not be decoded"}).encode()


def _on_broker_thread(fn: Any, deadline: float, *args: Any) -> Any:
    """``fn(*args)`` on a broker thread; the caller stops waiting at the deadline."""
    from concurrent.futures import ThreadPoolExecutor, wait

    global _brokers
    with _lock:
        if _brokers is None:
            _brokers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="wbcore-microvm-broker")
    fut = _brokers.submit(fn, *args)
    done, _ = wait([fut], timeout=max(0.0, deadline - time.monotonic()))
    if not done:
        raise Timeout("a broker call outlived the call's deadline")
    return fut.result()


_brokers: Any = None


def factory(runtime: Runtime) -> MicrovmTier:
    return MicrovmTier(runtime)


__all__ = ["MicrovmTier", "Snapshot", "available", "factory", "prepare", "probe_accel"]
