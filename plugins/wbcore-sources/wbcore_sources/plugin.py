"""Entry point of wbcore-sources. Imports nothing heavy: the fetcher and git load in the factories."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import SourcePrefix
from wbcore_runtime.plugins.manager import lazy


def _path(_runtime: Any) -> Any:
    from wbcore_sources.local import PathSource

    return PathSource()


def _entry(prefix: str) -> Any:
    def factory(_runtime: Any) -> Any:
        from wbcore_sources.local import EntrySource

        return EntrySource(prefix)

    return factory


_crate = lazy("wbcore_sources.crate:crate")
_wasm = lazy("wbcore_sources.remote:wasm")
_archive = lazy("wbcore_sources.remote:archive")
_git = lazy("wbcore_sources.git:git")


def _check_wasm(manifest: Any, rest: str) -> None:
    from wbcore_sources.remote import pinned

    pinned(manifest, rest, "wasm:")


def _check_archive(manifest: Any, rest: str) -> None:
    from wbcore_sources.remote import pinned

    pinned(manifest, rest, "archive:")


def _check_git(_manifest: Any, rest: str) -> None:
    from wbcore_sources.git import parse

    parse(rest)


@hookimpl
def wbcore_source_prefixes() -> Iterator[SourcePrefix]:
    yield SourcePrefix(name="path:", summary="a folder inside the toolkit", factory=_path)
    yield SourcePrefix(name="crate:", summary="a Rust crate from a local directory source ($WB_CRATE_DIRS, "
                       "$WB_HOME/crates, /usr/share/cargo/registry)", factory=_crate)
    yield SourcePrefix(name="wasm:",
                       summary="a prebuilt module (https URL, file:// URL or a path in the toolkit), "
                       "pinned by #+SHA256", factory=_wasm,
                       check=_check_wasm)
    yield SourcePrefix(name="archive:",
                       summary="a tar/zip bundle (https URL, file:// URL or a path in the toolkit), "
                       "pinned by #+SHA256, unpacked safely (#+WASM_PATH, #+PREOPEN)", factory=_archive,
                       check=_check_archive)
    yield SourcePrefix(name="git+",
                       summary="a git repository at a pinned 40-hex commit (git+<url>@<commit>[#sub])",
                       factory=_git, check=_check_git)
    yield SourcePrefix(name="gobuild:", summary="a Go package inside the toolkit, for the go lane",
                       factory=_entry("gobuild:"))
    yield SourcePrefix(name="zigbuild:",
                       summary="a .zig file or build.zig folder inside the toolkit, for the zig lane",
                       factory=_entry("zigbuild:"))
    yield SourcePrefix(
        name="script:",
        summary="removed: native build scripts",
        refused="native build scripts run on the host, outside any sandbox, so they are not supported; put "
                "the sources in the toolkit and use path: with a BUILD_LANG lane (wbx lanes lists them)",
    )
