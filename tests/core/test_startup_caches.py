"""The start-up caches in the home (parsed manifests, content digests) see every change.

Each cache skips files changed within its racy window; these tests set the window to 0 so
that what they write is cached at once, then change the files and look again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wbcore_runtime.toolkit import discovery, manifest_cache
from wbcore_runtime.trust import signing, verdict as trust
from wbcore_runtime.runtime import Runtime
from wbcore_testing.fixtures import write_toolkit


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_cache, "RACY_SECONDS", 0.0)
    monkeypatch.setattr(trust, "RACY_SECONDS", 0.0)


def _taglines(root: Path, home: Path) -> dict[str, str]:
    found = discovery.discover([root], home)
    assert not found.errors, found.errors
    return {k: tk.manifest.tagline for k, tk in found.toolkits.items()}


def test_manifest_cache_is_used_and_sees_edits_additions_and_removals(tmp_path: Path) -> None:
    root, home = tmp_path / "toolkits", tmp_path / "home"
    write_toolkit(root, "alpha", tagline="first words")
    write_toolkit(root, "beta", tagline="beta words")
    assert _taglines(root, home) == {"alpha": "first words", "beta": "beta words"}
    index = next((home / manifest_cache.FOLDER).iterdir())
    assert set(json.loads(index.read_text())["entries"]) == {"alpha", "beta"}
    assert _taglines(root, home) == {"alpha": "first words", "beta": "beta words"}  # from the index

    # Same size, same mtime restored: ctime still moves, so the edit is seen.
    path = root / "alpha" / "manifest.org"
    st = path.stat()
    path.write_text(path.read_text().replace("first words", "other words"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    write_toolkit(root, "gamma", tagline="new one")
    (root / "beta" / "manifest.org").unlink()
    assert _taglines(root, home) == {"alpha": "other words", "gamma": "new one"}
    assert set(json.loads(index.read_text())["entries"]) == {"alpha", "gamma"}


def test_a_cached_manifest_equals_a_parsed_one(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parents[2] / "toolkits"
    fresh = discovery.discover([shipped])
    home = tmp_path / "home"
    discovery.discover([shipped], home)
    cached = discovery.discover([shipped], home)
    assert list(cached.toolkits) == list(fresh.toolkits)
    for ident, tk in fresh.toolkits.items():
        assert cached.toolkits[ident].manifest == tk.manifest, ident


def test_a_corrupt_or_foreign_index_is_ignored(tmp_path: Path) -> None:
    root, home = tmp_path / "toolkits", tmp_path / "home"
    write_toolkit(root, "alpha", tagline="real words")
    _taglines(root, home)
    index = next((home / manifest_cache.FOLDER).iterdir())
    data = json.loads(index.read_text())
    data["entries"]["alpha"]["manifest"]["tagline"] = "forged"
    data["entries"]["alpha"]["stamp"][0] += 1  # another file's stamp: not this manifest
    index.write_text(json.dumps(data))
    assert _taglines(root, home) == {"alpha": "real words"}
    index.write_text("{not json")
    assert _taglines(root, home) == {"alpha": "real words"}


def test_a_manifest_that_becomes_a_link_out_is_refused_not_served_from_the_cache(tmp_path: Path) -> None:
    root, home = tmp_path / "toolkits", tmp_path / "home"
    write_toolkit(root, "alpha", tagline="inside")
    _taglines(root, home)
    outside = tmp_path / "outside.org"
    outside.write_text((root / "alpha" / "manifest.org").read_text())
    (root / "alpha" / "manifest.org").unlink()
    (root / "alpha" / "manifest.org").symlink_to(outside)
    found = discovery.discover([root], home)
    assert "alpha" not in found.toolkits and found.errors


def test_content_digest_is_kept_across_runtimes_and_follows_every_change(tmp_path: Path) -> None:
    root, home = tmp_path / "toolkits", tmp_path / "home"
    folder = write_toolkit(root, "alpha", files={"src/a.txt": "one"})

    def digest() -> str:
        rt = Runtime.open(plugins=[], home=home, roots=[root])  # a new process's view
        return trust.content_digest(rt.toolkit("alpha"), rt)

    first = digest()
    assert first == signing.content_digest(folder)
    assert list((home / "cache" / "digests").iterdir())
    assert digest() == first  # from the home's cache
    (folder / "src" / "a.txt").write_text("two")  # same size
    second = digest()
    assert second != first and second == signing.content_digest(folder)
    (folder / "src" / "b.txt").write_text("new file")
    assert digest() == signing.content_digest(folder)


def test_a_forged_digest_entry_for_another_state_is_not_used(tmp_path: Path) -> None:
    root, home = tmp_path / "toolkits", tmp_path / "home"
    folder = write_toolkit(root, "alpha", files={"src/a.txt": "one"})
    rt = Runtime.open(plugins=[], home=home, roots=[root])
    trust.content_digest(rt.toolkit("alpha"), rt)
    stored = next((home / "cache" / "digests").iterdir())
    data = json.loads(stored.read_text())
    (folder / "src" / "a.txt").write_text("changed")
    stored.write_text(json.dumps(data))  # the old digest, the old state: stale, never served
    rt2 = Runtime.open(plugins=[], home=home, roots=[root])
    assert trust.content_digest(rt2.toolkit("alpha"), rt2) == signing.content_digest(folder)


def test_changed_files_are_named_after_a_cached_digest(tmp_path: Path) -> None:
    root, home = tmp_path / "toolkits", tmp_path / "home"
    folder = write_toolkit(root, "alpha", files={"src/a.txt": "one"})
    rt = Runtime.open(plugins=[], home=home, roots=[root])
    built = trust.content_digest(rt.toolkit("alpha"), rt)
    trust.remember_form(rt.toolkit("alpha"), rt)
    rt2 = Runtime.open(plugins=[], home=home, roots=[root])
    assert trust.content_digest(rt2.toolkit("alpha"), rt2) == built  # a cache hit: no form in memory
    (folder / "src" / "a.txt").write_text("two")
    rt3 = Runtime.open(plugins=[], home=home, roots=[root])
    assert any("src/a.txt" in line for line in trust.changed_files(rt3.toolkit("alpha"), rt3, built))
