"""``dispatch.mounts.grant`` for a remote caller (issue 25 item 7): nothing without the
deployer's ``WB_MOUNT_ROOTS``; inside its roots only, judged after the host folder's symlinks
are resolved; each refusal and grant audited under the remote principal."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs
from wbcore_runtime.contract.records import IsolationTier
from wbcore_runtime.dispatch import mounts
from wbcore_runtime.dispatch.audit import AuditLog

CONTAINER = IsolationTier("container", "binds folders", 2, lambda rt: None,
                          kinds=frozenset({"command", "mount"}))


@dataclass
class Host:
    """What ``grant`` asks of the runtime: its home and its env."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    (tmp_path / "home").mkdir()
    return Host(tmp_path / "home")


def _grant(host: Host, specs: list[str], *, remote: str | None = "engine",
           caps: frozenset[str] = frozenset()):
    return mounts.grant(host, specs, tiers=[CONTAINER], tier="container", caps=caps, owner="kit",  # type: ignore[arg-type]
                        what="command 'cat'", principal="default/kit", remote=remote)


def _audit(host: Host) -> list[dict]:
    log = AuditLog.for_home(host.home, host.env)  # the last 5 lines, read by hand (the reader is a plugin's)
    log.flush()
    return [json.loads(raw) for raw in log.path.read_bytes().splitlines()[-5:]]


def test_a_remote_mount_is_refused_until_the_deployer_sets_the_roots(host: Host, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(CapabilityDenied, match=r"deployer sets WB_MOUNT_ROOTS .*docs/running\.md"):
        _grant(host, [f"{data}:/data"])
    assert _audit(host)[-1]["principal"] == "engine" and _audit(host)[-1]["outcome"] == "denied"
    # the deployer's own surfaces (remote=None) grant it as wbx run --mount does
    assert _grant(host, [f"{data}:/data"], remote=None) == (mounts.Mount(str(data.resolve()), "/data"),)


def test_inside_a_root_is_granted_outside_is_refused(host: Host, tmp_path: Path) -> None:
    root, other = tmp_path / "shared", tmp_path / "other"
    (root / "repo").mkdir(parents=True)
    other.mkdir()
    host.env[mounts.ROOTS_ENV] = f"/nonexistent-root:{root}"
    got = _grant(host, [f"{root / 'repo'}:/repo", f"{root}:/all"])
    assert got == (mounts.Mount(str((root / "repo").resolve()), "/repo"),
                   mounts.Mount(str(root.resolve()), "/all"))
    last = _audit(host)[-1]
    assert (last["principal"] == "engine" and last["outcome"] == "allowed"
            and "(default/kit)" in last["target"])
    for spec in (f"{other}:/o", f"{root}/../other:/o", f"{tmp_path}/shared-not:/o", "shared/repo:/r"):
        with pytest.raises(CapabilityDenied, match="WB_MOUNT_ROOTS"):
            _grant(host, [spec])
    # a read-write mount still needs mount-rw, remote or not
    with pytest.raises(CapabilityDenied, match="mount-rw"):
        _grant(host, [f"{root / 'repo'}:/repo:rw"])
    assert _grant(host, [f"{root / 'repo'}:/repo:rw"], caps=frozenset({"mount-rw"}))[0].rw


def test_a_symlink_inside_a_root_that_points_outside_is_refused(host: Host, tmp_path: Path) -> None:
    root, outside = tmp_path / "shared", tmp_path / "secret"
    root.mkdir()
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "deep").mkdir()
    (root / "deep" / "up").symlink_to("../../secret")
    (root / "fine").symlink_to(root / "deep")  # a link that stays inside is followed
    host.env[mounts.ROOTS_ENV] = str(root)
    for spec in (f"{root / 'escape'}:/x", f"{root / 'deep' / 'up'}:/x"):
        with pytest.raises(CapabilityDenied, match="outside WB_MOUNT_ROOTS"):
            _grant(host, [spec])
    assert _grant(host, [f"{root / 'fine'}:/x"])[0].host == str((root / "deep").resolve())


def test_a_root_given_through_a_symlink_counts_by_its_real_folder(host: Host, tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "repo").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    host.env[mounts.ROOTS_ENV] = str(tmp_path / "alias")
    assert _grant(host, [f"{real / 'repo'}:/r"])[0].host == str((real / "repo").resolve())
    assert _grant(host, [f"{tmp_path / 'alias' / 'repo'}:/r"])[0].host == str((real / "repo").resolve())
    host.env[mounts.ROOTS_ENV] = "relative/root"
    with pytest.raises(InvalidArgs, match="not an absolute path"):
        _grant(host, [f"{real / 'repo'}:/r"])


def test_requested_bounds_a_wire_list_before_the_disk_is_asked() -> None:
    assert mounts.requested(None, "'mounts'") == ()
    assert mounts.requested(["/a:/a"], "'mounts'") == ("/a:/a",)
    for bad, why in (("/a:/a", "list of strings"), ([1], "list of strings"), (["/a"] * 5, "at most 4"),
                     (["/" + "a" * 4096], "more than 4096 bytes")):
        with pytest.raises(InvalidArgs, match=why):
            mounts.requested(bad, "'mounts'")
