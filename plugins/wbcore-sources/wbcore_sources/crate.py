"""``crate:<name>[@<version>]``: a Rust crate from a configured local directory source.

Searched, in order: each folder of ``$WB_CRATE_DIRS`` (``:``-separated), then
``$WB_HOME/crates`` and Debian's ``/usr/share/cargo/registry`` (``librust-*-dev``
packages). A crate is a folder ``<name>-<version>`` holding ``Cargo.toml``. Nothing is
downloaded: without the crate present, the error names the folders searched.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from wbcore_runtime.build import ResolvedSource, SourceRequest, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
DEBIAN_REGISTRY = Path("/usr/share/cargo/registry")


def search_dirs(env: dict[str, str], home: Path) -> list[Path]:
    dirs = [Path(p) for p in env.get("WB_CRATE_DIRS", "").split(":") if p]
    return dirs + [home / "crates", DEBIAN_REGISTRY]


def _version_key(v: str) -> tuple[Any, ...]:
    core, _, pre = v.partition("-")
    nums = tuple(int(x) for x in re.findall(r"\d+", core.split("+")[0])[:3])
    return nums + ((1,) if not pre else (0, pre))


class CrateSource:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        name, _, version = request.rest.strip().partition("@")
        if not NAME_RE.match(name):
            raise InvalidArgs(f"crate:{request.rest}: {name!r} is not a crate name")
        if version and not VERSION_RE.match(version):
            raise InvalidArgs(f"crate:{request.rest}: {version!r} is not a semver version")
        dirs = search_dirs(self.env, request.home)
        found: list[tuple[str, Path]] = []
        for d in dirs:
            if not d.is_dir():
                continue
            for cand in d.glob(f"{name}-*"):
                ver = cand.name[len(name) + 1:]
                if (VERSION_RE.match(ver) and (cand / "Cargo.toml").is_file()
                        and (not version or ver == version)):
                    found.append((ver, cand))
        if not found:
            where = ", ".join(str(d) + ("" if d.is_dir() else " (absent)") for d in dirs)
            want = f"{name} {version}" if version else name
            raise NotFound(f"crate {want} is not in the local crate sources ({where}); vendor it into "
                           f"$WB_HOME/crates/{name}-<version> or install Debian's "
                           f"librust-{name.replace('_', '-')}-dev")
        ver, path = max(found, key=lambda f: _version_key(f[0]))
        return ResolvedSource(digest=tree_digest(path), dir=path)


def crate(runtime: Any) -> CrateSource:
    return CrateSource(dict(getattr(runtime, "env", {}) or {}))
