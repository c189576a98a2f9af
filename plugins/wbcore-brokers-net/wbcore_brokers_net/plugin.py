"""Entry point of wbcore-brokers-net. httpx loads on the first egress, not at import.

Deployer settings (from the runtime's environment): ``WB_NET_CA_FILE`` — a CA bundle
that ``net``/``browse``/``tls`` verify peers against instead of the system store;
``WB_NET_ALLOW_PRIVATE_HOSTS`` — hosts or networks on private addresses that a toolkit's
egress may reach (a package mirror, an internal API): :meth:`NetGuard.for_guests`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Broker


def _net(text_only: bool) -> Any:
    def factory(runtime: Any) -> Any:
        from wbcore_runtime.guard.netguard import NetGuard

        from wbcore_brokers_net.brokers import NetBroker

        return NetBroker(NetGuard.for_guests(runtime.env), verify=runtime.env.get("WB_NET_CA_FILE") or True,
                         text_only=text_only)

    return factory


def _socket(kind: str) -> Any:
    def factory(runtime: Any) -> Any:
        from wbcore_runtime.guard.netguard import NetGuard

        from wbcore_brokers_net.brokers import SocketBroker

        return SocketBroker(kind, NetGuard.for_guests(runtime.env),
                            cafile=runtime.env.get("WB_NET_CA_FILE") or None)

    return factory


def _serve(runtime: Any) -> Any:
    from wbcore_brokers_net.serve import ServeBroker

    return ServeBroker(runtime.dock.revocations.revoked)


@hookimpl
def wbcore_brokers() -> Iterator[Broker]:
    yield Broker(name="net",
                 summary="HTTP(S) egress: NetGuard + pin + #+ALLOWED_HOSTS, capped body, deadline",
                 factory=_net(False), operations=("fetch",))
    yield Broker(name="browse", summary="browse-fetch: GET a page as text, same guard as net",
                 factory=_net(True), operations=("fetch",))
    for kind, what in (("tcp", "raw TCP request/response"), ("udp", "UDP send / receive one"),
                       ("tls", "TLS request/response, peer verified, SNI = host name")):
        yield Broker(name=kind, summary=f"{what}; NetGuard + pin", factory=_socket(kind),
                     operations=("exchange",))
    yield Broker(name="serve",
                 summary="inbound flip: the host listens on loopback, the guest answers; size-capped",
                 factory=_serve, operations=("listen", "next", "respond", "close"))


@hookimpl
def wbcore_verify_checks(toolkit: Any, runtime: Any) -> Iterator[Any]:
    """``#+ALLOWED_HOSTS``: every entry parses, and the toolkit asks for a cap it narrows."""
    from wbcore_runtime.contract.errors import WbError
    from wbcore_runtime.contract.records import Check

    text = toolkit.manifest.extra("ALLOWED_HOSTS")
    if not text:
        return
    from wbcore_brokers_net.allowlist import parse_rule

    bad = []
    for entry in text.split():
        try:
            parse_rule(entry)
        except WbError as exc:
            bad.append(exc.message)
    if bad:
        yield Check(False, "allowed-hosts", "; ".join(bad))
    else:
        yield Check(True, "allowed-hosts", f"{len(text.split())} host rule(s) narrow egress")
    if not set(toolkit.manifest.caps) & {"net", "browse", "tcp", "udp", "tls"}:
        yield Check(True, "allowed-hosts", "#+ALLOWED_HOSTS is set but #+CAPS asks for no egress cap",
                    warning=True)
