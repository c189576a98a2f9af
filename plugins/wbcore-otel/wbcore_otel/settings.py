"""The standard OpenTelemetry settings wbcore-otel reads (from the runtime's environment)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wbcore_otel.hook import DISABLED, ENDPOINT, TRACES_ENDPOINT, enabled  # noqa: F401 - defined there, without a dataclass
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.dispatch.audit import redact_target

PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
TRACES_HEADERS = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT"
SERVICE = "OTEL_SERVICE_NAME"
#: What the exporter may use per export (milliseconds, the OTel spec's unit); capped.
DEFAULT_TIMEOUT_MS = 10_000
MAX_TIMEOUT_MS = 60_000


@dataclass(frozen=True, slots=True)
class Settings:
    endpoint: str  # the full traces URL (…/v1/traces)
    protocol: str
    headers: dict[str, str]
    timeout_s: float
    service: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        traces = env.get(TRACES_ENDPOINT)
        if traces:
            endpoint = traces  # the signal-specific endpoint is used as it is
        else:
            endpoint = env[ENDPOINT].rstrip("/") + "/v1/traces"
        if not endpoint.startswith(("http://", "https://")):
            raise InvalidArgs(f"{TRACES_ENDPOINT if traces else ENDPOINT}={redact_target(endpoint)!r}: use "
                              "http(s)://host:port")
        protocol = env.get(TRACES_PROTOCOL) or env.get(PROTOCOL) or "http/protobuf"
        if protocol != "http/protobuf":
            raise InvalidArgs(f"{PROTOCOL}={protocol!r}: wbcore-otel exports http/protobuf (the OTLP "
                              "default); point it at the collector's HTTP port (4318)")
        headers = {}
        for part in (env.get(TRACES_HEADERS) or env.get(HEADERS) or "").split(","):
            key, sep, value = part.partition("=")
            if sep and key.strip():
                headers[key.strip()] = value.strip()
        try:
            timeout_ms = min(float(env.get(TIMEOUT, DEFAULT_TIMEOUT_MS)), MAX_TIMEOUT_MS)
        except ValueError:
            raise InvalidArgs(f"{TIMEOUT}={env.get(TIMEOUT)!r}: milliseconds, e.g. 10000") from None
        return cls(endpoint, protocol, headers, timeout_ms / 1000.0, env.get(SERVICE) or "wbcore")

    def __repr__(self) -> str:  # header values and the endpoint's user-info may be credentials
        return (f"Settings(endpoint={redact_target(self.endpoint)!r}, protocol={self.protocol!r}, "
                f"headers=<{len(self.headers)} hidden>)")
