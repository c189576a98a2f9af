"""Start, wait for and stop the local model server: what ``wbx llm serve-local``, the test
fixture and ``bench/agent_tasks.py`` share.

The server is a child process (``python -m wbcore_llm_local.serve``) bound to 127.0.0.1 on
a free port, with a fresh random key (given through its environment, never argv): other
users of the machine cannot use it, and nothing leaves loopback. ``start`` returns once
``GET /v1/models`` answers 200 with that key and a one-token completion has run (a llama.cpp built
for instructions this CPU faults on dies on its first inference, not at load: that is said at
start, with the fix, rather than as an unreachable endpoint mid-run); every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from wbcore_runtime.contract.errors import Timeout, WbError
from wbcore_llm_local.model import LOOPBACK, MODEL_ALIAS, model_path

#: Seconds to wait for the server to load the model and answer (a cold page cache and a
#: busy machine included; the 98 MB model loads in about a second when idle).
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
KEY_ENV = "WB_LLM_LOCAL_KEY"
LOG_TAIL = 2000


def free_port() -> int:
    """A port the kernel says is free on loopback now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class LocalServer:
    """One local model server. ``with LocalServer() as srv: srv.settings()`` or start/stop."""

    def __init__(self, *, port: int | None = None, threads: int | None = None,
                 log: Path | None = None) -> None:
        self.port = port
        self.threads = threads
        self.key = secrets.token_urlsafe(24)
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:  # never the key
        return f"LocalServer({self.base_url if self.port else 'not started'}, model={MODEL_ALIAS!r})"

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    def settings(self) -> dict[str, str]:
        """The ``WB_LLM_*`` settings the agent loop reads (docs/agents.md, "Providers")."""
        # an answer cap that fits the 4096-token context beside the prompt (the default, 4096, does not)
        return {"WB_LLM_PROVIDER": "openai", "WB_LLM_BASE_URL": self.base_url, "WB_LLM_MODEL": MODEL_ALIAS,
                "WB_LLM_API_KEY": self.key, "WB_LLM_MAX_TOKENS": "512"}

    def start(self, timeout: float = START_TIMEOUT_S) -> LocalServer:
        model_path()  # a missing model is said now, not as a server crash
        self.port = self.port or free_port()
        argv = [sys.executable, "-m", "wbcore_llm_local.serve", "--port", str(self.port), "--api-key-env",
                KEY_ENV]
        if self.threads:
            argv += ["--threads", str(self.threads)]
        env = {**os.environ, KEY_ENV: self.key}
        if self.log_path is None:  # a file, never a pipe nobody reads (a full pipe would stall the server)
            import tempfile

            fd, name = tempfile.mkstemp(prefix="wbcore-llm-local-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the server's life
        # its own session: a Ctrl-C at the terminal reaches the CLI, which stops the server itself
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     env=env, start_new_session=True)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise WbError(f"the local model server stopped before it answered: "
                              f"{_death(self.proc.returncode)}; {self._tail()}")
            try:
                status = self.get("/v1/models", timeout=2.0)[0]
                if status == 200:
                    self._probe(deadline)
                    return
                last = f"HTTP {status}"
            except OSError as exc:
                last = type(exc).__name__
            time.sleep(0.25)
        raise Timeout(f"the local model server on {self.base_url} did not answer within {timeout:g} s "
                      f"(last: {last}); {self._tail()}")

    def _probe(self, deadline: float) -> None:
        """One completion of one token, so a server that cannot infer on this CPU fails here."""
        body = json.dumps({"model": MODEL_ALIAS, "max_tokens": 1,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=max(1.0, deadline - time.monotonic()))
        try:
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read(1 << 20)
            if resp.status == 200:
                return
            failed = f"answered HTTP {resp.status} to a one-token completion"
        except OSError as exc:
            failed = f"failed a one-token completion ({type(exc).__name__})"
        finally:
            conn.close()
        assert self.proc is not None
        try:
            code = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise WbError(f"the local model server {failed}: {self._tail()}") from None
        raise WbError(f"the local model server stopped on its first completion: {_death(code)}; "
                      f"{self._tail()}")

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """One GET to the server with its key (loopback only)."""
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.key}"})
            resp = conn.getresponse()
            return resp.status, resp.read(1 << 20)
        finally:
            conn.close()

    def _tail(self) -> str:
        if self.log_path is not None and self.log_path.is_file():
            tail = self.log_path.read_bytes()[-LOG_TAIL:].decode(errors="replace").strip()
            return f"server log ({self.log_path}): {tail or '(empty)'}"
        return "no server output kept"

    def detach(self) -> int:
        """Leave the server running after this process ends; its pid (stop it with ``kill PID``)."""
        assert self.proc is not None, "start() first"
        pid, self.proc = self.proc.pid, None
        if self._log is not None:
            self._log.close()
            self._log = None
        return pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``; only the process this object started."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _death(code: int | None) -> str:
    """How the server process ended, with the fix when it is a build this CPU cannot run."""
    if code is None or code >= 0:
        return f"it exited with code {code}"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    if -code == signal.SIGILL:
        # ggml's default build targets the build machine's CPU (GGML_NATIVE); a virtual CPU can
        # advertise instructions (AMX, AVX-512) it then faults on, or the wheel came from another host.
        return (f"it was killed by {name} (an illegal instruction: its llama.cpp build uses an instruction "
                "this CPU does not run); rebuild it for any x86-64 CPU with AVX2: CMAKE_ARGS="
                "-DGGML_NATIVE=OFF pip install --force-reinstall --no-deps --no-cache-dir "
                "'llama-cpp-python[server]>=0.3.7,<0.4' (python3 dev.py setup builds it so)")
    return f"it was killed by {name}"


def exports(settings: Mapping[str, str]) -> str:
    """Shell lines that set ``settings`` (``eval "$(...)"``-able)."""
    import shlex

    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in settings.items())
