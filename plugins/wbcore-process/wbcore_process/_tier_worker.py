"""A warm worker of the ``os_process`` tier: one sandboxed Python that imported wasmtime once.

``python -I -S _tier_worker.py <wasmtime-parent-dir> <folder-of-frames.py-and-capbridge.py>``, started by
``Sandbox.spawn`` (no network, no host files but its binds, uid 1000, seccomp, rlimits),
with the session secret on an inherited pipe (fd ``WB_SECRET_FD``, read and closed at start). It speaks
``frames`` on fds 0 and 1 (anything else that writes to stdout goes to stderr) and serves one call at a time:

``Ping`` (the secret) → ``Pong``; then per call ``Exec`` → [``Link`` → ``LinkAnswer``]
→ [``BrokerCall`` → ``BrokerAnswer``]* → ``ExecResult``; ``Shutdown`` (the secret) ends it.
A host frame without the session secret, or with another, is answered ``Refused``; a
stream it cannot read as frames ends the worker (the host replaces it).

Each call runs the guest in a fresh ``Store``: the call's memory limit, WASI with argv
and stdin only (output to private files in the sandbox's /tmp), and a wall-clock deadline
and output caps watched by a ticker thread that ends the guest through the engine's epoch.
The worker decides no policy: its ``wb.*`` imports are linked by the core's one caps bridge
(its guest side, ``GuestCaps``: the file wbcore-wasmtime serves, ``wbcore_wasmtime/sandbox_caps.py``,
bound as ``capbridge.py`` next to ``frames.py``, as in the container tier's runner): which may link is the
host's answer to ``Link``, and every ``wb.<cap>`` call is forwarded to the host, which answers it through its
Dock. The worker holds no credential and cannot open a connection to anything.
"""

import hashlib
import os
import sys
import threading
import time
from collections import OrderedDict

MAX_MODULES = 32
TICK_S = 0.005
TMP = "/tmp"


class LinkError(Exception):
    """The module's imports cannot be satisfied (a WASI function that does not exist...)."""


class Ticker:
    """Ends the running guest at its deadline or once an output file passes its cap.

    The store's epoch deadline is one tick and the engine's epoch moves only when this
    thread stops a guest, so a guest runs untouched until then and traps at its next
    loop back-edge or call; the reason is kept for the result.
    """

    def __init__(self, engine):
        self.engine = engine
        self.lock = threading.Lock()
        self.armed = False
        self.wake = threading.Event()
        self.deadline = 0.0
        self.files = ()
        self.reason = ""
        threading.Thread(target=self.run, name="wb-worker-ticker", daemon=True).start()

    def arm(self, deadline, files):
        with self.lock:
            self.deadline, self.files, self.reason, self.armed = deadline, files, "", True
        self.wake.set()

    def disarm(self):
        with self.lock:
            self.armed = False
            self.wake.clear()
            return self.reason

    def run(self):
        while True:
            self.wake.wait()
            time.sleep(TICK_S)
            with self.lock:
                if not self.armed:
                    continue
                reason = "timeout" if time.monotonic() >= self.deadline else ""
                for stream, path, cap in self.files:
                    if reason:
                        break
                    try:
                        if os.stat(path).st_size > cap:
                            reason = stream
                    except OSError:
                        pass
                if reason:
                    self.reason, self.armed = reason, False
                    self.engine.increment_epoch()


class Loaded:
    __slots__ = ("bad_abi", "module", "needs_link", "pres")

    def __init__(self, module, wasmtime, capbridge):
        self.module = module
        self.pres = {}  # linked caps → InstancePre (the bridge's functions read the running call)
        self.needs_link = capbridge.GuestCaps.needs_link(module)
        self.bad_abi = capbridge.GuestCaps.bad_abi(module, wasmtime)


class Worker:
    def __init__(self, chan, secret, frames, wasmtime, capbridge):
        self.chan, self.secret, self.F, self.wt, self.cb = chan, secret, frames, wasmtime, capbridge
        cfg = wasmtime.Config()
        cfg.epoch_interruption = True
        cfg.cranelift_opt_level = "speed"
        self.engine = wasmtime.Engine(cfg)
        self.ticker = Ticker(self.engine)
        self.modules = OrderedDict()
        self.call_id = None
        # One bridge for the worker's life: the functions it links into a module's cached
        # InstancePre read the running call's id and answers.
        self.guest = capbridge.GuestCaps(chan, secret, 0, wasmtime)

    # --- the channel ----------------------------------------------------------------

    def handshake(self):
        F = self.F
        kind, payload = self.chan.recv()
        if kind != F.PING:
            raise F.FrameError("unexpected", f"the first frame must be Ping, got {F.name(kind)}")
        F.check_ping(payload, self.secret)
        self.chan.send_frame(F.pong())

    def serve(self):
        F = self.F
        while True:
            kind, payload = self.chan.recv()
            try:
                if kind == F.SHUTDOWN:
                    F.check_shutdown(payload, self.secret)
                    return
                if kind == F.PING:
                    F.check_ping(payload, self.secret)
                    self.chan.send_frame(F.pong())
                    continue
                if kind != F.EXEC:
                    raise F.FrameError("unexpected", f"{F.name(kind)} outside a call")
                obj, blobs = F.open_sealed(kind, payload, self.secret)
                self.execute(obj, blobs)
            except F.FrameError as exc:
                self.chan.send_frame(F.refused(exc.reason, exc.message))

    def result(self, obj, stdout=b"", stderr=b""):
        F = self.F
        obj = {"id": self.call_id, "cpu": time.process_time(), **obj}
        self.chan.send_frame(F.encode(F.EXEC_RESULT, F.pack(obj, stdout, stderr)))

    # --- one call -------------------------------------------------------------------

    def load(self, sha, blob):
        mod = self.modules.get(sha)
        if mod is not None:
            self.modules.move_to_end(sha)
            return mod
        if blob is None:
            return None
        if hashlib.sha256(blob).hexdigest() != sha:
            raise ValueError(f"the module bytes do not hash to {sha[:12]}…")
        mod = Loaded(self.wt.Module(self.engine, blob), self.wt, self.cb)
        self.modules[sha] = mod
        while len(self.modules) > MAX_MODULES:
            self.modules.popitem(last=False)
        return mod

    def execute(self, obj, blobs):
        F, wt = self.F, self.wt
        self.call_id = F.field(obj, "id", int)
        self.guest.begin(self.call_id)
        sha = F.field(obj, "sha256", str)
        argv = F.field(obj, "argv", list)
        if not all(isinstance(a, str) for a in argv):
            raise F.FrameError("malformed", "argv must be a list of strings")
        memory = F.field(obj, "memory", int)
        timeout = F.field(obj, "timeout_s", (int, float))
        timeout = float(timeout) if -1 <= timeout <= 86400 else -1.0  # a huge int would overflow a float
        out_cap = F.field(obj, "stdout_cap", int)
        err_cap = F.field(obj, "stderr_cap", int)
        if not all(0 <= v <= 1 << 40 for v in (memory, out_cap, err_cap)) or not 0 <= timeout <= 86400:
            raise F.FrameError("malformed", "memory, output caps and timeout must be within range")
        if len(blobs) not in (1, 2):
            raise F.FrameError("malformed",
                               f"Exec carries {len(blobs)} attachments; expected stdin and maybe the module")
        deadline = time.monotonic() + timeout
        try:
            mod = self.load(sha, blobs[1] if len(blobs) == 2 else None)
        except (ValueError, wt.WasmtimeError) as exc:
            return self.result({"error": {"kind": "invalid-args",
                                          "message": f"artifact {sha[:12]}… is not a valid module: {exc}"}})
        if mod is None:
            return self.result({"missing": True})
        caps = []
        if mod.needs_link:
            try:
                caps = self.guest.link(mod.module)
            except self.cb.Refused:
                return self.result({"refused": True})
            if mod.bad_abi:
                return self.result({"error": {"kind": "invalid-args", "message": mod.bad_abi}})
        return self.run(mod, argv, blobs[0], memory, deadline, out_cap, err_cap, caps)

    def run(self, mod, argv, stdin, memory, deadline, out_cap, err_cap, caps):
        wt = self.wt
        out_path, err_path, in_path = f"{TMP}/stdout", f"{TMP}/stderr", f"{TMP}/stdin"
        for path in (out_path, err_path):
            with open(path, "wb"):
                pass
        store = wt.Store(self.engine)
        store.set_limits(memory_size=memory, instances=4, tables=8, memories=2)
        store.set_epoch_deadline(1)
        wasi = wt.WasiConfig()
        wasi.argv = argv
        if stdin:
            with open(in_path, "wb") as fh:
                fh.write(stdin)
            wasi.stdin_file = in_path
        wasi.stdout_file = out_path
        wasi.stderr_file = err_path
        store.set_wasi(wasi)
        if stdin:
            os.unlink(in_path)  # the config holds it open; nothing of it outlives the call

        exit_code, failure, trap_code, no_start, link_error = 0, None, "", False, ""
        instance = None
        t0 = time.perf_counter()
        self.ticker.arm(deadline, (("stdout", out_path, out_cap), ("stderr", err_path, err_cap)))
        try:
            try:
                instance = self.instantiate(store, mod, caps)
                start = instance.exports(store).get("_start")
                if start is None:
                    no_start = True
                else:
                    start(store)
            except wt.ExitTrap as exc:
                exit_code = exc.code
            except LinkError as exc:
                link_error = str(exc)
            except (wt.Trap, wt.WasmtimeError) as exc:
                failure = exc
                code = getattr(exc, "trap_code", None)
                trap_code = code.name if code is not None else ""
        finally:
            reason = self.ticker.disarm()
        wall = time.perf_counter() - t0
        peak = 0
        if instance is not None:
            mem = instance.exports(store).get("memory")
            if isinstance(mem, wt.Memory):
                peak = mem.data_len(store)
        del store, wasi, instance
        out_size, err_size = _size(out_path), _size(err_path)
        stdout = stderr = b""
        if not reason and failure is None and out_size <= out_cap and err_size <= err_cap:
            stdout, stderr = _read(out_path, out_cap), _read(err_path, err_cap)
        for path in (out_path, err_path):
            os.truncate(path, 0)  # nothing of this call lingers for the next one
        if link_error:
            return self.result({"error": {"kind": "invalid-args", "message": f"cannot link: {link_error}"}})
        return self.result({
            "exit": exit_code, "reason": reason, "trap": _describe(failure) if failure is not None else None,
            "trap_code": trap_code, "no_start": no_start, "peak": peak, "wall": wall,
            "out_size": out_size, "err_size": err_size,
        }, stdout, stderr)

    def instantiate(self, store, mod, caps):
        """A new instance in ``store`` from the module's pre-linked form for this set of
        caps (built once: the bridge's ``wb.*`` functions read the running call's state)."""
        key = tuple(sorted(caps))
        pre = mod.pres.get(key)
        if pre is None:
            linker = self.wt.Linker(self.engine)
            linker.define_wasi()
            self.guest.define(linker, mod.module, list(key))
            try:
                pre = mod.pres[key] = linker.instantiate_pre(mod.module)
            except self.wt.WasmtimeError as exc:
                raise LinkError(str(exc).strip()) from None
        return pre.instantiate(store)


def _size(path):
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _read(path, cap):
    with open(path, "rb") as fh:
        return fh.read(cap)


def _describe(exc):
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("wasm trap:"):
            return ln
    return lines[-1] if lines else type(exc).__name__


def _read_secret():
    """The session secret, read to the end from the inherited pipe ``WB_SECRET_FD`` names and
    closed: it never sits in this process's environment (``/proc/<pid>/environ``)."""
    fd = int(os.environ.get("WB_SECRET_FD", "-1"))
    if fd < 0:
        return b""  # no secret: every host frame is refused
    chunks = []
    try:
        while sum(map(len, chunks)) < 4096:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def main():
    sys.path[:0] = [sys.argv[2], sys.argv[1]]
    import capbridge
    import frames

    secret = _read_secret()
    chan = frames.stdio_channel()

    def serve():
        import wasmtime

        worker = Worker(chan, secret, frames, wasmtime, capbridge)
        worker.handshake()
        worker.serve()

    frames.serve_host(chan, serve, "wb-worker", ends=(capbridge.Ended,))


if __name__ == "__main__":
    main()
