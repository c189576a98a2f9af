"""The shared tier conformance suites (:mod:`wbcore_testing.conformance`) at tier ``container``: wasm
commands and the guest agent (TierConformance), posix commands (PosixTierConformance, slow)."""

from __future__ import annotations

import pytest

from wbcore_runtime.wire import frames
from wbcore_testing.conformance import Agent, PosixTierConformance, SandboxFacts, TierConformance

from wbcore_container import bwrap

pytestmark = pytest.mark.skipif(not bwrap.probe()[0],
                                reason=f"bubblewrap unavailable here: {bwrap.probe()[1]}")


class TestContainerConformance(TierConformance):
    tier = "container"
    compile_wat = staticmethod(lambda wat: pytest.importorskip("wasmtime").wat2wasm(wat))
    posix = True
    request_kind = frames.PTY_OPEN

    def request_payload(self) -> dict:
        return {"session": 1, "program": "/bin/sh"}

    def open_agent(self, rt) -> Agent:
        from wbcore_runtime.contract import terminal

        from wbcore_container import rootfs, shell

        box = shell.start_agent(rootfs.build(rt.home), terminal.ShellRequest(timeout_s=60),
                                terminal.service(rt).agent_file)
        return Agent(send=box.channel.send_frame, recv=box.channel.recv, read_fd=box.channel.read_fd,
                     secret=box.secret, alive=box.alive, close=box.close)

    def sandbox_facts(self, rt, probe_path: str) -> SandboxFacts:
        from wbcore_runtime.build import builder
        from wbcore_testing.fixtures import manifest_text, write_toolkit

        if "sh" not in rt.registry.names("command"):
            write_toolkit(rt.roots[0], "conf-sh",
                          manifest_text("conf-sh", exec="posix", extra={"CLI_BIN": "sh"}))
            rt.discover(refresh=True)
            builder.build(rt, "conf-sh")

        def sh(script: str) -> str:
            return rt.call("sh", ["-c", script], b"", tier="container").stdout.decode()

        out = sh("cat /proc/net/dev; python3 -c \"import socket; s=socket.socket(); s.settimeout(2); "
                 "s.connect(('1.1.1.1', 80))\" 2>/dev/null; echo connect=$?")
        ifaces = [ln.split(":")[0].strip() for ln in out.splitlines() if ":" in ln and "|" not in ln]
        return SandboxFacts(interfaces=ifaces, connect_refused="connect=0" not in out,
                            visible=lambda path: sh(
                                f"test -e '{path}' && echo yes || echo no").strip() == "yes")


# a fork bomb, a flood, and a comparison with every other posix tier installed (e.g. microvm)
@pytest.mark.slow
class TestContainerPosixConformance(PosixTierConformance):
    tier = "container"
    deadline_s = 1.5

    def driver(self, rt):
        from wbcore_container.tiers import ContainerTier

        return ContainerTier(rt)
