"""llm-complete against a loopback fake of an OpenAI-compatible endpoint (started here)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound

KEY = "sk-test-very-secret"


class _Fake(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Fake.seen.append((self.path, self.headers.get("Authorization"), body))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self.send_response(401)
            self.end_headers()
            return
        text = "echo: " + body["messages"][-1]["content"]
        out = json.dumps({"model": body["model"],
                          "choices": [{"message": {"role": "assistant", "content": text},
                          "finish_reason": "stop"}], "usage": {"total_tokens": 3}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def endpoint():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_complete_with_the_hosts_key(make_runtime, endpoint, wb_home):
    rt = make_runtime(plugins=["llm"],
                      env={"WB_LLM_BASE_URL": endpoint, "WB_LLM_API_KEY": KEY, "WB_LLM_MODEL": "tiny"})
    c = rt.dock.context(principal=Principal("t", "agent"), caps={"llm"})
    got = rt.dock.call(c, "llm", "complete", {"prompt": "hi"})
    assert got["text"] == "echo: hi" and got["model"] == "tiny"
    path, auth, body = _Fake.seen[-1]
    assert path == "/v1/chat/completions" and auth == f"Bearer {KEY}" and body["max_tokens"] == 1024
    with pytest.raises(CapabilityDenied, match="not offered"):
        rt.dock.call(c, "llm", "complete", {"prompt": "hi", "model": "gpt-huge"})
    with pytest.raises(InvalidArgs):
        rt.dock.call(c, "llm", "complete", {"messages": [{"role": "root", "content": "x"}]})
    assert KEY not in repr(rt.dock.driver("llm"))
    rt.dock.audit.flush()  # the audit writes in batches
    assert KEY not in (wb_home / "audit" / "audit.jsonl").read_text()


def test_a_base_urls_user_info_stays_out_of_reprs():
    # httpx sends a base URL's user-info as basic auth: it is a credential like the key
    from wbcore_llm.broker import LlmBroker

    from wbcore_runtime.contract.llm import LlmSettings

    b = LlmBroker("https://u:s3cret@proxy.example/v1?key=s3cret", KEY, "tiny")
    s = LlmSettings("openai", "tiny", base_url="https://u:s3cret@proxy.example/v1", api_key=KEY)
    assert "s3cret" not in repr(b) + repr(s) and "https://proxy.example/v1" in repr(b)


def test_wrong_key_is_a_clear_error_without_the_key(make_runtime, endpoint):
    rt = make_runtime(plugins=["llm"],
                      env={"WB_LLM_BASE_URL": endpoint, "WB_LLM_API_KEY": "wrong-key-123",
                           "WB_LLM_MODEL": "m"})
    c = rt.dock.context(principal=Principal("t", "agent"), caps={"llm"})
    with pytest.raises(Exception) as exc:
        rt.dock.call(c, "llm", "complete", {"prompt": "hi"})
    assert "refused the deployer's key" in str(exc.value) and "wrong-key-123" not in str(exc.value)


def test_unconfigured_is_not_found(make_runtime):
    rt = make_runtime(plugins=["llm"], env={})
    c = rt.dock.context(principal=Principal("t", "agent"), caps={"llm"})
    with pytest.raises(NotFound, match="WB_LLM_BASE_URL"):
        rt.dock.call(c, "llm", "complete", {"prompt": "hi"})
