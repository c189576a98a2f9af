"""Fixtures of the wbcore-engine tests: a real engine on loopback (the served HTTP server in a thread)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

TOKEN = "engine-test-token-0123456789"


@dataclass
class Served:
    url: str
    token: str
    runtime: Any

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return _free_port()


@pytest.fixture
def serve_engine() -> Iterator[Any]:
    """``serve_engine(runtime, sessions=None, limits=None)`` → a :class:`Served` engine."""
    stops: list[tuple[Any, threading.Thread]] = []

    def start(runtime: Any, **kw: Any) -> Served:
        from wbcore_engine import app as _app
        from wbcore_runtime.contract import http_server

        port = _free_port()
        bind = kw.pop("bind", "127.0.0.1")
        limits = kw.setdefault("limits", _app.EngineLimits())
        served = http_server.service(runtime)
        asgi = _app.build(runtime, token=TOKEN, served=served, bind=bind, **kw)
        # the server as wbx engine serve runs it: every connection-level bound in force
        uv = served.server(asgi, host=bind, port=port, limits=limits.server, log_level="warning",
                           lifespan="off")
        thread = threading.Thread(target=uv.run, daemon=True)
        thread.start()
        stops.append((uv, thread))
        for _ in range(200):
            if uv.started:
                break
            threading.Event().wait(0.025)
        assert uv.started, "the engine did not start"
        return Served(f"http://{bind}:{port}", TOKEN, runtime)

    yield start
    for uv, thread in stops:
        uv.should_exit = True
        thread.join(timeout=10)
