"""The change counters survive their file: a replaced or truncated counter is re-read, never
served stale, never a crash (issue 22, item 3).

Each scenario runs its reader in a subprocess: a SIGBUS from a truncated mapping would show as a
failed exit there instead of killing pytest.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# The reader reads, lets the parent (this script, in-line) break the file, then reads again after
# the next write: the value must differ from the one before (a cache stamped with it would be stale).
_SCRIPT = textwrap.dedent("""
    import os, sys, struct
    from pathlib import Path
    from wbcore_runtime.store.generation import Generation
    home, name, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    reader = Generation(home, name)
    writer = Generation(home, name)
    reader.ensure()
    for _ in range(5):
        writer.bump()
    before = reader.value()
    assert reader.value() == before, "a counter nobody wrote to must read the same"
    path = home / name
    if how == "replace":
        tmp = path.with_name(name + ".tmp")
        tmp.write_bytes(struct.pack("<Q", 0))
        os.replace(tmp, path)
    elif how == "replace-same-value":
        # the worst case: a new file holding the very value the reader last saw
        raw = path.read_bytes()
        tmp = path.with_name(name + ".tmp")
        tmp.write_bytes(raw)
        os.replace(tmp, path)
    elif how == "truncate":
        os.truncate(path, 0)
        mid = reader.value()  # read while it is short: must not crash, must not equal before
        assert mid != before, "a truncated counter read as its old value"
    elif how == "truncate-rewind":
        os.truncate(path, 0)
    writer.bump()  # the next write
    after = reader.value()
    assert after != before, f"stale: {how} left the reader at {before}"
    writer.bump()
    assert reader.value() != after, "the reader does not follow writes to the new file"
    # a reader made before the change and one made after agree on what moved
    fresh = Generation(home, name)
    v = fresh.value(); writer.bump(); assert fresh.value() != v
    print("ok", before, after)
""")


@pytest.mark.parametrize("name", ["generation", "kv.db.changes"])
@pytest.mark.parametrize("how", ["replace", "replace-same-value", "truncate", "truncate-rewind"])
def test_counter_survives_its_file(tmp_path: Path, name: str, how: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path), name, how],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode < 0:
        pytest.fail(f"the reader died of signal {signal.Signals(-proc.returncode).name} ({how})")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok"), proc.stdout


def test_bump_returns_the_new_value(tmp_path: Path) -> None:
    """``bump`` answers the value it wrote, on a fresh counter and on every later bump (the
    answer once sat in the branch that trims an overlong file, so a normal bump gave None)."""
    from wbcore_runtime.store.generation import Generation

    gen = Generation(tmp_path, "changes")
    first = gen.bump()
    assert isinstance(first, int)
    second = gen.bump()
    assert second == first + 1
    assert Generation(tmp_path, "changes").value() >= second
