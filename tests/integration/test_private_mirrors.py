"""Private mirrors are first-class: every fetch path the product has, pointed at loopback, is
refused by the one SSRF guard with a message naming the setting that changes *its* decision,
and with that setting reaches a real server the test runs on loopback.

The paths: the ts and svelte compilers from the configured npm registry, jq's sources from
the configured pip index, ``wasm:`` / ``archive:`` / ``git+`` sources, archive / git / OCI
installs, did:web, and a toolkit's own egress (the ``net`` broker pip-fetch and http use).
Federation sources and OCI publishing are walked the same way in their plugins' tests
(``test_a_source_on_a_private_address_is_refused_unless_allowed``,
``test_the_guard_refuses_loopback_unless_allowed``)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from wbcore_runtime.trust import did
from wbcore_oci.client import OciDistribution
from wbcore_install import install
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.guard.netguard import ENV_ALLOW_PRIVATE, ENV_GUEST_PRIVATE_HOSTS, ENV_PRIVATE_HOSTS
from wbcore_testing.fixtures import FileServer, GitHttpServer, git_repo, manifest_text

PRODUCT = (ENV_PRIVATE_HOSTS, ENV_ALLOW_PRIVATE)
EVERY = (*PRODUCT, ENV_GUEST_PRIVATE_HOSTS, "WB_SOURCES_ALLOW_PRIVATE")
Attempt = Callable[[Mapping[str, str]], object]


@pytest.fixture(autouse=True)
def no_ambient_allowances(monkeypatch):
    for name in EVERY:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def servers(tmp_path: Path):
    git_root = tmp_path / "git-served"
    git_root.mkdir()
    _, commit = git_repo(git_root / "tk.git", {"tool/main.c": "int main(void){return 0;}\n"})
    with FileServer() as web, GitHttpServer(git_root) as git:
        yield web, git, commit


def walk(attempt: Attempt, hits: Callable[[], int], *, names: tuple[str, ...], advised: Mapping[str, str],
         reached: Callable[[object], bool] | None = None) -> None:
    """(a) refused naming exactly ``names`` among the settings, nothing sent; (b) with
    ``advised`` the request reaches the loopback server (or ``reached`` says it did)."""
    before = hits()
    with pytest.raises(WbError) as refused:
        attempt({})
    message = refused.value.message
    assert refused.value.kind.value == "capability-denied" and "SSRF guard" in message, message
    for name in EVERY:
        assert (name in message) == (name in names), (name, message)
    assert hits() == before, "a refused fetch sent a request"
    try:
        got: object = attempt(advised)
    except WbError as exc:
        assert exc.kind.value != "capability-denied", exc.message
        got = exc
    assert (reached(got) if reached else hits() > before), got


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), **more}


def test_npm_compilers_come_from_the_configured_registry(servers, tmp_path: Path) -> None:
    from wbcore_lane_js import svelte, ts

    web, _, _ = servers
    base = _env(tmp_path, NPM_CONFIG_REGISTRY=web.url, WB_NPM_CACHE=str(tmp_path / "npm"))
    loop = {ENV_PRIVATE_HOSTS: "127.0.0.1"}
    walk(lambda extra: ts.fetch({**base, **extra}), lambda: len(web.hits), names=PRODUCT, advised=loop)
    assert web.hits[-1] == f"/typescript/-/typescript-{ts.TYPESCRIPT_VERSION}.tgz"
    walk(lambda extra: svelte.fetch({**base, **extra}), lambda: len(web.hits), names=PRODUCT, advised=loop)
    assert web.hits[-1] == f"/svelte/-/svelte-{svelte.SVELTE.version}.tgz"


def test_jq_sources_come_from_the_configured_pip_index(servers, tmp_path: Path) -> None:
    from wbcore_lane_zig.builtins import jqsrc

    web, _, _ = servers
    web.files["/simple/jq/"] = (f'<a href="../../files/{jqsrc.SDIST_NAME}#sha256={jqsrc.SDIST_SHA256}">'
                                f"{jqsrc.SDIST_NAME}</a>").encode()
    web.files[f"/files/{jqsrc.SDIST_NAME}"] = b"not the sdist"
    base = _env(tmp_path, PIP_INDEX_URL=f"{web.url}/simple", WB_JQ_CACHE=str(tmp_path / "jq"))
    walk(lambda extra: jqsrc.fetch({**base, **extra}), lambda: len(web.hits), names=PRODUCT,
         advised={ENV_ALLOW_PRIVATE: "1"})
    assert web.hits[-2:] == ["/simple/jq/", f"/files/{jqsrc.SDIST_NAME}"]  # the page, then its file
    with pytest.raises(WbError, match="is not the pinned"):
        jqsrc.fetch({**base, ENV_PRIVATE_HOSTS: "127.0.0.0/8"})


def test_sources_wasm_archive_and_git(servers, make_runtime, tmp_path: Path) -> None:
    from wbcore_runtime.plugins import sources
    from wbcore_runtime.build import SourceRequest
    from wbcore_runtime.toolkit.manifest import parse

    web, git, commit = servers
    module = b"\0asm\x01\0\0\0"
    web.files["/m.wasm"] = module

    def resolve(spec: str, extra: Mapping[str, str]) -> object:
        rt = make_runtime(env=_env(tmp_path, **extra))
        (tmp_path / "tk").mkdir(exist_ok=True)
        m = parse(manifest_text("demo",
                                extra={"BUILD_SRC": spec, "SHA256": hashlib.sha256(module).hexdigest()}),
                  tmp_path / "tk" / "manifest.org")
        parsed = sources.parse(spec, rt.prefixes)
        return parsed.prefix.factory(rt).resolve(SourceRequest(manifest=m, rest=parsed.rest,
                                                               workdir=tmp_path / "work", home=rt.home))

    loop = {ENV_PRIVATE_HOSTS: "127.0.0.1"}
    walk(lambda e: resolve(f"wasm:{web.url}/m.wasm", e), lambda: len(web.hits), names=PRODUCT, advised=loop,
         reached=lambda got: not isinstance(got, WbError))
    walk(lambda e: resolve(f"archive:{web.url}/a.tar.gz", e), lambda: len(web.hits), names=PRODUCT,
         advised=loop)
    walk(lambda e: resolve(f"git+{git.url}/tk.git@{commit}#tool", e), lambda: len(git.hits), names=PRODUCT,
         advised={ENV_ALLOW_PRIVATE: "1"}, reached=lambda got: (got.dir / "main.c").is_file())


def test_installs_archive_git_and_oci(servers, tmp_path: Path) -> None:
    web, git, commit = servers
    n = iter(range(100))

    def fetch(text: str, sha: str | None = None, **more: str) -> Callable[[Mapping[str, str]], object]:
        def attempt(extra: Mapping[str, str]) -> object:
            work = tmp_path / f"w{next(n)}"
            work.mkdir()
            return install.fetch(install.parse_source(text, sha), work, _env(tmp_path, **more, **extra),
                                 OciDistribution)

        return attempt

    loop = {ENV_PRIVATE_HOSTS: "127.0.0.1"}
    walk(fetch(f"{web.url}/tk.tar.gz", "a" * 64), lambda: len(web.hits), names=PRODUCT, advised=loop)
    walk(fetch(f"git+{git.url}/tk.git@{commit}"), lambda: len(git.hits), names=PRODUCT, advised=loop,
         reached=lambda got: got[1] == commit)  # type: ignore[index]
    hostport = web.url.removeprefix("http://")
    walk(fetch(f"oci://{hostport}/wb/tk:1", WB_OCI_PLAIN_HTTP=hostport), lambda: len(web.hits), names=PRODUCT,
         advised=loop)
    assert web.hits[-1].startswith("/v2/")


def test_did_web(servers) -> None:
    web, _, _ = servers
    ident = f"did:web:127.0.0.1%3A{web.port}"
    walk(lambda extra: did.resolve_web(ident, env=dict(extra), timeout=5.0), lambda: len(web.hits),
         names=PRODUCT, advised={ENV_PRIVATE_HOSTS: "127.0.0.1"},
         # did:web is https: it got to TLS
         reached=lambda got: isinstance(got, WbError) and got.name == "tls")


def test_a_toolkits_own_egress_names_only_its_setting(servers, make_runtime) -> None:
    """What pip-fetch and http reach through the net broker: WB_ALLOW_PRIVATE_* never apply."""
    from wbcore_runtime.contract.calls import Principal

    web, _, _ = servers
    web.files["/simple/jq/"] = b"<html></html>"

    def call(extra: Mapping[str, str]) -> object:
        rt = make_runtime(env={**extra})
        ctx = rt.dock.context(principal=Principal("t", "pip-fetch"), caps={"net"})
        return rt.dock.call(ctx, "net", "fetch", {"url": f"{web.url}/simple/jq/"})

    walk(call, lambda: len(web.hits), names=(ENV_GUEST_PRIVATE_HOSTS,),
         advised={ENV_GUEST_PRIVATE_HOSTS: "127.0.0.1"},
         reached=lambda got: isinstance(got, dict) and got["status"] == 200)
    with pytest.raises(WbError, match=ENV_GUEST_PRIVATE_HOSTS):
        # the product's settings do not widen it
        call({ENV_ALLOW_PRIVATE: "1", ENV_PRIVATE_HOSTS: "127.0.0.1"})
