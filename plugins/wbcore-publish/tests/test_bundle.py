from __future__ import annotations

import base64
import sqlite3
import zipfile
from pathlib import Path

import pytest
from conftest import SEED_A, vfs_rows
from wbcore_publish import bundle, canonical, vfsfile

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard import unpack
from wbcore_runtime.guard.unpack import UnsafeArchive


def _rezip(src: Path, dst: Path, change: dict[str, bytes | None], extra: dict[str, bytes] | None = None,
           attr: dict[str, int] | None = None) -> Path:
    """Copy a zip, replacing (or dropping, with None) members: a tampering tool."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = change.get(info.filename, zin.read(info)) if info.filename in change else zin.read(info)
            if data is None:
                continue
            if attr and info.filename in attr:
                info.external_attr = attr[info.filename] << 16
            zout.writestr(info, data)
        for name, data in (extra or {}).items():
            zout.writestr(name, data)
    return dst


def _nothing_landed(home: Path, into: Path) -> None:
    assert not into.exists()
    assert not (home / "vfs" / "notes-1.db").exists()
    assert not [p for p in into.parent.iterdir() if p.name.startswith(".wbundle-stage-")]


def test_ship_restore_ship_is_byte_stable(workspace, wb_home, tmp_path, key_a):
    b1 = tmp_path / "one.wbundle"
    shipped = bundle.ship(workspace, b1, home=wb_home, ident=key_a)
    assert shipped.members == ("vfs.db", "workspace/notes.html", "workspace/workspace.org")
    assert shipped.signed_at == "2023-11-14T22:16:40Z"  # the newest content time: deterministic
    home2 = tmp_path / "home2"
    into = tmp_path / "restored" / "notes"
    r = bundle.restore(b1, home=home2, into=into, trusted=[key_a.did])
    assert r.rows == 4 and r.signer == key_a.did
    assert vfs_rows(r.vfs_db) == vfs_rows(wb_home / "vfs" / "notes-1.db")
    assert (into / "notes.html").read_bytes() == (workspace / "notes.html").read_bytes()
    assert (into / "workspace.org").read_bytes() == (workspace / "workspace.org").read_bytes()
    assert int((into / "notes.html").stat().st_mtime) == int((workspace / "notes.html").stat().st_mtime)
    b2 = tmp_path / "two.wbundle"
    bundle.ship(into, b2, home=home2, ident=key_a)
    assert b1.read_bytes() == b2.read_bytes()
    # The zip itself is canonical: fixed times, sorted members, deflate, mode 0644.
    with zipfile.ZipFile(b1) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == sorted(i.filename for i in infos)
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}


def test_all_three_volumes_travel_and_the_db_is_the_contract_table(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    with zipfile.ZipFile(b) as zf:
        (tmp_path / "vfs.db").write_bytes(zf.read("vfs.db"))
        manifest = canonical.parse(zf.read("wbundle.json"), "m")
    assert vfsfile.check_db(tmp_path / "vfs.db") == 4
    assert {r[0] for r in vfs_rows(tmp_path / "vfs.db")} == {"workspace", "memory", "tmp"}
    assert manifest["workspace"]["volumes"] == ["memory", "tmp", "workspace"]
    assert canonical.check_signature(manifest).ok


def test_a_workspace_owning_fewer_volumes_ships_only_those(workspace, wb_home, tmp_path, key_a):
    ws = workspace / "workspace.org"
    ws.write_text(ws.read_text().replace("#+HTML", "#+VOLUMES: workspace memory\n#+HTML"))
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    r = bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    assert r.rows == 3 and "tmp" not in {row[0] for row in vfs_rows(r.vfs_db)}


def test_a_changed_member_byte_is_refused_naming_it_and_nothing_lands(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    with zipfile.ZipFile(b) as zf:
        html = bytearray(zf.read("workspace/notes.html"))
    html[5] ^= 1
    bad = _rezip(b, tmp_path / "bad.wbundle", {"workspace/notes.html": bytes(html)})
    home2, into = tmp_path / "h2", tmp_path / "out" / "notes"
    into.parent.mkdir()
    with pytest.raises(bundle.TamperedBundle, match=r"member workspace/notes\.html changed"):
        bundle.restore(bad, home=home2, into=into, trusted=[key_a.did])
    _nothing_landed(home2, into)
    ins = bundle.inspect(bad)
    assert ins.signature.ok and not ins.verified and "workspace/notes.html" in ins.changes[0]


def test_a_changed_manifest_is_refused(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    with zipfile.ZipFile(b) as zf:
        raw = zf.read("wbundle.json")
    bad = _rezip(b, tmp_path / "bad.wbundle", {"wbundle.json": raw.replace(b"2023-11-14", b"2024-11-14")})
    with pytest.raises(bundle.TamperedBundle, match="does not verify"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])


def test_added_and_removed_members_are_named(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    bad = _rezip(b, tmp_path / "bad.wbundle", {"vfs.db": None}, extra={"workspace/evil.js": b"alert(1)"})
    with pytest.raises(bundle.TamperedBundle) as exc:
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    assert ("member workspace/evil.js added" in exc.value.message
            and "member vfs.db removed" in exc.value.message)


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/passwd", "workspace/../../x", "./vfs.db"])
def test_traversal_and_odd_names_are_refused(workspace, wb_home, tmp_path, key_a, name):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    bad = _rezip(b, tmp_path / "bad.wbundle", {}, extra={name: b"x"})
    with pytest.raises(UnsafeArchive):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    assert not (tmp_path / "escape.txt").exists()


def test_a_symlink_member_is_refused(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    bad = _rezip(b, tmp_path / "bad.wbundle", {}, attr={"workspace/notes.html": 0o120777})
    with pytest.raises(UnsafeArchive, match="link or special file"):
        bundle.inspect(bad)


def test_a_duplicate_member_is_refused(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = _rezip(b, tmp_path / "bad.wbundle", {}, extra={"vfs.db": b"second"})
    with pytest.raises(UnsafeArchive, match="appears twice"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])


def test_a_bundle_resigned_by_another_identity_is_not_trusted(workspace, wb_home, tmp_path, key_a, key_b):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_b)
    with pytest.raises(InvalidArgs, match=f"pass --signer {key_b.did}"):
        bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    assert not (tmp_path / "out").exists()
    r = bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did, key_b.did])
    assert r.signer == key_b.did


def test_a_manifest_claiming_another_did_fails(workspace, wb_home, tmp_path, key_a, key_b):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    with zipfile.ZipFile(b) as zf:
        m = canonical.parse(zf.read("wbundle.json"), "m")
    forged = {**m, "signature": canonical.encode_signature(key_b.sign(canonical.canonical(m)))}
    bad = _rezip(b, tmp_path / "bad.wbundle", {"wbundle.json": canonical.serialize(forged)})
    with pytest.raises(bundle.TamperedBundle, match="does not verify under the key of"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])


def test_an_existing_vfs_instance_is_not_overwritten(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    before = (wb_home / "vfs" / "notes-1.db").read_bytes()
    with pytest.raises(InvalidArgs, match="already exists"):
        bundle.restore(b, home=wb_home, into=tmp_path / "out", trusted=[key_a.did])
    assert (wb_home / "vfs" / "notes-1.db").read_bytes() == before and not (tmp_path / "out").exists()


def test_a_signed_database_with_a_trigger_is_refused(workspace, wb_home, tmp_path, key_a, monkeypatch):
    real = vfsfile.canonical_db

    def with_trigger(rows):
        data = real(rows)
        p = tmp_path / "t.db"
        p.write_bytes(data)
        conn = sqlite3.connect(p)
        conn.execute("CREATE TRIGGER t AFTER INSERT ON files BEGIN DELETE FROM files; END")
        conn.commit()
        conn.close()
        return p.read_bytes()

    monkeypatch.setattr(vfsfile, "canonical_db", with_trigger)
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    monkeypatch.setattr(vfsfile, "canonical_db", real)
    with pytest.raises(InvalidArgs, match="exactly the table `files`"):
        bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    assert not (tmp_path / "out").exists() and not (tmp_path / "h2" / "vfs" / "notes-1.db").exists()


def test_a_decompression_bomb_stops_at_the_signed_size(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    bad = _rezip(b, tmp_path / "bad.wbundle", {"workspace/notes.html": b"\0" * (8 << 20)})
    # read at most what the manifest signs (+ 1 MiB): the bomb stops there, naming its member
    with pytest.raises(UnsafeArchive, match=r"\(at 'workspace/notes.html'\); its manifest signs \d+ bytes"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    _nothing_landed(tmp_path / "h2", tmp_path / "out")
    # a member a little bigger than signed is read and named as changed
    bad = _rezip(b, tmp_path / "bad2.wbundle", {"workspace/notes.html": b"\0" * 1000})
    with pytest.raises(bundle.TamperedBundle, match="notes.html changed"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])


def test_a_workspace_without_vfs_ships_an_empty_database(tmp_path, wb_home, key_a):
    ws = tmp_path / "bare"
    ws.mkdir()
    (ws / "workspace.org").write_text("#+WORKSPACE: bare\n")
    b = tmp_path / "b.wbundle"
    s = bundle.ship(ws, b, home=wb_home, ident=key_a)
    assert s.members == ("vfs.db", "workspace/workspace.org")
    r = bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "o", trusted=[key_a.did])
    assert r.rows == 0


def test_not_a_workspace_says_so(tmp_path, wb_home, key_a):
    with pytest.raises(Exception, match="no workspace.org"):
        bundle.ship(tmp_path, tmp_path / "x.wbundle", home=wb_home, ident=key_a)


def test_cli_ship_restore_round_trip(workspace, wb_home, tmp_path, wbx, make_runtime, monkeypatch):
    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(SEED_A).decode())
    out = tmp_path / "cli.wbundle"
    r = wbx("bundle", "ship", str(workspace), "-o", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    assert '"vfs.db"' in r.stdout
    r = wbx("bundle", "inspect", str(out))
    assert r.exit_code == 0 and "✓ signature" in r.stdout
    home2 = tmp_path / "home2"
    home2.mkdir()
    rt2 = make_runtime(home=home2, cwd=tmp_path / "src")
    (tmp_path / "src" / "notes").rename(tmp_path / "src" / "notes.orig")
    r = wbx("bundle", "restore", str(out), runtime=rt2)
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "src" / "notes" / "notes.html").exists()
    r = wbx("bundle", "restore", str(out), "--into", str(tmp_path / "again"), runtime=rt2)
    assert r.exit_code != 0 and "already exists" in r.stderr


def test_the_real_vfs_broker_writes_where_the_contract_says(tmp_path, key_a):
    state = pytest.importorskip("wbcore_brokers_state.vfs")
    home = tmp_path / "home"
    broker = state.VfsBroker(home / "vfs")
    assert broker.path_of("inst") == vfsfile.db_path(home, "inst")
    with broker.db("inst").write() as c:
        c.execute("INSERT INTO files VALUES ('memory','m.txt',?,3,1.5)", (b"abc",))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "workspace.org").write_text("#+WORKSPACE: w\n#+VFS_INSTANCE: inst\n")
    bundle.ship(ws, tmp_path / "w.wbundle", home=home, ident=key_a)
    r = bundle.restore(tmp_path / "w.wbundle", home=tmp_path / "h2", into=tmp_path / "o", trusted=[key_a.did])
    assert vfs_rows(r.vfs_db) == [("memory", "m.txt", b"abc", 3, 1.5)]
    # The restored file is one the broker opens and reads.
    with state.VfsBroker(tmp_path / "h2" / "vfs").db("inst").read() as c:
        assert c.execute("SELECT data FROM files").fetchone()[0] == b"abc"


def test_a_signed_manifest_listing_other_members_is_not_a_bundle(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    with zipfile.ZipFile(b) as zf:
        m = canonical.parse(zf.read("wbundle.json"), "m")
    extra = {"path": "workspace/run.sh", "sha256": "0" * 64, "size": 0}
    resigned = canonical.sign({**m, "members": [*m["members"], extra]}, key_a)
    bad = _rezip(b, tmp_path / "bad.wbundle", {"wbundle.json": canonical.serialize(resigned)},
                 extra={"workspace/run.sh": b""})
    with pytest.raises(InvalidArgs, match="holds exactly"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])


def test_an_html_link_leaving_the_workspace_is_not_shipped(workspace, wb_home, tmp_path, key_a):
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "notes.html").write_text("secret")
    (workspace / "notes.html").unlink()
    (workspace / "pages").symlink_to(secret)
    ws = workspace / "workspace.org"
    ws.write_text(ws.read_text().replace("#+HTML: notes.html", "#+HTML: pages/notes.html"))
    with pytest.raises(InvalidArgs, match="outside the workspace"):
        bundle.ship(workspace, tmp_path / "x.wbundle", home=wb_home, ident=key_a)


def test_a_did_web_signed_bundle_restores_when_that_did_is_trusted(workspace, wb_home, tmp_path, key_a):
    import http.server
    import threading

    from wbcore_runtime.trust import did

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    root = tmp_path / "didroot"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             lambda *a, **kw: Quiet(*a, directory=str(root), **kw))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"127.0.0.1:{server.server_address[1]}"
        did.write_document(key_a, host, root / ".well-known" / "did.json")
        b = tmp_path / "web.wbundle"
        s = bundle.ship(workspace, b, home=wb_home, ident=key_a, did_web_host=host)
        env = {did.ENV_HTTP_LOOPBACK: "1"}
        with pytest.raises(InvalidArgs, match="not a trusted signer"):
            bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "o", trusted=[key_a.did], env=env)
        r = bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "o", trusted=[s.signer], env=env)
        assert r.signer == did.did_for_host(host)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_files_the_html_references_travel_with_it(workspace, wb_home, tmp_path, key_a):
    from wbcore_publish import page

    (workspace / "css").mkdir()
    (workspace / "css" / "a.css").write_text("body{}")
    (tmp_path / "src" / "shared.css").write_text("outside")
    (workspace / "notes.html").write_text('<html><head><link href="css/a.css"><link href="../shared.css">'
                                          '</head><body><img src="gone.png"></body></html>')
    page.sign(workspace / "notes.html", key_a)
    b = tmp_path / "x.wbundle"
    s = bundle.ship(workspace, b, home=wb_home, ident=key_a)
    assert s.members == ("vfs.db", "workspace/css/a.css", "workspace/notes.html", "workspace/workspace.org")
    r = bundle.restore(b, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    assert (r.workspace / "css" / "a.css").read_text() == "body{}"
    assert page.verify(r.workspace / "notes.html").valid  # the signed page still holds after the trip
    b2 = tmp_path / "y.wbundle"
    bundle.ship(r.workspace, b2, home=tmp_path / "h2", ident=key_a)
    assert b.read_bytes() == b2.read_bytes()


# --- hostile archives: the core's unpacker (read_files, strict) reads every bundle -------------


def test_a_folder_member_is_refused(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    bad = _rezip(b, tmp_path / "bad.wbundle", {}, extra={"workspace/sub/": b""})
    with pytest.raises(UnsafeArchive, match="'workspace/sub' is a folder"):
        bundle.inspect(bad)


def test_more_members_than_a_bundle_holds_are_refused(workspace, wb_home, tmp_path, key_a):
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    extra = {f"workspace/f{i}": b"" for i in range(bundle.MAX_MEMBERS + 1)}
    bad = _rezip(b, tmp_path / "bad.wbundle", {}, extra=extra)
    with pytest.raises(UnsafeArchive, match=f"more than {bundle.MAX_MEMBERS} entries"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    _nothing_landed(tmp_path / "h2", tmp_path / "out")


def test_a_bomb_over_the_bundle_cap_stops_at_the_cap(workspace, wb_home, tmp_path, key_a, monkeypatch):
    """Counted as decompressed, not as declared: a member whose header lies still stops."""
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    monkeypatch.setattr(bundle, "CAPS", unpack.Caps(max_files=bundle.MAX_MEMBERS, max_bytes=1 << 20))
    bad = _rezip(b, tmp_path / "bad.wbundle", {"vfs.db": b"\0" * (16 << 20)})
    assert bad.stat().st_size < (1 << 20)  # deflated, it is small
    with pytest.raises(UnsafeArchive, match=f"more than {1 << 20} bytes"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "out", trusted=[key_a.did])
    _nothing_landed(tmp_path / "h2", tmp_path / "out")


def test_a_file_that_is_not_a_zip_is_refused(tmp_path):
    bad = tmp_path / "bad.wbundle"
    bad.write_bytes(b"#!/bin/sh\n" + b"PK\x03\x04" * 4)
    with pytest.raises(UnsafeArchive, match="not a readable zip archive"):
        bundle.inspect(bad)


def test_a_zip_slip_never_writes_outside_the_stage(workspace, wb_home, tmp_path, key_a):
    """A member named to climb out is refused before anything is staged or landed."""
    b = tmp_path / "x.wbundle"
    bundle.ship(workspace, b, home=wb_home, ident=key_a)
    bad = _rezip(b, tmp_path / "bad.wbundle", {}, extra={"workspace/../../../slip.txt": b"x"})
    with pytest.raises(UnsafeArchive, match="climbs out"):
        bundle.restore(bad, home=tmp_path / "h2", into=tmp_path / "sub" / "out", trusted=[key_a.did])
    assert not list(tmp_path.rglob("slip.txt"))
