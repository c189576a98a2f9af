"""How a wasm command's guest ended, mapped to one result or error for every tier that runs
wasm (``wbcore_runtime.contract.calls.check_guest_end``: instance, os_process and container call it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime.contract.calls import (CommandRequest, GuestTrap, LimitExceeded, Principal,
                                           check_guest_end, near_memory_cap)
from wbcore_runtime.contract.errors import Timeout
from wbcore_runtime.trust.policy import profile

PROF = profile("compute")
REQ = CommandRequest(name="g", sha256="0" * 64, artifact=Path("g.wasm"), argv=(), stdin=b"", profile=PROF,
                     timeout_s=2.0, principal=Principal(toolkit="g"))
AT_CAP = PROF.memory_bytes - 1024
FAR = 1 << 16


@pytest.mark.parametrize(("kw", "error", "limit", "text"), [
    ({"stopped": "timeout", "over": "stdout", "trap": "wasm trap: x"}, Timeout, None,
     "over its 2 s deadline"),
    ({"stopped": "cancelled"}, Timeout, None, "cancelled by the caller"),
    ({"over": "stderr", "trap": "wasm trap: x", "peak": AT_CAP}, LimitExceeded, "stderr",
     "stderr passed the"),
    ({"trap": "wasm trap: interrupt", "trap_code": "INTERRUPT", "peak": AT_CAP}, Timeout, None, "deadline"),
    ({"trap": "wasm trap: all fuel consumed", "trap_code": "OUT_OF_FUEL", "fuel": 7}, LimitExceeded, "fuel",
     "(7 units)"),
    ({"trap": "wasm trap: unreachable", "peak": AT_CAP}, LimitExceeded, "memory",
     "memory limit of profile compute"),
    ({"trap": "wasm trap: unreachable", "peak": FAR}, GuestTrap, None,
     "guest trapped: wasm trap: unreachable"),
    ({"exit_code": 1, "peak": AT_CAP}, LimitExceeded, "memory", "exited 1 at the"),
])
def test_each_end_maps_to_one_error_in_one_order(kw, error, limit, text) -> None:
    with pytest.raises(error) as info:
        check_guest_end(REQ, wall=0.5, **kw)
    assert type(info.value) is error and text in info.value.message
    if limit is not None:
        assert info.value.limit == limit


def test_a_guest_that_ended_on_its_own_is_a_result() -> None:
    assert check_guest_end(REQ, wall=0.5, exit_code=3, peak=FAR) is None
    assert check_guest_end(REQ, wall=0.5, peak=AT_CAP) is None  # exit 0 at the cap is a success


def test_the_memory_signal_is_one_sixteenth_of_the_cap_and_at_least_a_page() -> None:
    assert near_memory_cap((15 << 20) + 1, 16 << 20) and not near_memory_cap(15 << 20, 16 << 20)
    assert near_memory_cap((512 << 10) - 60000, 512 << 10)  # a page, where 1/16 of the cap is less

