"""Which registry the lanes fetch from: the one npm and pip are configured with, never a host
of wbcore's own; and every product fetch takes the deployer's guard."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wbcore_runtime.guard import registries
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.guard.netguard import NetGuard
from wbcore_testing.fixtures import FileServer

ROOT = Path(__file__).resolve().parents[2]


def test_npm_registry_follows_npms_own_configuration(tmp_path: Path) -> None:
    base = {"HOME": str(tmp_path), "PATH": ""}  # no npm on PATH: the files decide
    assert (registries.npm_registry({**base, "NPM_CONFIG_REGISTRY": "https://npm.mirror.test/"})
            == "https://npm.mirror.test")
    assert (registries.npm_registry({**base, "npm_config_registry": "http://10.0.0.5:4873"})
            == "http://10.0.0.5:4873")
    (tmp_path / ".npmrc").write_text("fund=false\nregistry = https://npm.corp.test/repo/\n")
    assert registries.npm_registry(base) == "https://npm.corp.test/repo"
    assert (registries.npm_tarball("typescript", "5.9.3", base)
            == "https://npm.corp.test/repo/typescript/-/typescript-5.9.3.tgz")
    assert (registries.npm_tarball("@s/pkg", "1.0.0", base)
            == "https://npm.corp.test/repo/@s/pkg/-/pkg-1.0.0.tgz")
    (tmp_path / ".npmrc").write_text("fund=false\n")
    with pytest.raises(NotFound, match="NPM_CONFIG_REGISTRY"):
        registries.npm_registry(base)
    with pytest.raises(InvalidArgs, match="not an http"):
        registries.npm_registry({**base, "NPM_CONFIG_REGISTRY": "file:///srv/npm"})


def test_npm_registry_asks_npm_when_it_is_installed(tmp_path: Path) -> None:
    npm = subprocess.run(["sh", "-c", "command -v npm"], capture_output=True, text=True,
                         check=False).stdout.strip()
    if not npm:
        pytest.skip("npm is not installed")
    rc = tmp_path / "npmrc"
    rc.write_text("registry=https://asked.npm.test/\n")
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"], "NPM_CONFIG_USERCONFIG": str(rc)}
    assert registries.npm_registry(env) == "https://asked.npm.test"


def test_pip_index_follows_pips_own_configuration(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://pip.mirror.test/simple/\n")
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"], "PIP_CONFIG_FILE": str(conf)}
    assert registries.pip_index(env) == "https://pip.mirror.test/simple"
    assert (registries.pip_index({**env, "PIP_INDEX_URL": "http://10.9.8.7/simple"})
            == "http://10.9.8.7/simple")
    conf.write_text("[global]\ntimeout = 5\n")
    default = registries.pip_index(env)  # pip's own default, as pip itself states it
    said = subprocess.run([sys.executable, "-c", registries._PIP_DEFAULT], capture_output=True, text=True,
                          check=True).stdout
    assert default == said.strip().rstrip("/")


@pytest.mark.parametrize("as_json", [False, True])
def test_pypi_file_finds_the_pinned_file_on_the_index_page(tmp_path: Path, as_json: bool) -> None:
    sha = "ab" * 32
    with FileServer() as web:
        if as_json:
            import json

            body = json.dumps({"files": [{"filename": "x-1.0.tar.gz", "url": "/files/x-1.0.tar.gz",
                                          "hashes": {"sha256": sha}}]}).encode()

            def page(h) -> None:  # type: ignore[no-untyped-def]
                h.send_response(200)
                h.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)

            web.routes["/simple/x/"] = page
        else:
            web.files["/simple/x/"] = (
                f'<a href="../../files/x-1.0.tar.gz#sha256={sha}">x-1.0.tar.gz</a>'.encode())
        env = {"PIP_INDEX_URL": f"{web.url}/simple"}
        guard = NetGuard.from_env({"WB_ALLOW_PRIVATE_HOSTS": "127.0.0.1"})
        assert (registries.pypi_file("X", "x-1.0.tar.gz", sha, guard=guard, env=env)
                == f"{web.url}/files/x-1.0.tar.gz")
        with pytest.raises(InvalidArgs, match="not the pinned"):
            registries.pypi_file("x", "x-1.0.tar.gz", "cd" * 32, guard=guard, env=env)
        with pytest.raises(NotFound, match="lists no"):
            registries.pypi_file("x", "x-2.0.tar.gz", sha, guard=guard, env=env)


def test_every_product_fetch_takes_the_deployers_guard() -> None:
    """A guard built by hand advises no setting; product code takes NetGuard.from_env (its own
    fetches) or NetGuard.for_guests (the brokers). The two hand-built ones are named here."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    built = []
    for rel in files:
        if "/tests/" in f"/{rel}" or rel.endswith(("plugins/wbcore-testing/wbcore_testing/fixtures.py",
                                                   "wbcore_runtime/guard/netguard.py")):
            continue
        for line in (ROOT / rel).read_text(errors="replace").splitlines():
            if re.search(r"\bNetGuard\(", line) and "``" not in line:
                built.append((rel, line.strip()))
    assert sorted(built) == [
        ("plugins/wbcore-brokers-net/wbcore_brokers_net/brokers.py", "self.guard = guard or NetGuard()"),
        ("plugins/wbcore-brokers-net/wbcore_brokers_net/brokers.py", "self.guard = guard or NetGuard()"),
        ("wbcore_runtime/trust/did.py", "guard = NetGuard(allow_private=True, unresolved_is_dns_error=True)"),
    ], built


def test_no_registry_host_is_written_in_the_tree() -> None:
    """The hosts npm and pip would use by default (asked of them, never written here) appear
    nowhere in the repository: wbcore fetches from whatever registry the user configured."""
    hosts = set()
    npm = subprocess.run(["sh", "-c", "npm config get registry"], capture_output=True, text=True, check=False,
                         env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"})
    if npm.returncode == 0 and "://" in npm.stdout:
        hosts.add(npm.stdout.strip().split("://", 1)[1].split("/", 1)[0].split(":", 1)[0])
    said = subprocess.run([sys.executable, "-c", registries._PIP_DEFAULT], capture_output=True, text=True,
                          check=False)
    if "://" in said.stdout:
        index_host = said.stdout.strip().split("://", 1)[1].split("/", 1)[0]
        hosts.add(index_host)
    if not hosts:
        pytest.skip("neither npm nor pip states a default registry here")
    for host in sorted(hosts):
        found = subprocess.run(["git", "grep", "-n", "-i", "-F", host], cwd=ROOT, capture_output=True,
                               text=True, check=False)
        assert found.returncode == 1, f"a registry host is written in the tree:\n{found.stdout[:2000]}"
