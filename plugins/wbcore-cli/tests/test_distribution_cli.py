"""The OCI distribution contract (``contract/distribution.py``): the core parses and pins
``oci://`` references itself, and reaches a registry only through the client a plugin serves
(``wbcore_distributions``); with none served an ``oci://`` install says what to install.

The client itself (wbcore-oci) is tested in ``plugins/wbcore-oci/tests`` against a real
registry; here an in-process plugin serves a client over a local folder, so the test shows
what the core does with what any client returns."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.contract import distribution
from wbcore_runtime.contract.distribution import Descriptor, Layer, Pulled, Pushed, Reference
from wbcore_runtime.contract.errors import NotFound
from wbcore_runtime.contract.records import DistributionService
from wbcore_install import install
from wbcore_install import plugin as installer_plugin


class FolderClient:
    """A test client: "pulls" one toolkit folder as a toolkit artifact (one tar.gz layer of the
    given media type), pinned to a digest of its layer. It counts its pulls."""

    max_blob = 1 << 20

    def __init__(self, folder: Path, layer_type: str = distribution.TOOLKIT_LAYER) -> None:
        self.folder, self.layer_type, self.pulls = folder, layer_type, 0

    def toolkit_layer(self, folder: Path) -> bytes:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tf:
            for p in sorted(folder.rglob("*")):
                tf.add(p, p.relative_to(folder).as_posix(), recursive=False)
        return gzip.compress(raw.getvalue(), mtime=0)

    def pull(self, reference: str | Reference, dest: Path, *, artifact_types: tuple[str, ...],
             env: Mapping[str, str] | None = None) -> Pulled:
        self.pulls += 1
        assert artifact_types == (distribution.TOOLKIT_TYPE,)  # install asks for a toolkit
        ref = reference if isinstance(reference, Reference) else Reference.parse(reference)
        data = self.toolkit_layer(self.folder)
        desc = Descriptor.of(data, self.layer_type)
        dest.mkdir(parents=True)
        (dest / "layer-0").write_bytes(data)
        return Pulled(ref.pinned(desc.digest), distribution.TOOLKIT_TYPE, b"{}",
                      ((desc, dest / "layer-0"),), {})

    def push(self, reference: str | Reference, *, artifact_type: str, config: tuple[bytes, str],
             layers: Sequence[Layer], annotations: Mapping[str, str] | None = None,
             env: Mapping[str, str] | None = None) -> Pushed:
        raise AssertionError("install never pushes")


def _serving(client: FolderClient) -> object:
    class ServesFolders:
        @hookimpl
        def wbcore_distributions(self) -> list[DistributionService]:
            return [DistributionService("folder", "a test client over a folder", lambda _rt: client)]

    return ServesFolders()


def test_an_oci_install_with_no_client_says_what_to_install(make_runtime, wbx, wb_home) -> None:
    rt = make_runtime(plugins=[installer_plugin])  # the installer, and no OCI client
    with pytest.raises(NotFound, match="pip install wbcore-oci"):
        distribution.service(rt)
    r = wbx("toolkit", "install", "oci://registry.example/wb/tk:1", runtime=rt)
    assert r.exit_code != 0 and "pip install wbcore-oci" in r.stderr, r.stderr
    assert not (wb_home / "toolkits").exists() or not list((wb_home / "toolkits").iterdir())
    with pytest.raises(NotFound, match="none was given"):  # a caller that passes no client
        install.install(wb_home, "oci://registry.example/wb/tk:1")


def test_an_install_with_no_installer_says_what_to_install(make_runtime, wbx, wb_home, tmp_path) -> None:
    r = wbx("toolkit", "install", str(tmp_path), runtime=make_runtime(plugins=[]))
    assert r.exit_code == 127 and "pip install wbcore-install" in r.stderr, r.stderr
    assert not (wb_home / "toolkits").exists() and not (wb_home / "wbx.lock").exists()
