"""wbcore_runtime.guard.deadline: every exchange's deadline on one thread, cuts on time, cancelled
deadlines not kept."""

from __future__ import annotations

import socket
import threading
import time

from wbcore_runtime.guard import deadline


def test_deadlines_are_kept_on_one_thread_and_cancelled_ones_are_dropped() -> None:
    cuts = deadline._Cuts()
    keys = [cuts.add(time.monotonic() + 300, lambda: None)]
    first = cuts._thread
    keys += [cuts.add(time.monotonic() + 300, lambda: None) for _ in range(999)]
    assert first is not None and first.is_alive() and cuts._thread is first  # one thread for all
    for key in keys:
        cuts.cancel(key)
    assert len(cuts._heap) <= 64  # rebuilt once most of it was cancelled: it holds what is in flight


def test_cuts_run_in_deadline_order_and_a_cancelled_one_never() -> None:
    cuts = deadline._Cuts()
    fired: list[str] = []
    done = threading.Event()
    now = time.monotonic()
    cuts.add(now + 0.3, lambda: (fired.append("late"), done.set()))
    dropped = cuts.add(now + 0.1, lambda: fired.append("cancelled"))
    cuts.add(now + 0.2, lambda: fired.append("early"))
    cuts.cancel(dropped)
    assert done.wait(5)
    assert fired == ["early", "late"]


def test_a_read_still_waiting_ends_at_the_deadline() -> None:
    """What cut_at does to the socket httpcore reports: shut at the deadline, so a blocked recv
    returns (a server that sends nothing, or drips, holds no reader past it)."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        class Stream:
            def get_extra_info(self, what: str) -> socket.socket:
                return client

        start = time.monotonic()
        with deadline.cut_at(start + 0.3) as cut:
            cut.extensions["trace"]("connection.connect_tcp.complete", {"return_value": Stream()})
            assert client.recv(1) == b""  # the cut: end of stream, not a hang
        assert 0.25 <= time.monotonic() - start < 5
    finally:
        for s in (client, peer, server):
            s.close()


def test_a_nan_deadline_cannot_disorder_the_others() -> None:
    """NaN compares false with everything, so a NaN in the shared heap let a later deadline sit
    above an earlier one: another exchange's cut fired when the later one did. The heap's door
    refuses it (a caller's non-number timeout is its own error, e.g. the net broker's)."""
    cuts = deadline._Cuts()
    fired: list[str] = []
    done = threading.Event()
    now = time.monotonic()
    cuts.add(now + 0.6, lambda: (fired.append("late"), done.set()))
    for _ in range(8):
        try:
            cuts.add(float("nan"), lambda: None)
        except ValueError:
            pass
    cuts.add(now + 0.2, lambda: fired.append("early"))
    cuts.add(now + 0.4, lambda: fired.append("middle"))
    assert done.wait(5)
    assert fired == ["early", "middle", "late"]


def test_fired_says_the_deadline_ended_the_exchange_and_is_set_before_the_socket_is_shut() -> None:
    """Every caller asks ``fired`` whether a read that ended was cut (a timeout) or ended by the
    server (an answer): set by the deadline thread before the shutdown, so the reader the shutdown
    wakes finds it set; never set when the block is left before the deadline."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    seen: list[bool] = []
    try:
        class Stream:
            def get_extra_info(self, what: str) -> socket.socket:
                return client

        with deadline.cut_at(time.monotonic() + 0.2) as cut:
            cut.extensions["trace"]("connection.connect_tcp.complete", {"return_value": Stream()})
            assert not cut.fired
            assert client.recv(1) == b""  # ended by the cut...
            seen.append(cut.fired)  # ...which the reader it woke already knows
        assert seen == [True]

        with deadline.cut_at(time.monotonic() + 0.2) as early:
            pass  # the exchange ended on its own before its deadline
        time.sleep(0.4)
        assert not early.fired

        late = time.monotonic() - 1  # connected after the deadline thread cut: cut as it connects
        with deadline.cut_at(late) as cut:
            for _ in range(500):
                if cut.fired:
                    break
                time.sleep(0.01)
            other = socket.create_connection(server.getsockname())

            class Late:
                def get_extra_info(self, what: str) -> socket.socket:
                    return other

            cut.extensions["trace"]("connection.connect_tcp.complete", {"return_value": Late()})
            assert cut.fired and other.recv(1) == b""
            other.close()
    finally:
        for s in (client, peer, server):
            s.close()
