"""Toolkits to sign, verify and install from, shared by the core's tests and the CLI's.

- the signature test vector of docs/signing.md (``VEC_*``, ``write_vec``), signed with ``SEED0``;
- ``src``, a fixture (imported by a suite's conftest): a folder holding a signed third-party
  toolkit ``tp`` and a first-party ``fp``, with ``WB_SIGNING_KEY`` set to ``SEED0_B64``;
- hostile archives: ``evil_tar(path, [(tar_info(name, kind, link), data), ...])``.
"""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

import pytest

from wbcore_runtime.trust import identity, signing
from wbcore_testing.fixtures import write_toolkit

SEED0 = bytes(32)
SEED1 = bytes(31) + b"\x01"
#: ``SEED0`` as ``WB_SIGNING_KEY`` takes it.
SEED0_B64 = base64.b64encode(SEED0).decode()

# The test vector of docs/signing.md: these exact bytes, signed with the all-zero seed.
VEC_MANIFEST = (
    "#+TITLE: Vector toolkit\n#+TOOLKIT: vec\n#+VERSION: 1.0.0\n#+STATUS: stable\n"
    "#+TAGLINE: A test vector.\n#+CAPS: net\n#+TRUST: third-party\n\n"
    "* Vector toolkit :toolkit:\n  :PROPERTIES:\n  :ID: vec\n  :STATUS: stable\n  :END:\n\nA test vector.\n"
)
VEC_OVERVIEW = "#+TITLE: vec overview\n\nWhat vec does.\n"
VEC_WASM = b"\0asm\x01\0\0\0"
VEC_CANONICAL = (
    "wbcore-toolkit-signature/1\n"
    "field AUTHOR_DID did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp\n"
    "field CAPS net\n"
    "field STATUS stable\n"
    "field TAGLINE A test vector.\n"
    "field TITLE Vector toolkit\n"
    "field TOOLKIT vec\n"
    "field TRUST third-party\n"
    "field VERSION 1.0.0\n"
    "manifest c0685bb8ca7cd6746f9af0596259852a69a270ed0af74191aacff4b93fb45d3a manifest.org\n"
    "file 93a44bbb96c751218e4c00d479e4c14358122a389acca16205b1e4d0dc5f9476 bin/tool.wasm\n"
    "file 9530c1c6cbbc49350d1e54746553a3aa2451c132bd3cbc740b183e2a8843eb3f skills/overview.org\n"
)
VEC_SIGNATURE = "YDTxMmvkG-E2-lrPxheCAkGAsX8yjQrBZ4tCTulGFDxDvXiZuCnXMQrrBd9J5983Tk2H7T8O_R70MSOmuxedDw"
VEC_DIGEST = "2a09a1c80ae2f20fd660c0838681d906410d4837b744133dde63ea27c31d5ebb"


def write_vec(root: Path) -> Path:
    d = root / "vec"
    (d / "skills").mkdir(parents=True)
    (d / "bin").mkdir()
    (d / "manifest.org").write_text(VEC_MANIFEST)
    (d / "skills" / "overview.org").write_text(VEC_OVERVIEW)
    (d / "bin" / "tool.wasm").write_bytes(VEC_WASM)
    return d


@pytest.fixture
def src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding a signed third-party toolkit 'tp' and a first-party 'fp'."""
    monkeypatch.setenv("WB_SIGNING_KEY", SEED0_B64)
    base = tmp_path / "src"
    write_toolkit(base, "tp", trust="third-party", caps="net", files={"bin/tool.wasm": b"\0asm\x01\0\0\0"})
    signing.sign(base / "tp", identity.Identity.from_seed(bytes(32)))
    write_toolkit(base, "fp", caps="vfs")
    return base


def evil_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def tar_info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


#: The smallest manifest an archive's toolkit ``e`` needs.
MANIFEST = b"#+TITLE: e\n#+TOOLKIT: e\n#+VERSION: 0.1.0\n#+STATUS: stable\n#+TAGLINE: e.\n\n* e :toolkit:\n"
