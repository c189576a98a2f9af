"""The bwrap probe: a passing EAGAIN (the host uid at its process limit because of a neighbour)
is retried and never kept; a lasting answer is kept for the process."""

from __future__ import annotations

import pytest

from wbcore_container import bwrap

BUSY = (False, "bwrap cannot create its namespaces here: new namespace failed: " + bwrap.TRANSIENT)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A probe that has answered nothing yet; the sleeps it takes are recorded, not slept."""
    slept: list[float] = []
    monkeypatch.setattr(bwrap, "_probed", None)
    monkeypatch.setattr(bwrap.time, "sleep", slept.append)
    return slept


def test_a_passing_eagain_is_retried_and_the_success_kept(fresh, monkeypatch) -> None:
    answers = iter([BUSY, BUSY, (True, "bubblewrap 0.8")])
    monkeypatch.setattr(bwrap, "_probe_once", lambda: next(answers))
    assert bwrap.probe() == (True, "bubblewrap 0.8")
    assert len(fresh) == 2
    monkeypatch.setattr(bwrap, "_probe_once", lambda: pytest.fail("a kept answer is not probed again"))
    assert bwrap.probe() == (True, "bubblewrap 0.8")


def test_an_eagain_that_lasts_is_reported_but_not_kept(fresh, monkeypatch) -> None:
    monkeypatch.setattr(bwrap, "_probe_once", lambda: BUSY)
    assert bwrap.probe() == BUSY
    assert bwrap._probed is None and sum(fresh) < 5  # bounded: a few seconds at most
    monkeypatch.setattr(bwrap, "_probe_once", lambda: (True, "bubblewrap 0.8"))
    assert bwrap.probe()[0]  # the next caller asks again


def test_a_lasting_refusal_is_kept(fresh, monkeypatch) -> None:
    refused = (False, "bwrap cannot create its namespaces here: setting up uid map: Permission denied")
    monkeypatch.setattr(bwrap, "_probe_once", lambda: refused)
    assert bwrap.probe() == refused and not fresh
    assert bwrap._probed == refused


def test_the_probe_does_not_share_the_calls_tight_process_limit(monkeypatch) -> None:
    """The probe's container gets a process limit far above a call's: RLIMIT_NPROC counts every
    process of HOST_UID, so at a call's limit a neighbour's containers make the probe fail."""
    from wbcore_container import shell, tiers

    seen: list[bwrap.Spec] = []

    def ran(spec: bwrap.Spec, root: object) -> bwrap.Outcome:
        seen.append(spec)
        return bwrap.Outcome(0, b"", b"", b"", "", False, False, 0.0)

    monkeypatch.setattr(bwrap, "bwrap_path", lambda: "/bin/true")
    monkeypatch.setattr(bwrap, "run", ran)
    assert bwrap._probe_once()[0]
    (spec,) = seen
    assert spec.limits.processes == bwrap.PROBE_PROCESSES
    assert spec.limits.processes >= 16 * max(tiers.POSIX_PROCESSES, shell.SHELL_PROCESSES)
