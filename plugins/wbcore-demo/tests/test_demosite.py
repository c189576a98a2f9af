"""The demo's local web site (wbcore_demo.demosite): real content on 127.0.0.1 — an
article, a JSON API, a PEP 503 index whose one wheel matches its sha256 and installs, and a
paginated REST API."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from wbcore_demo.demosite import PACKAGE, RELEASES, WHEEL_NAME, DemoSite
from wbcore_demo.demosite import wheel as build_wheel


def get(url: str) -> tuple[bytes, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback, the site under test
        return r.read(), dict(r.headers)


def test_the_index_names_a_real_wheel_by_its_sha256_and_it_installs(tmp_path: Path) -> None:
    with DemoSite() as site:
        assert site.url.startswith("http://127.0.0.1:")
        page, _ = get(f"{site.url}/simple/{PACKAGE}/")
        href = re.search(rb'href="([^"#]+)#sha256=([0-9a-f]{64})"', page)
        assert href and href.group(1).decode().endswith(WHEEL_NAME)
        wheel, _ = get(site.url + href.group(1).decode())
        assert hashlib.sha256(wheel).hexdigest() == href.group(2).decode()
    assert wheel == build_wheel()  # the same bytes every time: its sha256 is stable
    (tmp_path / WHEEL_NAME).write_bytes(wheel)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--disable-pip-version-check",
                    "--target", str(target), str(tmp_path / WHEEL_NAME)], check=True, timeout=120)
    said = subprocess.run([sys.executable, "-c", "import wb_greeting; print(wb_greeting.greet('demo'))"],
                          cwd=target, capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "hello, demo"


def test_the_rest_api_pages_by_link_headers_and_the_page_and_echo_answer() -> None:
    with DemoSite() as site:
        rows, url = [], f"{site.url}/api/releases"
        while url:
            body, headers = get(url)
            rows += json.loads(body)["items"]
            link = re.match(r'<([^>]+)>; rel="next"', headers.get("Link", ""))
            url = link.group(1) if link else ""
        assert rows == RELEASES
        assert b"<h1>WebAssembly</h1>" in get(f"{site.url}/wiki/WebAssembly")[0]
        req = urllib.request.Request(f"{site.url}/api/notes", data=b'{"a": 1}', method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
            assert r.status == 201 and json.loads(r.read())["received"] == {"a": 1}
