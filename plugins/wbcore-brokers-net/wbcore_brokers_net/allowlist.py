"""``#+ALLOWED_HOSTS``: a toolkit's own narrowing of egress, on top of NetGuard.

Entries are ``scheme://host:port``, space-separated. Rules (docs/dock.md):
- ``scheme`` is matched exactly (``https``, ``http``, ``tcp``, ``udp``, ``tls``); ``*`` = any.
- ``host`` is matched case-insensitively after IDNA; ``*.example.com`` matches any name
  *below* example.com (one or more labels) but not ``example.com`` itself; a bare ``*``
  matches any host. IP literals match only the same address. No other wildcards.
- ``:port`` may be omitted (the scheme's default: http 80, https 443) or ``*`` (any port).
An empty list does not narrow. A declared list that no entry matches is capability-denied.
NetGuard still applies to whatever the list allows.
"""

from __future__ import annotations

from dataclasses import dataclass

from wbcore_runtime.dispatch.dock import refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Rule:
    scheme: str
    host: str
    port: int | None  # None = any

    def matches(self, scheme: str, host: str, port: int) -> bool:
        if self.scheme not in ("*", scheme):
            return False
        if self.port is not None and self.port != port:
            return False
        if self.host == "*":
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host


def _norm_host(host: str) -> str:
    h = host.strip().strip("[]").rstrip(".").lower()
    try:
        return h.encode("idna").decode("ascii") if h and h != "*" and not h.startswith("*.") else h
    except UnicodeError:
        return h


def parse_rule(text: str) -> Rule:
    if "://" not in text:
        raise InvalidArgs(f"#+ALLOWED_HOSTS entry {text!r}: expected scheme://host[:port]")
    scheme, _, rest = text.partition("://")
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = rest.partition(":")
    if "*" in host and not (host == "*" or (host.startswith("*.") and "*" not in host[2:])):
        raise InvalidArgs(f"#+ALLOWED_HOSTS entry {text!r}: '*' is allowed only as the whole host or a "
                          "leading '*.' label")
    if port_text == "*":
        port = None
    elif port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InvalidArgs(f"#+ALLOWED_HOSTS entry {text!r}: bad port {port_text!r}")
        port = int(port_text)
    else:
        port = DEFAULT_PORTS.get(scheme.lower())
    if not host:
        raise InvalidArgs(f"#+ALLOWED_HOSTS entry {text!r}: empty host")
    return Rule(scheme.lower(), _norm_host(host), port)


def check(entries: tuple[str, ...] | list[str], scheme: str, host: str, port: int) -> None:
    """Refuse ``scheme://host:port`` unless an entry allows it (no entries: no narrowing)."""
    if not entries:
        return
    h = _norm_host(host)
    for entry in entries:
        if parse_rule(entry).matches(scheme.lower(), h, port):
            return
    raise refuse(CapabilityDenied, "not-allowed-host",
                 f"{scheme}://{host}:{port} is not in the toolkit's #+ALLOWED_HOSTS ({' '.join(entries)})")
