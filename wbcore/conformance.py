"""The tier conformance suite (issue 13): one set of checks every sandbox tier that runs
``posix`` commands must pass, written once and run per tier.

A plugin's tests subclass :class:`PosixTierConformance`, set :attr:`tier` and, for a tier
that bridges caps, :meth:`kv_argv`; pytest collects the inherited ``test_*`` methods. The
checks call the tier's driver directly with a :class:`~wbcore.calls.CommandRequest` whose
artifact is a posix manifest (``wbcore.builder.POSIX_MAGIC``), so they need only the core
and the tier's plugin (the ``posix`` shape is not needed to run them). Each shell script
uses only POSIX ``sh`` and the commands every guest image has (busybox or Debian).

Protocol-level checks (the session secret, malformed frames) depend on how a tier reaches
its guest and live in the tier's own tests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from typing import Any, ClassVar

import pytest

from wbcore.builder import POSIX_MAGIC
from wbcore.calls import CallResult, CommandRequest, LimitExceeded, Principal
from wbcore.errors import Timeout, WbError
from wbcore.policy import profile


class PosixTierConformance:
    """Subclass with ``tier = "<name>"`` (and override :meth:`driver` if the tier's driver is
    not ``runtime.tiers.get(tier).factory(runtime)``)."""

    tier: ClassVar[str] = ""
    #: Seconds the deadline test grants (a tier that restores a VM needs a little to start).
    deadline_s: ClassVar[float] = 3.0

    # --- hooks ----------------------------------------------------------------------------

    def driver(self, rt: Any) -> Any:
        return rt.tiers.get(self.tier).factory(rt)

    def kv_argv(self, request: dict[str, Any]) -> list[str] | None:
        """The guest argv that sends ``request`` to the host's kv broker and prints the
        answer as JSON; ``None``: this tier does not bridge caps."""
        return None

    # --- helpers --------------------------------------------------------------------------

    @pytest.fixture
    def rt(self, make_runtime: Any) -> Any:
        return make_runtime()

    def request(self, rt: Any, cli: str, argv: list[str], stdin: bytes = b"", **kw: Any) -> CommandRequest:
        art = rt.artifacts.put_bytes(POSIX_MAGIC + json.dumps({"cli_bin": cli, "toolkit": "conf"}).encode())
        base = CommandRequest(name=cli, sha256=art.sha256, artifact=rt.artifacts.path(art.sha256), argv=tuple(argv),
                              stdin=stdin, profile=profile("compute"), timeout_s=10.0,
                              principal=Principal(toolkit="conf"), toolkit="conf", tier=self.tier)
        return dataclasses.replace(base, **kw)

    def sh(self, rt: Any, script: str, stdin: bytes = b"", **kw: Any) -> CallResult:
        return self.driver(rt).call(self.request(rt, "sh", ["-c", script], stdin, **kw))

    # --- the checks ---------------------------------------------------------------------------

    def test_output_equality(self, rt: Any) -> None:
        data = os.urandom(100_000)
        res = self.driver(rt).call(self.request(rt, "sha256sum", [], data))
        assert res.exit_code == 0 and res.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
        res = self.sh(rt, "cat; printf 'to stderr' >&2; exit 7", stdin=b"through the tier\n" * 100)
        assert (res.stdout, res.stderr, res.exit_code) == (b"through the tier\n" * 100, b"to stderr", 7)

    def test_output_equals_the_other_posix_tiers(self, rt: Any) -> None:
        others = [t for t in rt.tiers if t.name != self.tier and "posix" in t.kinds and t.available().ok]
        if not others:
            pytest.skip("no other tier that runs posix commands is installed and available here")
        data = bytes(range(256)) * 64
        cases = [("sha256sum", [], data), ("sh", ["-c", "cat; printf 'to stderr' >&2; exit 7"], b"a\nb\n"),
                 ("sh", ["-c", "echo $#; for a; do echo \"[$a]\"; done", "x", "two words", "é"], b""),
                 ("wc", ["-c"], data)]
        for cli, argv, stdin in cases:
            here = self.outcome(rt, self.request(rt, cli, argv, stdin))
            for t in others:
                req = dataclasses.replace(self.request(rt, cli, argv, stdin), tier=t.name)
                try:
                    res = t.factory(rt).call(req)
                    there: Any = (res.stdout, res.stderr, res.exit_code)
                except WbError as exc:
                    there = (type(exc).__name__, getattr(exc, "limit", None))
                if cli == "wc":  # busybox and coreutils pad the count differently
                    here, there = _strip(here), _strip(there)
                assert here == there, (cli, argv, t.name)

    def test_deadline(self, rt: Any) -> None:
        t0 = time.monotonic()
        with pytest.raises(Timeout, match="deadline"):
            self.sh(rt, "sleep 100 & while :; do :; done", timeout_s=self.deadline_s)
        assert time.monotonic() - t0 < self.deadline_s + 1.0

    def test_memory_bomb(self, rt: Any) -> None:
        # the string doubles until the address-space limit refuses it (2 GiB if nothing did)
        res = self.sh(rt, "x=a; i=0; while [ $i -lt 31 ]; do x=\"$x$x\"; i=$((i+1)); done; echo survived ${#x}")
        assert res.exit_code != 0 and b"survived" not in res.stdout
        assert self.sh(rt, "echo still here").stdout == b"still here\n"

    def test_output_flood(self, rt: Any) -> None:
        t0 = time.monotonic()
        with pytest.raises(LimitExceeded, match="stdout passed") as info:
            self.driver(rt).call(self.request(rt, "yes", [], timeout_s=30.0))
        assert info.value.limit == "stdout" and time.monotonic() - t0 < 20

    def test_fork_bomb(self, rt: Any) -> None:
        t0 = time.monotonic()
        try:
            res = self.sh(rt, "b() { b | b & }; b; sleep 1; echo survived", timeout_s=5.0)
            out = (res.stdout + res.stderr).decode(errors="replace").lower()
            assert "fork" in out or "resource" in out or "retry" in out, out[-400:]
        except Timeout:
            pass
        assert time.monotonic() - t0 < 5.0 + 1.0 + 1.0
        assert self.sh(rt, "echo after the bomb").stdout == b"after the bomb\n"

    def test_no_network(self, rt: Any) -> None:
        res = self.sh(rt, "cat /proc/net/dev; wget -q -T 2 -O - http://10.0.2.2/ 2>&1; echo wget=$?; "
                          "wget -q -T 2 -O - http://1.1.1.1/ 2>&1; echo wget=$?")
        out = res.stdout.decode()
        ifaces = [ln.split(":")[0].strip() for ln in out.splitlines() if ":" in ln and "|" not in ln
                  and not ln.startswith("wget")]
        assert set(ifaces) <= {"lo"}, out
        assert "wget=0" not in out

    def test_no_host_file_visible(self, rt: Any, wb_home: Any) -> None:
        paths = [str(wb_home), "/work", "/root/.cache", "/etc/shadow", str(rt.artifacts.path(
            rt.artifacts.put_bytes(b"a host file").sha256))]
        res = self.sh(rt, f"for p in {' '.join(paths)}; do ls -d $p >/dev/null 2>&1 && echo SEEN $p; done; id -u")
        out = res.stdout.decode()
        assert "SEEN" not in out, out
        assert out.split()[-1] != "0"

    def test_kv_round_trip(self, rt: Any) -> None:
        if self.kv_argv({"op": "get"}) is None:
            pytest.skip(f"tier {self.tier} does not bridge caps")
        if "kv" not in rt.brokers.names():
            pytest.skip("the kv broker (wb-brokers-state) is not installed")
        put = self.kv_argv({"op": "put", "key": "k", "value": f"from tier {self.tier}"})
        get = self.kv_argv({"op": "get", "key": "k"})
        assert put and get
        kw = {"caps": frozenset({"kv"}), "profile": profile("minimal")}
        res = self.driver(rt).call(self.request(rt, put[0], put[1:], **kw))
        assert res.exit_code == 0, res.stderr
        res = self.driver(rt).call(self.request(rt, get[0], get[1:], **kw))
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout) == {"value": f"from tier {self.tier}"}
        # The value lives in the host's kv, under the call's principal.
        req = self.request(rt, "sh", [], **kw)
        ctx = rt.dock.context(principal=req.principal, caps={"kv"}, timeout=5)
        assert rt.dock.call(ctx, "kv", "get", {"key": "k"}) == {"value": f"from tier {self.tier}".encode()}
        # Ungranted: the Dock refuses it, and the guest sees the refusal.
        res = self.driver(rt).call(self.request(rt, get[0], get[1:], caps=frozenset()))
        assert res.exit_code != 0 and b"kv" in res.stdout + res.stderr

    def outcome(self, rt: Any, req: CommandRequest) -> Any:
        try:
            res = self.driver(rt).call(req)
        except WbError as exc:
            return type(exc).__name__, getattr(exc, "limit", None)
        return res.stdout, res.stderr, res.exit_code


def _strip(outcome: Any) -> Any:
    return (outcome[0].strip(), *outcome[1:]) if isinstance(outcome[0], bytes) else outcome
