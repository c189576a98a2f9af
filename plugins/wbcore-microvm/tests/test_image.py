"""The guest image's pieces that need no VM: the reproducible cpio, the allowlist, the
guest's JSON ↔ the Dock's CBOR."""

from __future__ import annotations

import json

import pytest
from wbcore_microvm import image, tiers

from wbcore_runtime.contract.errors import InvalidArgs


def test_cpio_is_sorted_reproducible_and_owned_by_root() -> None:
    entries = {"b/x": (image.FILE | 0o644, b"data"), "a": (image.DIR | 0o755, b""),
               "b": (image.DIR | 0o755, b""), "a/l": (image.LINK | 0o777, b"/b/x")}
    one = image.cpio(entries)
    two = image.cpio(dict(reversed(list(entries.items()))))
    assert one == two
    names, at = [], 0
    while True:
        hdr = one[at:at + 110]
        assert hdr[:6] == b"070701"
        f = [int(hdr[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, uid, gid, mtime, size, namesize = f[1], f[2], f[3], f[5], f[6], f[11]
        name = one[at + 110:at + 110 + namesize - 1].decode()
        at += 110 + namesize
        at += -at % 4
        at += size + (-size % 4)
        names.append(name)
        if name == "TRAILER!!!":
            break
        assert (uid, gid, mtime) == (0, 0, 0), name
        if name == "a/l":
            assert mode & 0o170000 == image.LINK
    assert names == [".", "a", "a/l", "b", "b/x", "TRAILER!!!"]
    assert at == len(one)


def test_the_allowlist_names_user_applets_and_wb_cap_never_sbin(tmp_path) -> None:
    try:
        bb = image.busybox()
    except Exception as exc:  # noqa: BLE001 - the reason is the skip message
        pytest.skip(str(exc))
    agent = tmp_path / "agent"
    agent.write_bytes(b"\x7fELF")
    mods = {}
    for name in image.MODULES:
        (tmp_path / f"{name}.ko").write_bytes(b"ko")
        mods[name] = tmp_path / f"{name}.ko"
    entries = image._entries(bb, agent, mods)
    allowed = entries["etc/wb/allowed"][1].decode().split()
    assert "/bin/sh" in allowed and "/usr/bin/wb-cap" in allowed and "/usr/bin/sha256sum" in allowed
    assert not [p for p in allowed if p.startswith(("/sbin/", "/usr/sbin/"))]
    assert "/sbin/wbcore-agent" not in allowed and "/bin/busybox" not in allowed
    assert entries["init"][1].startswith(b"#!/bin/busybox sh")
    assert entries["root"][0] == image.DIR | 0o700


def test_guest_json_becomes_the_docks_cbor_and_back() -> None:
    cbor2 = pytest.importorskip("cbor2")
    req = tiers._json_to_cbor("kv", json.dumps({"op": "put", "key": "k", "value": "v"}).encode())
    assert cbor2.loads(req) == {"op": "put", "key": "k", "value": "v"}
    for bad in (b"[1]", b"{", b'{"key": "k"}', b"\xff", b"x" * (tiers.MAX_BROKER_JSON + 1)):
        with pytest.raises(InvalidArgs):
            tiers._json_to_cbor("kv", bad)
    back = json.loads(tiers._cbor_to_json(cbor2.dumps({"value": b"text", "raw": b"\xff\x00",
                                                       "n": [1, None]})))
    assert back == {"value": "text", "raw": {"$b64": "/wA="}, "n": [1, None]}


def test_prune_removes_only_stale_folders_of_other_inputs(tmp_path) -> None:
    import os
    import time

    keep = tmp_path / "snapshots" / "current"
    old = tmp_path / "snapshots" / "old"
    fresh = tmp_path / "images" / "fresh-other"
    building = tmp_path / "images" / ".partial"
    for d in (keep, old, fresh, building):
        d.mkdir(parents=True)
    past = time.time() - tiers.PRUNE_S - 10
    for d in (keep, old, building):
        os.utime(d, (past, past))
    tiers._prune(tmp_path, keep={keep})
    assert keep.exists() and fresh.exists() and building.exists() and not old.exists()
