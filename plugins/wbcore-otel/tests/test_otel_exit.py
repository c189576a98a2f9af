"""A process that exports spans exits within the export timeout, whatever the collector does."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

EXPORTS_AND_EXITS = """
import sys, time
from wbcore_otel.tracer import OtelTracer
env = {"OTEL_EXPORTER_OTLP_ENDPOINT": sys.argv[1], "OTEL_EXPORTER_OTLP_TIMEOUT": "1000"}
tracer = OtelTracer.from_env(env)
with tracer.span("wb.test", {}):
    pass
time.sleep(1.5)  # the batch went out: the export now waits on the collector
"""


def test_exit_waits_no_longer_than_the_export_timeout_for_a_collector_that_never_finishes() -> None:
    """A collector (or anything at its address) that answers a byte at a time, never finishing:
    each read gets its byte in time, so the exporter's per-read timeout never fires, and the
    shutdown at exit waited the SDK's own 30 s for the export in progress rather than the
    configured timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 1 s here); a process exits within it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def drip() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n"
                         b"content-length: 100000\r\n\r\n")
            while not stop.wait(0.2):
                try:
                    conn.sendall(b"\0")
                except OSError:
                    return

    threading.Thread(target=drip, daemon=True).start()
    try:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", EXPORTS_AND_EXITS, f"http://127.0.0.1:{port}"], timeout=60,
                       check=True)
        waited = time.monotonic() - t0 - 1.5
        assert waited < 4, f"the exit waited {waited:.1f} s for a collector that never finishes"
    finally:
        stop.set()
        listener.close()
