"""net, browse and the socket brokers stop at their cap while the bytes arrive, not after:
an endless body is cancelled at ``min(max_bytes, max_response)`` plus one read."""

from __future__ import annotations

import time

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard import deadline
from wbcore_brokers_net.brokers import NetBroker
from wbcore_brokers_net.guard import NetGuard

from wbnet_targets import ENDLESS_SENT, PUBLIC_IP

MiB = 1 << 20


@pytest.fixture
def dock(make_runtime, dns):
    rt = make_runtime(plugins=["brokers-net"])
    guard = NetGuard(resolver=dns, public=frozenset({PUBLIC_IP}))
    rt.dock.set_driver("net", NetBroker(guard))
    rt.dock.set_driver("browse", NetBroker(guard, text_only=True))
    return rt.dock


def ctx(dock, **kw):
    return dock.context(principal=Principal("t", "fetch"), caps={"net", "browse"}, **kw)


@pytest.mark.parametrize("cap, args, ctx_kw", [
    (16 * MiB, {}, {}),                                    # the default answer cap
    (MiB, {"max_bytes": MiB}, {}),                         # the guest's own max_bytes
    (256 << 10, {"max_bytes": 8 * MiB}, {"max_response": 256 << 10}),  # the call's max_response wins
])
def test_endless_body_is_cancelled_at_the_cap(dock, http_target, cap, args, ctx_kw):
    sent0 = ENDLESS_SENT[0]
    t0 = time.monotonic()
    with pytest.raises(InvalidArgs, match=f"passed the {cap}-byte cap") as exc:
        dock.call(ctx(dock, **ctx_kw), "net", "fetch",
                  {"url": f"http://public.test:{http_target}/endless", "timeout": 30, **args})
    assert exc.value.reason == "too-large"
    assert time.monotonic() - t0 < 10, "stopped by the cap, not by the 30 s deadline"
    time.sleep(0.2)  # let the server notice the hang-up
    # what the server managed to push: the cap plus what loopback socket buffers hold
    assert ENDLESS_SENT[0] - sent0 < cap + 16 * MiB


def test_browse_text_is_measured_against_the_cap(dock, http_target):
    with pytest.raises(InvalidArgs) as exc:
        dock.call(ctx(dock, max_response=64 << 10), "browse", "fetch",
                  {"url": f"http://public.test:{http_target}/endless"})
    assert exc.value.reason == "too-large"
    got = dock.call(ctx(dock), "browse", "fetch", {"url": f"http://public.test:{http_target}/page"})
    assert got["text"] == "Title Hello & bye"


def test_tcp_reads_no_more_than_the_answer_can_carry(dock, dns, tcp_echo):
    from wbcore_brokers_net.brokers import ENVELOPE, SocketBroker

    dock.set_driver("tcp", SocketBroker("tcp", NetGuard(resolver=dns, public=frozenset({PUBLIC_IP}))))
    c = dock.context(principal=Principal("t", "fetch"), caps={"tcp"}, max_response=64 << 10)
    got = dock.call(c, "tcp", "exchange",
                    {"host": "public.test", "port": tcp_echo, "data": b"a" * (200 << 10),
                                           "read_max": 1 << 20})
    assert got["data"] == b"A" * ((64 << 10) - ENVELOPE)


def test_a_nan_timeout_is_invalid_args(dock):
    """A CBOR NaN passed ``timeout <= 0`` and became a NaN deadline: a confusing internal error
    from the socket, and a NaN in the deadline heap every exchange in the process shares."""
    with pytest.raises(InvalidArgs, match="timeout"):
        dock.call(ctx(dock), "net", "fetch", {"url": "http://public.test:1/", "timeout": float("nan")})
    assert all(when == when for when, *_ in deadline._cuts._heap)
