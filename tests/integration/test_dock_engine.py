"""The Dock through the real run path: Runtime.call → wasmtime → wb.<cap> → broker → audit."""

from __future__ import annotations

import cbor2
import pytest
import wasmtime

from wbcore_audit_trail import reader
from wbcore_runtime.build import builder
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied

pytest.importorskip("wbcore_brokers_state")


def _hex(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


def kv_get_guest(key: str) -> bytes:
    """A WASI command: wb.kv {"op": "get", "key": key}; prints the CBOR response or error."""
    req = cbor2.dumps({"op": "get", "key": key})
    return bytes(wasmtime.wat2wasm(f"""(module
      (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
      (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
      (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
      (memory (export "memory") 2)
      (data (i32.const 64) "{_hex(req)}")
      (func (export "_start") (local $n i64)
        (local.set $n (call $kv (i32.const 64) (i32.const {len(req)}) (i32.const 4096) (i32.const 60000)))
        (if (i64.lt_s (local.get $n) (i64.const 0)) (then (local.set $n (call $fetch (i32.const 4096) (i32.const 60000)))))
        (i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
        (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""))  # noqa: E501


def _register(rt, make_toolkit, ident: str, wasm: bytes, caps: str) -> None:
    make_toolkit(ident, exec="command", caps=caps, extra={"CLI_BIN": ident})
    rt.discover(refresh=True)
    art = rt.artifacts.put_bytes(wasm)
    builder.register_artifact(rt, ident, art.sha256)


def test_ungranted_cap_does_not_instantiate_and_granting_runs_the_same_artifact(make_runtime, make_toolkit,
                                                                                wbx):
    rt = make_runtime(plugins=["wasmtime", "brokers-state", "audit-trail"])
    wasm = kv_get_guest("greeting")
    _register(rt, make_toolkit, "kvguest", wasm, caps="")  # #+CAPS does not declare kv
    with pytest.raises(CapabilityDenied, match="'kv'"):
        rt.call("kvguest")
    r = wbx("run", "kvguest", runtime=rt, input=b"")
    assert r.exit_code == 126 and "kv" in r.stderr

    rt.dock.call(rt.dock.context(principal=Principal("default", "setup"), caps={"kv"}), "kv", "put",
                 {"key": "greeting", "value": b"hi there"})
    _register(rt, make_toolkit, "kvguest", wasm, caps="kv")  # the same bytes, now granted by profile
    out = rt.call("kvguest")
    assert out.exit_code == 0 and cbor2.loads(out.stdout) == {"value": b"hi there"}

    entries = list(reader.entries(rt.dock.audit))
    assert entries[-1]["cap"] == "kv" and entries[-1]["outcome"] == "allowed"
    assert entries[-1]["principal"] == "default/kvguest"
    assert wbx("audit", "--verify", runtime=rt).exit_code == 0


def test_revocation_and_not_found_reach_the_guest_as_status(make_runtime, make_toolkit):
    rt = make_runtime(plugins=["wasmtime", "brokers-state"])
    _register(rt, make_toolkit, "kvguest", kv_get_guest("absent"), caps="kv")
    err = cbor2.loads(rt.call("kvguest").stdout)
    assert err["error"] == "not-found"
    rt.dock.revoke(Principal("default", "kvguest"))
    err = cbor2.loads(rt.call("kvguest").stdout)
    assert err["error"] == "capability-denied" and err["reason"] == "revoked"
    assert [e["outcome"] for e in reader.entries(rt.dock.audit)][-2:] == ["denied", "denied"]


def test_consent_grant_makes_a_third_party_artifact_run(make_runtime, make_toolkit, wbx, monkeypatch):
    import base64

    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(bytes(32)).decode())
    make_toolkit("tpkv", exec="command", caps="kv", trust="third-party", extra={"CLI_BIN": "tpkv"})
    rt = make_runtime(plugins=["wasmtime", "brokers-state"])
    assert wbx("toolkit", "sign", "tpkv", runtime=rt).exit_code == 0
    rt.discover(refresh=True)
    art = rt.artifacts.put_bytes(kv_get_guest("greeting"))
    builder.register_artifact(rt, "tpkv", art.sha256)
    with pytest.raises(CapabilityDenied, match="'kv'"):  # declared and in the profile, but not consented to
        rt.call("tpkv")
    r = wbx("toolkit", "grant", "tpkv", "kv", runtime=rt)
    assert r.exit_code == 0, r.stderr
    out = cbor2.loads(rt.call("tpkv").stdout)
    assert out["error"] == "not-found"  # it ran and reached the broker (the key is simply absent)
