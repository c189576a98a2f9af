"""Revocation reaches a call that is already running (docs/dock.md "Revocation"): the
consent revoke `wbx toolkit revoke` makes (another process's write, seen through the home's
change counter) and the Dock's own revoke each end a spinning guest within 1 s, as
capability-denied with reason ``revoked``; other calls run on."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from wbcore_runtime.build import builder
from wbcore_runtime.trust import consent
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, Timeout

wasmtime = pytest.importorskip("wasmtime")
pytest.importorskip("wbcore_wasmtime")

SPIN = """(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"""


@pytest.fixture
def rt(make_runtime, make_toolkit):
    rt = make_runtime(plugins=["wasmtime"])
    make_toolkit("spinner", exec="command", caps="serve", extra={"CLI_BIN": "spinner", "PROFILE": "compute"})
    rt.discover(refresh=True)
    consent.ConsentStore(rt.home).grant("spinner", ["serve"], None)
    builder.register_artifact(rt, "spinner", rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(SPIN))).sha256)
    # One call to its deadline first: plugins load and the module compiles now, so the calls the
    # tests revoke are spinning (a cut lands at the guest's next epoch tick, not mid-compile).
    with pytest.raises(Timeout):
        rt.call("spinner", timeout=0.3)
    return rt


def run_in_thread(rt, **kw):
    box: dict = {}

    def work():
        t0 = time.monotonic()
        try:
            rt.call("spinner", timeout=20, **kw)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            box["error"] = exc
        box["ended"] = time.monotonic()
        box["took"] = box["ended"] - t0

    th = threading.Thread(target=work, daemon=True)
    th.start()
    return th, box


def wait_running(rt, n, limit=30.0):
    """Until ``n`` calls are in the running table: a call that starts after its principal was
    revoked is another case (its broker calls are refused), not what these tests check."""
    end = time.monotonic() + limit
    while len(rt.running.running()) < n:
        assert time.monotonic() < end, f"{n} calls did not start within {limit} s"
        time.sleep(0.01)


def test_a_consent_revoke_from_another_process_ends_a_running_call(rt):
    th, box = run_in_thread(rt)
    wait_running(rt, 1)
    time.sleep(0.2)
    assert th.is_alive()  # it spins, entered in the table
    # what `wbx toolkit revoke spinner` does, in another process
    subprocess.run([sys.executable, "-c",
                    "import sys; from pathlib import Path; from wbcore_runtime.trust import consent; "
                    "consent.ConsentStore(Path(sys.argv[1])).revoke('spinner')", str(rt.home)], check=True)
    t_revoked = time.monotonic()
    th.join(5)
    assert not th.is_alive()
    assert box["ended"] - t_revoked < 1.0, box
    err = box["error"]
    assert isinstance(err, CapabilityDenied) and err.reason == "revoked", err
    assert "the grant of serve was withdrawn" in err.message
    assert not rt.running.running()


def test_the_docks_revoke_ends_a_running_call_of_that_principal_only(rt):
    mine, other = Principal("t1", "spinner"), Principal("t2", "spinner")
    th1, box1 = run_in_thread(rt, principal=mine)
    th2, box2 = run_in_thread(rt, principal=other)
    wait_running(rt, 2)
    time.sleep(0.2)
    t_revoked = time.monotonic()
    rt.dock.revoke(mine)
    th1.join(5)
    assert box1["ended"] - t_revoked < 1.0 and box1["error"].reason == "revoked"
    assert "t1/spinner was revoked" in box1["error"].message
    assert th2.is_alive()  # another tenant's call of the same toolkit runs on
    rt.dock.revoke(other)
    th2.join(5)
    assert not th2.is_alive() and box2["error"].reason == "revoked"
