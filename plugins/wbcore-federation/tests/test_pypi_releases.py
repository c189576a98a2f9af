"""The shipped ``pypi-releases`` toolkit end to end: ``{pip-index}`` filled from the deployer's
pip configuration (``PIP_INDEX_URL`` here), ``{package}`` from ``--param``, the JSON form of a
package index's project page (PEP 691, negotiated by ``#+ACCEPT``) served on loopback from a
recorded page of the real index (tests/data/idna-pep691.json: six files of idna; the file
URLs' host replaced by files.index.example), its skill's query, and ``fed sync``."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAGE = (Path(__file__).parent / "data" / "idna-pep691.json").read_bytes()
PEP691 = "application/vnd.pypi.simple.v1+json"


class Index:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                accept = self.headers.get("Accept", "")
                index.seen.append((self.path, accept))
                if self.path != "/simple/idna/":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                # PEP 691 negotiation: the JSON form only to a client that asks for it.
                body, ctype = (PAGE, PEP691) if PEP691 in accept else (b"<html>idna</html>", "text/html")
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    idx = Index()
    monkeypatch.setenv("PIP_INDEX_URL", idx.url + "/")
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")  # the index is a mirror on loopback
    yield idx
    idx.server.shutdown()
    idx.server.server_close()


@pytest.fixture
def rt(make_runtime, index: Index):
    return make_runtime(plugins=["federation"], roots=[REPO / "toolkits"])


def test_query_fills_the_index_and_the_package(rt, index: Index, wbx) -> None:
    r = wbx("fed", "query", "pypi-releases", "pypi_releases", "--param", "package=idna", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert sorted(row["pypi_releases.filename"] for row in rows) == sorted(
        f["filename"] for f in json.loads(PAGE)["files"])
    wheel = next(row for row in rows if row["pypi_releases.filename"] == "idna-3.10-py3-none-any.whl")
    assert json.loads(wheel["pypi_releases.hashes"])["sha256"] == next(
        f["hashes"]["sha256"] for f in json.loads(PAGE)["files"]
        if f["filename"] == "idna-3.10-py3-none-any.whl")
    assert index.seen == [("/simple/idna/", "application/vnd.pypi.simple.v1+json")]


def test_the_skills_query_runs_as_written(rt, index: Index, wbx) -> None:
    sql = "SELECT filename, size FROM pypi_releases WHERE filename LIKE '%.whl' ORDER BY size DESC"
    assert sql in (REPO / "toolkits" / "pypi-releases" / "skills" / "query.org").read_text()
    r = wbx("fed", "query", "pypi-releases", sql, "--param", "package=idna", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    wheels = {f["filename"]: f["size"] for f in json.loads(PAGE)["files"] if f["filename"].endswith(".whl")}
    assert [row["filename"] for row in rows] == sorted(wheels, key=wheels.__getitem__, reverse=True)
    assert [row["size"] for row in rows] == sorted(wheels.values(), reverse=True)


def test_params_are_required_named_and_one_path_segment(rt, index: Index, wbx) -> None:
    r = wbx("fed", "query", "pypi-releases", "pypi_releases", runtime=rt)
    assert r.exit_code == 2 and "its URL needs --param package=VALUE" in r.stderr, r.stderr
    r = wbx("fed", "query", "pypi-releases", "pypi_releases", "--param", "pkg=idna", runtime=rt)
    assert r.exit_code == 2 and "no placeholder pkg" in r.stderr and "--param package=VALUE" in r.stderr
    r = wbx("fed", "query", "pypi-releases", "pypi_releases", "--param", "package=../../admin?x=1",
            runtime=rt)
    assert r.exit_code != 0
    assert index.seen[-1][0] == "/simple/..%2F..%2Fadmin%3Fx%3D1/"  # one segment: no path, no query


def test_sync_mirrors_the_files_keyed_by_filename(rt, index: Index, wbx, tmp_path: Path) -> None:
    out = tmp_path / "files.org"
    r = wbx("fed", "sync", "pypi-releases", "--param", "package=idna", "--out", str(out), runtime=rt)
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    assert text.count(":task:") == 6 and "idna-3.10.tar.gz" in text
    again = wbx("fed", "sync", "pypi-releases", "--param", "package=idna", "--out", str(out), runtime=rt)
    assert again.exit_code == 0 and out.read_text() == text


@pytest.mark.parametrize("value", ["..", "."])
def test_a_dot_segment_param_is_refused_not_sent_up_the_path(rt, index: Index, wbx, value: str) -> None:
    # Percent-encoding leaves "." and ".." as they are, and a URL's dot segments are resolved
    # (/simple/../ is /): such a value would climb out of its one segment, so it is refused.
    r = wbx("fed", "query", "pypi-releases", "pypi_releases", "--param", f"package={value}", runtime=rt)
    assert r.exit_code == 2, r.stderr
    assert f"--param package: {value!r} is a dot segment" in r.stderr and "give the value itself" in r.stderr
    assert index.seen == []  # nothing was sent
