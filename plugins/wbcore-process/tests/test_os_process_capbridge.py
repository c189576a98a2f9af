"""The os_process tier bridges caps with the core's one bridge (``wbcore_runtime.wire.capbridge``), as the
container tier does: its worker links ``wb.*`` with ``GuestCaps`` and its host answers with
``HostBridge``; no second copy of the link check, the grant check or the framing exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_process.sandbox import probe

wasmtime = pytest.importorskip("wasmtime")
if not probe()[0]:
    pytest.skip(f"the build sandbox is unavailable: {probe()[1]}", allow_module_level=True)

from wbcore_runtime.wire import capbridge, frames  # noqa: E402
from wbcore_process import pool, tiers  # noqa: E402
from wbcore_process.pool import spawn_worker  # noqa: E402

KV_WAT = """(module
  (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $kv (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)))))"""


def test_the_tier_and_its_worker_use_the_cores_bridge_and_no_copy_of_it() -> None:
    assert tiers.HostBridge is capbridge.HostBridge
    # the worker binds the guest side the WASI guest runner's plugin serves; the core keeps the host side only
    assert ("class GuestCaps" in caps_lib().read_text()
            and "class GuestCaps" not in Path(capbridge.__file__).read_text())
    worker = pool.WORKER.read_text()
    for own_bridge in ("define_func", "LINK_ANSWER", "BROKER_CALL", "BROKER_ANSWER", "def _deliver"):
        assert own_bridge not in worker, f"_tier_worker.py bridges caps itself ({own_bridge})"
    host = Path(tiers.__file__).read_text()
    for own_bridge in ("linkable(", ".deny(", "LINK_ANSWER", "BROKER_ANSWER"):
        assert own_bridge not in host, f"tiers.py answers caps itself ({own_bridge})"


def test_a_shutdown_while_the_worker_waits_for_its_link_answer_ends_it_cleanly() -> None:
    """The worker's wait for the host is the core bridge's (``GuestCaps.expect``): a forged
    Shutdown is refused, the host's own ends the worker with exit 0."""
    w = spawn_worker(caps_lib())
    try:
        w.chan.send_frame(frames.ping(w.secret))
        assert w.chan.recv()[0] == frames.PONG
        module = wasmtime.wat2wasm(KV_WAT)
        import hashlib

        exec_obj = {"id": 5, "sha256": hashlib.sha256(module).hexdigest(), "argv": ["x"], "memory": 1 << 20,
                    "timeout_s": 5, "stdout_cap": 10, "stderr_cap": 10}
        w.chan.send_frame(frames.seal(frames.EXEC, w.secret, exec_obj, b"", module))
        kind, payload = w.chan.recv()
        assert kind == frames.LINK
        assert frames.unpack(payload)[0] == {"id": 5, "imports": [["wb", "kv"]], "blobs": []}
        w.chan.send_frame(frames.shutdown(bytes(32)))
        kind, payload = w.chan.recv()
        assert kind == frames.REFUSED and frames.unpack(payload)[0]["reason"] == "secret"
        w.chan.send_frame(frames.shutdown(w.secret))
        assert w.box.wait(timeout=5) == 0
        assert "Traceback" not in w.stderr_tail()
    finally:
        w.close()


def caps_lib() -> Path:
    """The caps bridge's guest side, as the tier takes it: served by the WASI guest runner's plugin."""
    import tempfile

    from wbcore_runtime.contract import guest
    from wbcore_runtime.runtime import Runtime

    with tempfile.TemporaryDirectory() as home:
        return guest.sandbox_caps(Runtime.open(plugins=["wasmtime"], home=home), "os_process")
