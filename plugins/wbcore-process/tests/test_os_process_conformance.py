"""The shared tier conformance suite (:mod:`wbcore_testing.conformance`) at tier ``os_process``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wbcore_runtime.wire import frames
from wbcore_testing.conformance import Agent, SandboxFacts, TierConformance

from wbcore_process.sandbox import probe

pytestmark = pytest.mark.skipif(not probe()[0], reason=f"sandbox unavailable here: {probe()[1]}")


class TestOsProcessConformance(TierConformance):
    tier = "os_process"
    compile_wat = staticmethod(lambda wat: pytest.importorskip("wasmtime").wat2wasm(wat))
    request_kind = frames.EXEC

    def request_payload(self) -> dict:
        return {"id": 1, "sha256": "0" * 64, "argv": ["x"], "memory": 1 << 20, "timeout_s": 1,
                "stdout_cap": 1024, "stderr_cap": 1024}

    def open_agent(self, rt) -> Agent:
        from wbcore_process.pool import spawn_worker

        worker = spawn_worker(caps_lib())
        return Agent(send=worker.chan.send_frame, recv=worker.chan.recv, read_fd=worker.box.stdout_fd,
                     secret=worker.secret, alive=worker.box.alive, close=worker.close)

    def sandbox_facts(self, rt, probe_path: str) -> SandboxFacts:
        from wbcore_process.tiers import OsProcessTier

        tier = OsProcessTier(rt)
        tier.call(self.request(rt, "(module (func (export \"_start\")))"))
        init = tier.pool.workers()[0].box.init_pid
        pid = int(Path(f"/proc/{init}/task/{init}/children").read_text().split()[0])
        devices = [ln.split(":")[0].strip()
                   for ln in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]]
        # An empty net namespace whose only interface is down: no connect can leave it.
        isolated = os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        return SandboxFacts(interfaces=devices, connect_refused=isolated,
                            visible=lambda path: os.path.lexists(f"/proc/{pid}/root{path}"))


def caps_lib() -> Path:
    """The caps bridge's guest side, as the tier takes it: served by the WASI guest runner's plugin."""
    import tempfile

    from wbcore_runtime.contract import guest
    from wbcore_runtime.runtime import Runtime

    with tempfile.TemporaryDirectory() as home:
        return guest.sandbox_caps(Runtime.open(plugins=["wasmtime"], home=home), "os_process")
