"""wbcore-llm-local: the bundled model, the server's settings and the chat handler; the
slow test starts the real server on loopback and stops it."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys

import pytest

from wbcore_llm_local import handler
from wbcore_llm_local.model import LOOPBACK, MODEL_ALIAS, model_path
from wbcore_llm_local import server
from wbcore_llm_local.server import LocalServer, exports, free_port


def test_the_model_ships_in_a_wheel_as_gguf() -> None:
    path = model_path()
    assert path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"


def test_settings_name_a_loopback_endpoint_and_the_key_stays_out_of_reprs() -> None:
    srv = LocalServer(port=free_port())
    s = srv.settings()
    assert s["WB_LLM_PROVIDER"] == "openai" and s["WB_LLM_MODEL"] == MODEL_ALIAS
    assert s["WB_LLM_BASE_URL"] == f"http://{LOOPBACK}:{srv.port}/v1" and len(s["WB_LLM_API_KEY"]) >= 32
    assert srv.key not in repr(srv) and LocalServer().key != srv.key  # a fresh key per server
    assert exports({"A": "x y", "B": "it's"}) == "export A='x y'\nexport B='it'\"'\"'s'"


def test_a_server_killed_by_an_illegal_instruction_is_reported_with_the_portable_rebuild() -> None:
    # what a llama.cpp built for instructions this CPU faults on does on its first completion
    died = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"])
    said = server._death(died.returncode)
    assert "SIGILL" in said and "CMAKE_ARGS=-DGGML_NATIVE=OFF" in said and "--no-cache-dir" in said
    assert server._death(3) == "it exited with code 3"
    killed = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert server._death(killed.returncode) == "it was killed by SIGKILL"


def test_a_whole_answer_becomes_the_chunks_a_streaming_client_reads() -> None:
    resp = {"id": "c1", "created": 1, "model": "m", "usage": {"prompt_tokens": 9, "completion_tokens": 3},
            "choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
                         "tool_calls": [{"id": "t1", "type": "function",
                                         "function": {"name": "b64__b64", "arguments": "{\"args\": []}"}}]}}]}
    chunks = list(handler._chunks(resp))
    assert chunks[0]["choices"][0]["delta"]["tool_calls"][0] == {
        "index": 0, "id": "t1", "type": "function",
        "function": {"name": "b64__b64", "arguments": "{\"args\": []}"}}
    assert chunks[1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[2]["choices"] == [] and chunks[2]["usage"]["prompt_tokens"] == 9


def test_required_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(ValueError, match="name the tool"):
        handler.handler(None, [{"role": "user", "content": "hi"}], tools=[{"type": "function"}],
                        tool_choice="required")


def _post(srv: LocalServer, body: dict, key: str | None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(LOOPBACK, srv.port, timeout=300)
    try:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.slow
def test_the_real_server_answers_with_its_key_only_and_streams_a_named_tool_call(tmp_path) -> None:
    with LocalServer(log=tmp_path / "server.log") as srv:
        assert srv.get("/v1/models")[0] == 200
        tool = {"type": "function", "function": {"name": "echo", "description": "echo text",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                               "required": ["text"]}}}
        body = {"model": MODEL_ALIAS, "stream": True, "max_tokens": 32, "tools": [tool],
                "tool_choice": {"type": "function", "function": {"name": "echo"}},
                "messages": [{"role": "user", "content": "Echo the word hello."}]}
        assert _post(srv, body, None)[0] == 401
        status, raw = _post(srv, body, srv.key)
        proc = srv.proc
    assert proc is not None and proc.poll() is not None  # stopped on leaving the block
    assert status == 200, raw[:500]
    events = [json.loads(x[6:]) for x in raw.decode().splitlines() if x.startswith("data: {")]
    calls = [c for e in events for ch in e["choices"] for c in ch["delta"].get("tool_calls") or ()]
    assert calls and calls[0]["function"]["name"] == "echo"
    assert "text" in json.loads(calls[0]["function"]["arguments"])  # grammar-constrained to the schema
    assert any(e.get("usage", {}).get("prompt_tokens", 0) > 0 for e in events)


@pytest.mark.slow
def test_serve_local_detached_prints_settings_and_a_pid_to_stop(tmp_path) -> None:
    """``python -m wbcore_llm_local --detach`` (= ``wbx llm serve-local --detach``): eval-able
    settings of a server that answers, and the pid that stops it."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    out = subprocess.run([sys.executable, "-m", "wbcore_llm_local", "--detach", "--log",
                          str(tmp_path / "s.log")],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    env = dict(re.findall(r"^export (WB_LLM_\w+)=(\S+)$", out.stdout, re.M))
    pid = int(re.search(r"kill (\d+)", out.stdout).group(1))
    assert env["WB_LLM_LOCAL_PID"] == str(pid)  # a script stops it: trap 'kill "$WB_LLM_LOCAL_PID"' EXIT
    try:
        assert env["WB_LLM_BASE_URL"].startswith(f"http://{LOOPBACK}:") and env["WB_LLM_MODEL"] == MODEL_ALIAS
        srv = LocalServer(port=int(env["WB_LLM_BASE_URL"].rsplit(":", 1)[1].split("/")[0]))
        srv.key = env["WB_LLM_API_KEY"].strip("'")
        assert srv.get("/v1/models")[0] == 200
    finally:
        os.kill(pid, signal.SIGTERM)
    for _ in range(100):  # bounded: 10 s (the server is not our child: it left with --detach)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the detached server {pid} did not stop on SIGTERM")
