"""Bounded downloads for ``wasm:`` and ``archive:``: streaming, size-capped, time-capped,
SSRF-guarded (every address checked, the connection pinned to a checked address,
redirects re-checked), hashed while they stream.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from wbcore.errors import CapabilityDenied, InvalidArgs, NotFound, Timeout

MAX_REDIRECTS = 5


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_bytes: int = 256 << 20
    timeout: float = 120.0
    allow_private: bool = False  # loopback/private targets: tests and local mirrors only

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FetchLimits:
        return cls(
            max_bytes=int(env.get("WB_SOURCE_MAX_BYTES", 256 << 20)),
            timeout=float(env.get("WB_SOURCE_TIMEOUT", 120)),
            allow_private=env.get("WB_SOURCES_ALLOW_PRIVATE", "") == "1",
        )


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("100.64.0.0/10"):
        return False  # CGNAT
    return ip.is_global and not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
                                 or ip.is_reserved or ip.is_unspecified)


def resolve(url: str, limits: FetchLimits) -> tuple[str, str, int]:
    """(host, one checked IP to connect to, port) for ``url``, or an error."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise InvalidArgs(f"source URL {url!r}: only http and https are fetched")
    if not parts.hostname or parts.username or parts.password:
        raise InvalidArgs(f"source URL {url!r}: needs a host and no credentials")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NotFound(f"source URL {url!r}: cannot resolve {parts.hostname}: {exc}") from None
    ips = [ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos]
    if not limits.allow_private:
        bad = [str(ip) for ip in ips if not _public(ip)]
        if bad:
            raise CapabilityDenied(f"source URL {url!r} resolves to a non-public address ({', '.join(bad)}); refused (SSRF guard)")
    return parts.hostname, str(ips[0]), port


def download(url: str, dest: Path, limits: FetchLimits) -> str:
    """Stream ``url`` into ``dest``; return the sha256 of the bytes. Raises on any cap."""
    import httpx

    deadline = time.monotonic() + limits.timeout
    for _ in range(MAX_REDIRECTS + 1):
        host, ip, port = resolve(url, limits)
        parts = urlsplit(url)
        netloc = f"[{ip}]" if ":" in ip else ip
        pinned = parts._replace(netloc=f"{netloc}:{port}").geturl()
        headers = {"Host": parts.netloc.rsplit("@", 1)[-1], "Accept-Encoding": "identity"}
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        h = hashlib.sha256()
        total = 0
        try:
            with httpx.Client(timeout=httpx.Timeout(min(30.0, limits.timeout)), follow_redirects=False, trust_env=False) as client:
                with client.stream("GET", pinned, headers=headers, extensions=extensions) as resp:
                    if resp.is_redirect:
                        location = resp.headers.get("location")
                        if not location:
                            raise InvalidArgs(f"source URL {url!r}: redirect without a location")
                        url = urljoin(url, location)
                        continue
                    if resp.status_code == 404:
                        raise NotFound(f"source URL {url!r}: 404 not found")
                    if resp.status_code != 200:
                        raise InvalidArgs(f"source URL {url!r}: HTTP {resp.status_code}")
                    declared = resp.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > limits.max_bytes:
                        raise InvalidArgs(f"source URL {url!r}: {declared} bytes is over the {limits.max_bytes}-byte cap")
                    tmp = dest.with_name(f".{dest.name}.part")
                    with tmp.open("wb") as fh:
                        for chunk in resp.iter_raw(1 << 16):
                            total += len(chunk)
                            if total > limits.max_bytes:
                                raise InvalidArgs(f"source URL {url!r}: over the {limits.max_bytes}-byte cap")
                            if time.monotonic() > deadline:
                                raise Timeout(f"source URL {url!r}: not fetched within {limits.timeout:g}s")
                            h.update(chunk)
                            fh.write(chunk)
                    os.replace(tmp, dest)
                    return h.hexdigest()
        except httpx.TimeoutException:
            raise Timeout(f"source URL {url!r}: timed out") from None
        except httpx.HTTPError as exc:
            raise NotFound(f"source URL {url!r}: {type(exc).__name__}: {exc}") from None
        finally:
            part = dest.with_name(f".{dest.name}.part")
            if part.exists():
                part.unlink()
    raise InvalidArgs(f"source URL: more than {MAX_REDIRECTS} redirects")
