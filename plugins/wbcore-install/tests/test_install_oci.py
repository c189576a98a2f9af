"""An ``oci://`` install lands what the runtime's OCI client (``contract.distribution``,
``wbcore_distributions``) pulled and pins its digest; with none served it says what to install.

Here an in-process plugin serves a client over a local folder, so the test shows what the
installer does with what any client returns (wbcore-oci's client is tested against a real
registry in ``plugins/wbcore-oci/tests``)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from wbcore_install import install
from wbcore_runtime import hookimpl
from wbcore_runtime.contract import distribution
from wbcore_runtime.contract.distribution import Descriptor, Layer, Pulled, Pushed, Reference
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.records import DistributionService
from wbcore_testing.fixtures import write_toolkit


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


def test_install_lands_what_the_served_client_pulled_and_pins_its_digest(make_runtime, tmp_path,
                                                                         wb_home) -> None:
    src = write_toolkit(tmp_path / "src", "tk", trust="first-party")
    client = FolderClient(src)
    rt = make_runtime(plugins=[_serving(client)])
    # a folder install asks for no client: the plugins serving one are not needed for it
    install.install(wb_home, str(src),
                    distribution=lambda: pytest.fail("a folder install asked for a client"))
    done = install.install(wb_home, "oci://registry.example/wb/tk:1", first_party=True, force=True,
                           distribution=lambda: distribution.service(rt))
    assert client.pulls == 1 and [d.entry.id for d in done] == ["tk"]
    source = json.loads((wb_home / "wbx.lock").read_text())["toolkits"]["tk"]["source"]
    assert source.startswith("oci://registry.example/wb/tk@sha256:")  # the lock names the digest, not the tag
    assert (wb_home / "toolkits" / "tk" / "manifest.org").is_file()


def test_an_artifact_whose_layer_is_not_a_toolkit_layer_is_refused(make_runtime, tmp_path, wb_home) -> None:
    src = write_toolkit(tmp_path / "src", "tk", trust="first-party")
    rt = make_runtime(plugins=[_serving(FolderClient(src, layer_type="application/x-other"))])
    with pytest.raises(InvalidArgs, match="a toolkit artifact has one"):
        install.install(wb_home, "oci://registry.example/wb/tk:1", first_party=True,
                        distribution=lambda: distribution.service(rt))
    assert not (wb_home / "toolkits" / "tk").exists() and not (wb_home / "wbx.lock").exists()


def test_an_oci_source_with_no_client_served_names_what_to_install(tmp_path, wb_home) -> None:
    with pytest.raises(NotFound, match="pip install wbcore-oci"):
        install.install(wb_home, "oci://registry.example/wb/tk:1", first_party=True)
    assert not (wb_home / "toolkits").exists() or not any((wb_home / "toolkits").iterdir())
