"""The ``container`` tier (rung 2): one call, one throwaway bubblewrap container.

Two kinds of payload, both through :func:`wbcore_container.bwrap.run` over the root of
:mod:`wbcore_container.rootfs`:

- a **wasm command**: the root's own ``python3`` runs ``_wasm_run.py`` with this host's
  wasmtime package bound read-only; the module and the call's argv and memory limit are
  copied in read-only; the guest's stdio is the container's. The guest is isolated twice
  (linear memory, then the container). Caps are bridged: a ``wb.<cap>`` call travels as
  a ``BrokerCall`` frame on a pipe to this process, where :class:`wbcore_runtime.wire.capbridge.HostBridge`
  answers it through the Dock (the container holds no credential and has no network);
  the session secret (32 random bytes per call) reaches the runner on its own pipe.
- a **posix command** (``#+EXEC: posix``, registered as a manifest naming ``#+CLI_BIN``):
  the CLI is resolved inside the root (``rootfs.resolve_cli``: Debian's ``/usr``, never
  this host's ``PATH``) and runs as ``argv + stdin → stdout/stderr/exit`` with no network
  and no host file but the folders the deployer granted to the call (``wbx run --mount``,
  bound read-only unless ``:rw``; checked by ``wbcore_runtime.dispatch.mounts.grant``), under
  rlimits that hold for uid ≠ 0 (bwrap is started as ``bwrap.HOST_UID``: a fork bomb meets
  ``RLIMIT_NPROC``).

The same results and errors as the instance tier: ``Timeout`` past the deadline (the
container is SIGKILLed), ``LimitExceeded`` at an output cap or the memory limit,
``GuestTrap`` for a wasm trap, else the exit code.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.build.builder import read_posix_manifest
from wbcore_runtime.contract.calls import (CallResult, CommandRequest, GuestTrap, LimitExceeded, Usage,
                                           check_guest_end)
from wbcore_runtime.wire import frames
from wbcore_runtime.guard import paths
from wbcore_runtime.contract import guest
from wbcore_runtime.wire.capbridge import HostBridge
from wbcore_runtime.contract.errors import Internal, InvalidArgs, NotFound, Timeout
from wbcore_runtime.dispatch.mounts import unreachable_by
from wbcore_runtime.contract.drivers import Availability

from wbcore_container import bwrap, rootfs

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime

RUNNER = Path(__file__).with_name("_wasm_run.py")
PYTHON = "/usr/bin/python3"  # the root's (Debian's) interpreter, not this process's
#: Processes a posix call may have at once (its own and the container's two bwrap processes).
POSIX_PROCESSES = 64
#: A wasm call's address space: wasmtime reserves guard regions per linear memory; the
#: guest's memory is capped by its store's limit, this only bounds the runner around it.
WASM_ADDRESS_SPACE = 16 << 30


@lru_cache(maxsize=1)
def _wasmtime_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("wasmtime")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def available() -> Availability:
    ok, reason = bwrap.probe()
    if not ok:
        return Availability.no(reason)
    wasm = "wasm commands" if _wasmtime_dir() is not None and Path(PYTHON).exists() else \
        "no wasm commands (needs python3 in the root and wasmtime importable)"
    return Availability.yes(f"backend bubblewrap: {reason}; posix CLIs and {wasm}")


class ContainerTier:
    """The tier driver: ``call(CommandRequest) -> CallResult`` in a new container."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._root: rootfs.Root | None = None

    @property
    def root(self) -> rootfs.Root:
        if self._root is None:
            self._root = rootfs.build(self.runtime.home)
        return self._root

    def open_shell(self, request: Any) -> Any:
        """A container whose agent serves terminal sessions (``wbx shell --tier container``)."""
        from wbcore_container.shell import open_shell

        return open_shell(self.runtime, self.root, request)

    def call(self, request: Any) -> CallResult:
        if not isinstance(request, CommandRequest):
            raise InvalidArgs(f"tier container cannot run a {type(request).__name__} (commands only)")
        ok, why = bwrap.probe()
        if not ok:
            raise NotFound(f"tier container is unavailable: {why}")
        data = self.runtime.artifacts.read_verified(request.sha256)  # a tampered artifact never runs
        posix = read_posix_manifest(data)
        if posix is not None:
            return self._posix(request, str(posix["cli_bin"]), _skill_binds(self.runtime, posix))
        return self._wasm(request, data)

    # --- posix ---------------------------------------------------------------------------

    def _posix(self, req: CommandRequest, cli: str, binds: list[tuple[str, str]] | None = None) -> CallResult:
        path = rootfs.resolve_cli(cli)
        if path is None:
            raise NotFound(f"{req.name}: #+CLI_BIN {cli!r} is not in the container root "
                           f"({', '.join(rootfs.ROOT_PATH)} from this host's Debian packages); install the "
                           "package that ships it (apt-get install …)")
        prof = req.profile
        limits = bwrap.BwrapLimits(memory=prof.memory_bytes, processes=POSIX_PROCESSES,
                                   cpu_s=_cpu(req.timeout_s), deadline_s=req.timeout_s,
                                   stdout_cap=prof.stdout_bytes, stderr_cap=prof.stderr_bytes)
        mounted = _mount_binds(req.mounts)
        spec = bwrap.Spec(argv=[path, *_argv(req)[1:]], stdin=_stdin(req), limits=limits, unprivileged=True,
                          cancel=req.cancel, binds=[*(binds or []), *mounted.get("binds", [])],
                          rw_binds=mounted.get("rw_binds", []))
        out = bwrap.run(spec, self.root)
        self._limits(req, out)
        if out.exit_code < 0:
            raise GuestTrap(f"{req.name}: {cli} was killed by signal {-out.exit_code}")
        usage = Usage(wall_s=out.wall_s, peak_memory=0, bytes_out=len(out.stdout) + len(out.stderr))
        return CallResult(out.stdout, out.stderr, out.exit_code, usage)

    # --- wasm ----------------------------------------------------------------------------

    def _wasm(self, req: CommandRequest, module: bytes) -> CallResult:
        if req.mounts:
            raise InvalidArgs(f"{req.name}: --mount binds host folders for posix commands and tasks; a wasm "
                              "command reads data through #+PREOPEN (docs/manifest.md)")
        site = _wasmtime_dir()
        if site is None or not Path(PYTHON).exists():
            raise InvalidArgs("tier container runs wasm with the root's python3 and this host's wasmtime; "
                              "install python3 (apt) and wasmtime (pip install wasmtime)")
        prof = req.profile
        call_id = next(_ids)
        call = json.dumps({"argv": _argv(req), "memory": prof.memory_bytes, "id": call_id}).encode()
        limits = bwrap.BwrapLimits(memory=WASM_ADDRESS_SPACE, processes=POSIX_PROCESSES,
                                   cpu_s=_cpu(req.timeout_s), deadline_s=req.timeout_s,
                                   stdout_cap=prof.stdout_bytes, stderr_cap=prof.stderr_bytes)
        # The caps channel: two pipes (frames each way) and a third that carries the session
        # secret once; the runner asks, the bridge answers through this runtime's Dock.
        secret = frames.new_secret()
        to_guest_r, to_guest_w = os.pipe()
        to_host_r, to_host_w = os.pipe()
        secret_r, secret_w = os.pipe()
        os.write(secret_w, secret)
        os.close(secret_w)
        lib = Path(frames.__file__).parent
        spec = bwrap.Spec(
            argv=[PYTHON, "-I", "-S", "/wb/run.py", "/wb/site", "{status_fd}", str(to_guest_r),
                  str(to_host_w), str(secret_r)], stdin=_stdin(req), limits=limits,
            files=[bwrap.Data("/wb/run.py", path=RUNNER), bwrap.Data("/wb/call.json", data=call),
                   self._module_file(req.sha256, module),
                   bwrap.Data("/wb/lib/frames.py", path=lib / "frames.py"),
                   bwrap.Data("/wb/lib/capbridge.py", path=guest.sandbox_caps(self.runtime, "container"))],
            binds=[(str(site), "/wb/site/wasmtime")],
            # wasmtime lives in this process's environment, which the unprivileged host uid
            # may not reach; a wasm guest cannot fork, so RLIMIT_NPROC is not what holds it.
            unprivileged=False, status_fd=True, cancel=req.cancel, pass_fds=(to_guest_r, to_host_w, secret_r))
        bridge = HostBridge(self.runtime, req, secret, call_id, req.timeout_s)
        chan = frames.Channel(to_host_r, to_guest_w)
        thread = bridge.start(chan.recv, _sender(chan))
        try:
            out = bwrap.run(spec, self.root)
        finally:
            for fd in (to_guest_r, to_host_w, secret_r):
                os.close(fd)  # the container's ends: the bridge sees EOF once the container is gone
            thread.join(timeout=0.5)  # a broker still blocked past the deadline is not waited for
            for fd in (to_host_r, to_guest_w):
                os.close(fd)
        self._limits(req, out)
        try:
            report = json.loads(out.status.decode()) if out.status else None
        except (UnicodeDecodeError, ValueError):
            report = None
        if not isinstance(report, dict):
            tail = out.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise GuestTrap(f"{req.name}: the container's wasm runner ended (exit {out.exit_code}) "
                            "without a report" + (f": {' | '.join(tail)}" if tail else ""))
        name = req.name
        peak = int(report.get("peak") or 0)
        if report.get("refused"):
            if bridge.refusal is None:
                raise Internal(f"{name}: the container's runner reported a refusal the host did not make")
            raise bridge.refusal
        if report.get("abi_error"):
            raise InvalidArgs(f"{name}: {report['abi_error']}")
        if bridge.broken:
            raise Internal(f"{name}: the container's runner broke the caps protocol: {bridge.broken}")
        if report.get("link_error"):
            raise InvalidArgs(f"{name}: cannot link: {report['link_error']}")
        if report.get("no_start"):
            raise InvalidArgs(f"{name}: artifact {req.sha256[:12]}… exports no _start (is it a WASI "
                              "command?)")
        exit_code = int(report.get("exit") or 0)
        check_guest_end(req, wall=out.wall_s, trap=report.get("trap") or None, exit_code=exit_code, peak=peak)
        usage = Usage(wall_s=out.wall_s, peak_memory=peak, bytes_out=len(out.stdout) + len(out.stderr))
        return CallResult(out.stdout, out.stderr, exit_code, usage)

    def _module_file(self, sha: str, module: bytes) -> bwrap.Data:
        """The module as the runner loads it: compiled once by this host into the artifact
        store's digest-checked cache (``/wb/module.cwasm``, deserialized in milliseconds by the
        same wasmtime inside), else the ``.wasm`` itself (compiled inside, per call)."""
        try:
            path, _ = self.runtime.artifacts.compiled(sha, _cwasm_key(), compile=_precompile,
                                                      load=lambda p: p)
            return bwrap.Data("/wb/module.cwasm", path=path)
        except Exception:  # noqa: BLE001 - an invalid module or a full disk: the runner compiles and reports
            return bwrap.Data("/wb/module.wasm", data=module)

    # --- task ----------------------------------------------------------------------------

    def run_task(self, req: Any) -> CallResult:
        """A ``:role task`` block (``wbcore_runtime.toolkit.tasks.TaskRequest``; the opt-in was checked by the
        caller): its interpreter from the root, the toolkit's files copied in read-only at
        /toolkit, cwd /tmp, the posix profile's limits, as the unprivileged host uid."""
        from wbcore_runtime.trust.policy import profile

        ok, why = bwrap.probe()
        if not ok:
            raise NotFound(f"tier container is unavailable: {why}")
        prof = profile("posix")
        limits = bwrap.BwrapLimits(memory=prof.memory_bytes, processes=POSIX_PROCESSES,
                                   cpu_s=_cpu(req.timeout_s), deadline_s=req.timeout_s,
                                   stdout_cap=prof.stdout_bytes, stderr_cap=prof.stderr_bytes)
        mounted = _mount_binds(getattr(req, "mounts", ()))
        spec = bwrap.Spec(argv=[req.interpreter, "-c", req.script, req.task, *req.args], stdin=req.stdin,
                          limits=limits, files=_toolkit_files(req.toolkit_dir), unprivileged=True,
                          binds=mounted.get("binds", []), rw_binds=mounted.get("rw_binds", []))
        out = bwrap.run(spec, self.root)
        name = f"task {req.task} of {req.toolkit}"
        if out.timed_out:
            raise Timeout(f"{name}: stopped after {out.wall_s:.3f} s: over its {req.timeout_s:g} s deadline "
                          "(its container was killed)")
        if out.over:
            cap = prof.stdout_bytes if out.over == "stdout" else prof.stderr_bytes
            raise LimitExceeded(f"{name}: {out.over} passed the {cap}-byte cap; output stopped (its "
                                "container was killed)", limit=out.over)
        code = out.exit_code if out.exit_code >= 0 else 128 - out.exit_code
        usage = Usage(wall_s=out.wall_s, peak_memory=0, bytes_out=len(out.stdout) + len(out.stderr))
        return CallResult(out.stdout, out.stderr, code, usage)

    # --- shared --------------------------------------------------------------------------

    def _limits(self, req: CommandRequest, out: bwrap.Outcome) -> None:
        prof = req.profile
        if out.timed_out:
            raise Timeout(f"{req.name}: stopped after {out.wall_s:.3f} s: over its {req.timeout_s:g} s "
                          "deadline (its container was killed)")
        if out.cancelled:
            raise Timeout(f"{req.name}: cancelled by the caller after {out.wall_s:.3f} s; its container was "
                          "killed")
        if out.over:
            cap = prof.stdout_bytes if out.over == "stdout" else prof.stderr_bytes
            raise LimitExceeded(f"{req.name}: {out.over} passed the {cap}-byte cap of profile {prof.name}; "
                                "output stopped (its container was killed)", limit=out.over)


_ids = itertools.count(1)


@lru_cache(maxsize=1)
def _engine() -> Any:
    import wasmtime

    return wasmtime.Engine()  # the runner's own config (defaults): its compiled form loads there


@lru_cache(maxsize=1)
def _cwasm_key() -> str:
    import platform
    from importlib.metadata import version

    return f"container-wasmtime-{version('wasmtime')}-{platform.machine()}"


def _precompile(wasm: bytes) -> bytes:
    import wasmtime

    return bytes(wasmtime.Module(_engine(), wasm).serialize())
#: What of a toolkit's folder a task sees at /toolkit (copied in, read-only).
TOOLKIT_FILES = 2000
TOOLKIT_BYTES = 32 << 20


def _toolkit_files(folder: Path) -> list[bwrap.Data]:
    """The toolkit's regular files (no symlinks, nothing hidden), bounded in count and size:
    copied in, so the unprivileged container reaches them wherever the folder lives.

    Read through the core's containment walk (``paths.walk``: ``openat`` + ``O_NOFOLLOW``, the
    bytes read from the very inode checked), so a link, a folder swapped for a link or a FIFO
    never brings a host file (or a hang) into the container."""
    out: list[bwrap.Data] = []
    total = 0
    too_big = (f"toolkit folder {folder} is over {TOOLKIT_FILES} files or {TOOLKIT_BYTES >> 20} MiB; "
               "a task sees at most that much of it")
    for node in paths.walk(folder, skip_hidden=True, max_files=4 * TOOLKIT_FILES):
        if node.kind != "file":  # links are not followed (as before, never copied in)
            continue
        if len(out) >= TOOLKIT_FILES:
            raise InvalidArgs(too_big)
        with os.fdopen(os.dup(node.fd), "rb") as fh:  # the walk closes node.fd itself
            data = fh.read(TOOLKIT_BYTES - total + 1)
        total += len(data)
        if total > TOOLKIT_BYTES:
            raise InvalidArgs(too_big)
        out.append(bwrap.Data(f"/toolkit/{node.rel}", data=data))
    return out


def _mount_binds(mounts: Any) -> dict[str, list[tuple[str, str]]]:
    """bwrap binds of a call's granted host folders (``Mount`` records, already checked by
    the core); each must be reachable by the unprivileged host uid the container runs as."""
    if not mounts:
        return {}
    if os.geteuid() == 0:
        for m in mounts:
            why = unreachable_by(m.host, m.rw, bwrap.HOST_UID)
            if why:
                raise InvalidArgs(f"--mount {m.host}:{m.guest}: the container runs as host uid "
                                  f"{bwrap.HOST_UID}, which cannot use it: {why}")
    return {"binds": [(m.host, m.guest) for m in mounts if not m.rw],
            "rw_binds": [(m.host, m.guest) for m in mounts if m.rw]}


def _sender(chan: frames.Channel) -> Callable[[bytes], None]:
    def send(frame: bytes) -> None:
        try:
            chan.send_frame(frame)
        except BrokenPipeError:
            raise frames.FrameError("eof", "the container ended") from None

    return send


def _skill_binds(runtime: Runtime, posix: dict[str, Any]) -> list[tuple[str, str]]:
    """The toolkit's OCI skill images (``#+SKILL_IMAGES``), from the cache
    (:func:`wbcore_runtime.store.skill_images.cached`), else pulled once and verified by digest
    (``contract.distribution.Distribution.skill_image``), as read-only binds at their paths."""
    entries = posix.get("skill_images") or []
    if not entries:
        return []
    from wbcore_runtime.contract import distribution
    from wbcore_runtime.store import skill_images

    images = skill_images.parse(" ".join(f"{r}={m}" for r, m in entries))
    # wbcore-oci, through the runtime, asked for only to pull: a cached image needs no client
    out = [(str(skill_images.cached(runtime.home, im)
                or distribution.service(runtime).skill_image(runtime.home, im, runtime.env)), im.mount)
           for im in images]
    if os.geteuid() == 0:  # bwrap then runs as the unprivileged host uid: it must reach the trees
        from wbcore_runtime.dispatch.mounts import unreachable_by

        for host, guest in out:
            why = unreachable_by(host, False, bwrap.HOST_UID)
            if why:
                raise InvalidArgs(f"skill image at {guest}: the container runs as host uid {bwrap.HOST_UID}, "
                                  f"which cannot read its cache folder {host}: {why}")
    return out


def _argv(req: CommandRequest) -> list[str]:
    return req.guest_input()[0]


def _stdin(req: CommandRequest) -> bytes:
    return req.guest_input()[1]


def _cpu(timeout_s: float) -> int:
    return max(1, math.ceil(timeout_s) + 1)


def factory(runtime: Runtime) -> ContainerTier:
    return ContainerTier(runtime)


__all__ = ["ContainerTier", "available", "factory"]
