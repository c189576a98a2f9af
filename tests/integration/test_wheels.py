"""Our distributions install without the repository: wheels and sdists built from copies of
their folders, installed into a fresh venv, run a toolkit that lives outside the repository.

Third-party dependencies come from no index (tests use no network): the wheelhouse also
holds wheels repacked from the distributions installed in this interpreter (their RECORD
lists the files; scripts are left to pip, which writes them from entry_points.txt), and
``pip install --no-index --find-links`` resolves the whole set from there. So pip still
checks every declared requirement, as it would against the index.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("wasmtime")
packaging_requirements = pytest.importorskip("packaging.requirements")

from wbcore_testing.conformance import ECHO_WAT  # noqa: E402
from wbcore_testing.fixtures import manifest_text, write_toolkit  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
#: The core and the plugins installed in the fresh venv: the wbx CLI with the installer and the audit
#: trail's reader it depends on, one lane (wat, in wbcore-wasmtime), the BUILD_SRC prefixes, the
#: process tier.
OURS = {"wbcore-runtime": REPO,
        **{d: REPO / "plugins" / d
           for d in ("wbcore-cli", "wbcore-install", "wbcore-audit-trail", "wbcore-wasmtime",
                     "wbcore-sources", "wbcore-process")}}
#: What stays behind when a distribution's folder is copied to build it: caches everywhere; at its
#: top, tests, build output and (for the core at the repository's root) the other folders.
CACHES = ("__pycache__", ".pytest_cache")
TOP = {"tests", "build", "dist", "plugins", "bench", "docs", "toolkits", "wit", "dev.py", "tox.ini",
       "wbx.toml"}


def _copy(folder: Path, to: Path) -> None:
    def skip(where: str, names: list[str]) -> set[str]:
        top = Path(where) == folder
        return {n for n in names
                if n in CACHES or n.endswith(".egg-info") or (top and (n in TOP or n.startswith(".")))}

    shutil.copytree(folder, to, ignore=skip)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(roots: list[str]) -> set[str]:
    """The third-party distributions ``roots`` require (markers evaluated here, extras ignored)."""
    todo = [r for r in roots]
    seen: set[str] = set()
    while todo:
        name = _normal(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or ():
            req = packaging_requirements.Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(req.name)
    return {n for n in seen if n not in OURS}


def _repack(name: str, out: Path) -> Path:
    """A wheel of the installed distribution ``name``, made from the files its RECORD lists."""
    dist = metadata.distribution(name)
    wheel_file = next(f for f in dist.files or ()
                      if f.name == "WHEEL" and f.parent.name.endswith(".dist-info"))
    info = Path(str(wheel_file.locate())).parent  # the .dist-info folder
    wheel_meta = (info / "WHEEL").read_text()
    tags = [t.split("-") for t in re.findall(r"^Tag: (\S+)$", wheel_meta, re.M)]
    # several Tag lines (py2-none-any, py3-none-any) compress into one file-name tag (py2.py3-none-any)
    tag = "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))
    stem = f"{re.sub(r'[-_.]+', '_', dist.metadata['Name'])}-{dist.version}"
    path = out / f"{stem}-{tag}.whl"
    record_name = f"{info.name}/RECORD"
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in dist.files or ():
            arc = str(f)
            if (arc.startswith("..") or "__pycache__" in arc or arc == record_name
                    or arc.rsplit("/", 1)[-1] in ("INSTALLER", "REQUESTED", "direct_url.json")):
                continue
            data = Path(str(f.locate())).read_bytes()
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((arc, f"sha256={digest}", str(len(data))))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([*rows, (record_name, "", "")])
        z.writestr(record_name, buf.getvalue())
    return path


def _run(*cmd: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd}: {done.stdout}{done.stderr}"
    return done


@pytest.mark.slow
def test_wheels_install_and_run_a_toolkit_outside_the_repository(tmp_path: Path) -> None:
    src, house = tmp_path / "src", tmp_path / "wheelhouse"
    house.mkdir()
    for dist, folder in OURS.items():
        _copy(folder, src / dist)
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--no-index", "-w", house, *(src / d for d in OURS))
    wheels = {_normal(p.name.split("-")[0]): p for p in house.glob("*.whl")}
    assert set(wheels) == set(OURS)
    for dist, whl in wheels.items():
        names = zipfile.ZipFile(whl).namelist()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), f"{whl.name}: no LICENSE"
        meta = zipfile.ZipFile(whl).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        # the core's is the project's README
        readme_title = (OURS[dist] / "README.md").read_text().splitlines()[0]
        assert "Description-Content-Type: text/markdown" in meta and f"\n{readme_title}\n" in meta, whl.name
        assert ("Requires-Python: >=3.11" in meta
                and "Classifier: License :: OSI Approved :: Apache Software License" in meta)
    # An sdist of each, through the build backend's own PEP 517 hook (no network, no isolation).
    for dist in OURS:
        got = _run(sys.executable, "-c",
                   "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))",
                   tmp_path / "sdist", cwd=src / dist).stdout.split()[-1]
        with tarfile.open(tmp_path / "sdist" / got) as tar:
            members = {m.name.split("/", 1)[-1] for m in tar.getmembers()}
        assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= members, (
            f"{got}: {sorted(members)[:20]}")
    for name in sorted(_closure(list(OURS))):
        _repack(name, house)

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", py, "--disable-pip-version-check"]
    # no .pyc: cheaper
    _run(*pip, "install", "--quiet", "--no-compile", "--no-index", "--find-links", house, *OURS)
    show = _run(*pip, "show", "wbcore-runtime", "wbcore-wasmtime").stdout
    assert ("Name: wbcore-runtime" in show and "License: Apache-2.0" in show
            and "Name: wbcore-wasmtime" in show)
    assert re.search(r"Requires: .*wasmtime.*wbcore-runtime|Requires: .*wbcore-runtime.*wasmtime", show), show

    root = tmp_path / "toolkits"  # a folder no repository holds
    write_toolkit(root, "shout", manifest_text("shout", exec="command", extra={
        "BUILD_LANG": "wat", "BUILD_SRC": "path:src/main.wat", "CLI_BIN": "shout"}),
                  files={"src/main.wat": ECHO_WAT})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WB_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(WB_HOME=str(tmp_path / "home"), WB_TOOLKITS_ROOT=str(root))
    wbx = venv / "bin" / "wbx"
    listing = _run(wbx, "plugins", env=env, cwd=tmp_path).stdout
    assert listing.startswith("core · wbcore-runtime 0.1.0\n"), listing
    for line in ("wasmtime · wbcore-wasmtime 0.1.0 · ok", "sources · wbcore-sources 0.1.0 · ok",
                 "process · wbcore-process 0.1.0 · ok"):
        assert line in listing, listing
    assert "lane-c-wasm" not in listing  # only what was installed: the repository is not on the path
    where = _run(py, "-c",
                 "import wbcore_runtime, wbcore_wasmtime; print(wbcore_runtime.__file__, "
                 "wbcore_wasmtime.__file__)",
                 env=env, cwd=tmp_path).stdout
    assert str(REPO) not in where and str(venv) in where
    _run(wbx, "toolkit", "build", "shout", env=env, cwd=tmp_path)
    ran = _run(wbx, "run", "shout", input="hello from outside\n", env=env, cwd=tmp_path)
    assert ran.stdout == "hello from outside\n"
