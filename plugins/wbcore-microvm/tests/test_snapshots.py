"""Named snapshots (``wbx snapshot``): the store's rules without a VM (names, budget, steps,
layer keys, LRU eviction by size), then save/restore/list/delete on real micro-VMs (slow:
each save restores the tier's snapshot and migrates a new one, ~3 s under TCG here)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from wbcore_microvm import snapshots, tiers

from wbcore_runtime.contract.errors import InvalidArgs, NotFound

CACHE = Path(os.environ.get("WB_MICROVM_CACHE") or Path.home() / ".cache" / "wbcore" / "microvm")
MICROVM = pytest.mark.skipif(not tiers._probe_tools()[0],
                             reason=f"microvm unavailable: {tiers._probe_tools()[1]}")


def _fill(home: Path, name: str, size: int, used: float) -> None:
    """A snapshot folder as the store keeps it (a sparse vm.mig of ``size`` bytes), last used at ``used``."""
    d = snapshots.store_root(home) / name
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"name": name, "key": name * 2, "created": used}))
    with open(d / "vm.mig", "wb") as fh:
        fh.truncate(size)
    os.utime(d, (used, used))


def test_budget_setting() -> None:
    assert snapshots.budget({}) == snapshots.DEFAULT_BUDGET
    assert snapshots.budget({"WB_SNAPSHOT_BUDGET": "500M"}) == 500 << 20
    assert snapshots.budget({"WB_SNAPSHOT_BUDGET": "2g"}) == 2 << 30
    assert snapshots.budget({"WB_SNAPSHOT_BUDGET": "4096"}) == 4096
    for bad in ("lots", "-1", "0", "1.5G"):
        with pytest.raises(InvalidArgs, match="WB_SNAPSHOT_BUDGET"):
            snapshots.budget({"WB_SNAPSHOT_BUDGET": bad})


def test_names_and_steps_are_checked(tmp_path: Path) -> None:
    for bad in ("", "Upper", "../x", "a/b", "-x", "x" * 64):
        with pytest.raises(InvalidArgs, match="snapshot name"):
            snapshots.check_name(bad)
    f = tmp_path / "tool.txt"
    f.write_bytes(b"abc")
    steps = snapshots.parse_steps(["sh -c 'echo hi > /tmp/a'"], [f"{f}:/tmp/tk/tool.txt"])
    assert steps[0]["put"] == "/tmp/tk/tool.txt" and steps[0]["_data"] == b"abc"
    assert steps[1] == {"run": ["sh", "-c", "echo hi > /tmp/a"]}
    with pytest.raises(InvalidArgs, match="/tmp/w is emptied"):
        snapshots.parse_steps([], [f"{f}:/tmp/w/x"])
    with pytest.raises(InvalidArgs, match="HOST_FILE:/tmp/GUEST_PATH"):
        snapshots.parse_steps([], [f"{f}:/etc/passwd"])
    with pytest.raises(InvalidArgs, match="cannot read"):
        snapshots.parse_steps([], [f"{tmp_path / 'missing'}:/tmp/x"])
    with pytest.raises(InvalidArgs, match="at most"):
        snapshots.parse_steps(["true"] * (snapshots.MAX_STEPS + 1), [])


def test_a_put_is_capped_while_it_is_read_not_by_the_size_it_showed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(snapshots, "MAX_PUT_BYTES", 1024)
    # A file whose size says nothing of what a read returns (as one still growing): procfs shows
    # 0 bytes for /proc/self/maps, then gives several KiB.
    assert os.stat("/proc/self/maps").st_size == 0
    with pytest.raises(InvalidArgs, match="must be a regular file of at most"):
        snapshots.parse_steps([], ["/proc/self/maps:/tmp/x"])
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # nobody writes: opened without O_NONBLOCK it would wait for ever
    with pytest.raises(InvalidArgs, match="must be a regular file"):
        snapshots.parse_steps([], [f"{fifo}:/tmp/x"])
    ok = tmp_path / "small"
    ok.write_bytes(b"y" * 1024)
    assert snapshots.parse_steps([], [f"{ok}:/tmp/x"])[0]["_data"] == b"y" * 1024


def test_layer_key_is_the_parent_and_the_steps() -> None:
    a = snapshots.layer_key("base:x", [{"run": ["true"]}])
    assert a == snapshots.layer_key("base:x", [{"run": ["true"]}])
    assert a != snapshots.layer_key("base:y", [{"run": ["true"]}])
    assert a != snapshots.layer_key("base:x", [{"run": ["false"]}])
    assert snapshots.layer_key(a, []) != a


def test_lru_eviction_by_size(tmp_path: Path) -> None:
    home = tmp_path / "home"
    now = time.time()
    _fill(home, "oldest", 40 << 20, now - 300)
    _fill(home, "middle", 40 << 20, now - 200)
    _fill(home, "newest", 40 << 20, now - 100)
    _fill(home, "pinned", 40 << 20, now - 400)  # the least recently used, but kept (just saved)
    evicted = snapshots.evict_lru(home, 100 << 20, keep=frozenset({"pinned"}))
    assert [e.name for e in evicted] == ["oldest", "middle"]
    assert sorted(s.name for s in snapshots.list_saved(home)) == ["newest", "pinned"]
    assert snapshots.evict_lru(home, 100 << 20) == []  # within budget: nothing goes
    # a restore touches its snapshot: it is then the most recently used
    snapshots.get(home, "pinned").touch()
    assert [e.name for e in snapshots.evict_lru(home, 50 << 20)] == ["newest"]
    assert not any(p.name.startswith(".trash-") for p in snapshots.store_root(home).iterdir())


def test_unknown_snapshot_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="wbx snapshot save nope"):
        snapshots.get(tmp_path, "nope")


# --- on real micro-VMs ------------------------------------------------------------------------


@pytest.fixture
def vm_home(make_runtime, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WB_MICROVM_CACHE", str(CACHE))
    monkeypatch.setenv("WB_MICROVM_POOL", "0")
    tiers.prepare(CACHE)
    return make_runtime


@pytest.mark.slow
@MICROVM
def test_save_restore_list_delete_and_layers(vm_home, wbx, tmp_path: Path) -> None:
    rt = vm_home()
    tool = tmp_path / "tool.sh"
    tool.write_text("echo tool says hi\n")
    r = wbx("snapshot", "save", "prep", "--run", "sh -c 'mkdir -p /tmp/tk && echo warmed > /tmp/tk/state'",
            runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert "snapshot prep: saved" in r.stdout
    # the same steps over the same parent: the layer is already there (no VM)
    r = wbx("snapshot", "save", "prep", "--json", "--run",
            "sh -c 'mkdir -p /tmp/tk && echo warmed > /tmp/tk/state'", runtime=rt)
    assert json.loads(r.stdout)["cached"] is True
    r = wbx("snapshot", "save", "prep", "--run", "true", runtime=rt)
    assert r.exit_code != 0 and "--replace" in r.stderr
    # a per-toolkit layer over it
    r = wbx("snapshot", "save", "tk", "--from", "prep", "--put", f"{tool}:/tmp/tk/tool.sh", runtime=rt)
    assert r.exit_code == 0, r.stderr
    r = wbx("snapshot", "restore", "tk", "--json", "--", "sh", "-c", "cat /tmp/tk/state; sh /tmp/tk/tool.sh",
            runtime=rt)
    got = json.loads(r.stdout)
    assert r.exit_code == 0 and got["stdout"] == "warmed\ntool says hi\n" and got["exit"] == 0
    assert got["isolation"] in ("kvm", "tcg") and 0 < got["restore_s"] < 10  # bench/snapshots.py measures it
    r = wbx("snapshot", "restore", "prep", "--", "sh", "-c", "test -e /tmp/tk/tool.sh", runtime=rt)
    assert r.exit_code == 1  # the parent has no layer's file
    listed = json.loads(wbx("snapshot", "list", "--json", runtime=rt).stdout)
    rows = {x["name"]: x for x in listed["snapshots"]}
    assert set(rows) == {"prep", "tk"} and rows["tk"]["parent"] == "prep"
    assert all(x["size"] > 1 << 20 and x["age_s"] >= 0 for x in rows.values())
    assert listed["total"] == sum(x["size"] for x in rows.values())
    mode = (snapshots.store_root(rt.home) / "tk").stat().st_mode & 0o777
    assert mode == 0o700  # it holds the guest's secret
    # the tier's calls restore a named snapshot when WB_MICROVM_SNAPSHOT selects it
    from wbcore_runtime.build import builder
    from wbcore_testing.fixtures import manifest_text, write_toolkit

    rt2 = vm_home(env={**os.environ, "WB_MICROVM_SNAPSHOT": "tk", "WB_MICROVM_POOL": "0"})
    write_toolkit(rt2.roots[0], "snapcat", manifest_text("snapcat", exec="posix", extra={"CLI_BIN": "cat"}))
    rt2.discover(refresh=True)
    res = rt2.call(builder.build(rt2, "snapcat").name, ["/tmp/tk/state"], b"", tier="microvm")
    assert res.stdout == b"warmed\n" and res.usage.isolation in ("kvm", "tcg")
    r = wbx("snapshot", "delete", "prep", runtime=rt)
    assert r.exit_code == 0 and "deleted snapshot prep" in r.stdout
    r = wbx("snapshot", "restore", "prep", runtime=rt)
    assert r.exit_code != 0 and "no snapshot 'prep'" in r.stderr
    # a layer is a whole VM state: it restores with its parent gone
    r = wbx("snapshot", "restore", "tk", "--", "cat", "/tmp/tk/state", runtime=rt)
    assert r.exit_code == 0 and r.stdout == "warmed\n"


@pytest.mark.slow
@MICROVM
def test_save_evicts_the_least_recently_used_over_budget(vm_home, wbx,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    rt = vm_home()
    r = wbx("snapshot", "save", "a", "--run", "true", runtime=rt)
    assert r.exit_code == 0, r.stderr
    one = snapshots.get(rt.home, "a").size
    rt = vm_home(env={**os.environ, "WB_SNAPSHOT_BUDGET": str(one + one // 2)})
    r = wbx("snapshot", "save", "b", "--run", "sh -c 'echo b > /tmp/b'", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert "evicted a" in r.stdout
    assert [s.name for s in snapshots.list_saved(rt.home)] == ["b"]
    r = wbx("snapshot", "save", "c", "--run", "false", runtime=rt)
    assert r.exit_code != 0 and "exit 1 in the guest" in r.stderr
    assert [s.name for s in snapshots.list_saved(rt.home)] == ["b"]  # a failed save leaves nothing
    assert not [p for p in snapshots.store_root(rt.home).iterdir() if p.name.startswith(".tmp-")]
