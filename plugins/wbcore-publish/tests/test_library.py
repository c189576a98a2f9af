from __future__ import annotations

import base64
import json
import zipfile

from conftest import SEED_A
from wbcore_publish import bundle, library, page


def test_library_lists_workspaces_and_bundles_with_provenance(workspace, wb_home, tmp_path, key_a, key_b,
                                                            wbx, monkeypatch):
    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(SEED_A).decode())
    lib = tmp_path / "lib"
    lib.mkdir()
    page.sign(workspace / "notes.html", key_a)
    bundle.ship(workspace, lib / "mine.wbundle", home=wb_home, ident=key_a)
    bundle.ship(workspace, lib / "theirs.wbundle", home=wb_home, ident=key_b)
    with zipfile.ZipFile(lib / "mine.wbundle") as zin, zipfile.ZipFile(lib / "broken.wbundle", "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data + b"x" if info.filename == "vfs.db" else data)
    bare = tmp_path / "src" / "bare"
    bare.mkdir()
    (bare / "workspace.org").write_text("#+WORKSPACE: bare\n")
    (lib / "junk.wbundle").write_bytes(b"not a zip")
    r = wbx("library", "--path", str(lib), "--path", str(tmp_path / "src"), "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["identity"] == key_a.did
    by_path = {e["path"].rsplit("/", 1)[-1]: e for e in out["entries"]}
    assert by_path["mine.wbundle"] | {} == {**by_path["mine.wbundle"], "kind": "bundle", "name": "notes",
                                             "signer": key_a.did, "verified": True, "mine": True}
    assert by_path["mine.wbundle"]["signed_at"]
    assert by_path["theirs.wbundle"]["signer"] == key_b.did and by_path["theirs.wbundle"]["verified"]
    assert not by_path["theirs.wbundle"]["mine"]
    assert (not by_path["broken.wbundle"]["verified"]
            and "member vfs.db changed" in by_path["broken.wbundle"]["detail"])
    assert by_path["junk.wbundle"]["detail"].startswith("error: ")
    assert (by_path["notes"]["kind"] == "workspace" and by_path["notes"]["verified"]
            and by_path["notes"]["mine"])
    assert by_path["bare"]["signer"] is None and not by_path["bare"]["verified"]
    r = wbx("library", "--path", str(lib), "--path", str(tmp_path / "src"), "--mine", "--json")
    names = sorted(e["path"].rsplit("/", 1)[-1] for e in json.loads(r.stdout)["entries"])
    # Signed by me and then tampered with: still mine, and listed as not verified.
    assert names == ["broken.wbundle", "mine.wbundle", "notes"]
    r = wbx("library", "--path", str(lib))
    assert r.exit_code == 0 and "✓ bundle" in r.stdout and "(me)" in r.stdout


def test_library_reads_the_configured_folder_and_bounds_depth(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)
    (deep / "workspace.org").write_text("#+WORKSPACE: deep\n")
    (tmp_path / "a" / "workspace.org").write_text("#+WORKSPACE: shallow\n")
    dirs = library.folders([], {library.ENV_LIBRARY_PATH: str(tmp_path)}, [])
    entries = library.scan(dirs, identity_did="did:key:z", env={})
    assert [e.name for e in entries] == ["shallow"]


def test_a_fifo_planted_as_a_workspace_page_is_an_error_not_a_hang(tmp_path):
    """A search root is a folder anyone may have written: a workspace whose HTML is a FIFO
    (no writer ever comes) is listed as an error; the listing does not wait for a writer."""
    import os
    import threading

    ws = tmp_path / "planted"
    ws.mkdir()
    (ws / "workspace.org").write_text("#+WORKSPACE: planted\n#+HTML: page.html\n")
    os.mkfifo(ws / "page.html")
    got: list = []
    t = threading.Thread(daemon=True, target=lambda: got.append(
        library.scan([tmp_path], identity_did="did:key:z", env={})))
    t.start()
    t.join(10)
    hung = t.is_alive()
    if hung:  # release the blocked reader so the test process can end
        os.close(os.open(ws / "page.html", os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
    assert not hung, "the library listing blocked on a FIFO"
    [entry] = got[0]
    assert entry.name == "planted" and not entry.verified and "page.html" in entry.detail
