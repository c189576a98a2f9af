"""Raw request/response egress: ``tcp``, ``udp`` and ``tls``, each pinned by NetGuard.

One exchange per call: connect to the pinned address, send ``data``, read until the
peer closes, ``read_max`` bytes, or the deadline. TLS verifies the peer certificate
chain and the host name, with SNI = the host name (never the pinned IP).
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any

from wbcore_runtime.dispatch.dock import refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, Timeout

from wbcore_brokers_net.guard import Pin

MAX_READ = 16 << 20
MAX_DATAGRAM = 65_507


def _connect(pin: Pin, timeout: float) -> socket.socket:
    family = socket.AF_INET6 if ":" in pin.ip else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(max(timeout, 0.001))
    try:
        sock.connect((pin.ip, pin.port))
    except TimeoutError:
        sock.close()
        raise refuse(Timeout, "deadline", f"connect to {pin.host}:{pin.port} timed out") from None
    except OSError as exc:
        sock.close()
        raise InvalidArgs(f"connect to {pin.host}:{pin.port} failed: {exc.strerror or exc}") from None
    return sock


def _exchange(sock: Any, pin: Pin, data: bytes, read_max: int, deadline: float, half_close: bool) -> bytes:
    what = f"{pin.host}:{pin.port}"
    try:
        if data:
            sock.sendall(data)
        if half_close:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        out = bytearray()
        while len(out) < read_max:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                chunk = sock.recv(min(65536, read_max - len(out)))
            except TimeoutError:
                break  # the deadline ends the read: return what arrived
            if not chunk:
                break
            out += chunk
        return bytes(out)
    except ssl.SSLError as exc:
        raise refuse(CapabilityDenied, "tls",
                     f"tls exchange with {what} failed: {exc.reason or exc}") from None
    except OSError as exc:
        raise InvalidArgs(f"exchange with {what} failed: {exc.strerror or exc}") from None


def tcp(pin: Pin, data: bytes, read_max: int, deadline: float) -> bytes:
    sock = _connect(pin, deadline - time.monotonic())
    with sock:
        return _exchange(sock, pin, data, min(read_max, MAX_READ), deadline, half_close=True)


def tls(pin: Pin, data: bytes, read_max: int, deadline: float, cafile: str | None) -> bytes:
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    sock = _connect(pin, deadline - time.monotonic())
    try:
        wrapped = ctx.wrap_socket(sock, server_hostname=pin.host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        raise refuse(CapabilityDenied, "tls-verify",
                     f"tls: {pin.host}:{pin.port} certificate not accepted: {exc.verify_message}") from None
    except (ssl.SSLError, OSError) as exc:
        sock.close()
        raise refuse(CapabilityDenied, "tls",
                     f"tls handshake with {pin.host}:{pin.port} failed: {exc}") from None
    with wrapped:
        return _exchange(wrapped, pin, data, min(read_max, MAX_READ), deadline, half_close=False)


def udp(pin: Pin, data: bytes, read_max: int, deadline: float) -> bytes:
    if len(data) > MAX_DATAGRAM:
        raise refuse(InvalidArgs, "too-large", f"udp: datagram of {len(data)} bytes exceeds {MAX_DATAGRAM}")
    family = socket.AF_INET6 if ":" in pin.ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            sock.sendto(data, (pin.ip, pin.port))
            reply, _ = sock.recvfrom(min(read_max, MAX_DATAGRAM))
        except TimeoutError:
            raise refuse(Timeout, "deadline",
                         f"udp: no reply from {pin.host}:{pin.port} before the deadline") from None
        except OSError as exc:
            raise InvalidArgs(f"udp: exchange with {pin.host}:{pin.port} failed: "
                              f"{exc.strerror or exc}") from None
    return reply
