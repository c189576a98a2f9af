"""The OCI distribution contract: what the core and the plugins ask of a registry client.

The client (reference resolution, the registry's token flow, push and verified pull of
manifests and blobs) is an engine: a plugin serves it through ``wbcore_distributions``
(``wbcore-oci``), and a caller takes it with :func:`service`. The core keeps what it reads
without any engine: the ``oci://`` reference (written in ``#+SKILL_IMAGES`` and in
``wbx.lock``, checked and pinned by the core), the records a pull and a push return, and the
media types of wbcore's own artifacts (install checks a toolkit's; publish writes them).

A served client fetches through the core's one fetcher (``wbcore_runtime.guard.fetch``) and its
SSRF guard (``guard.netguard``); it never speaks HTTP of its own.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.contract.host import Choice

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
#: wbcore's artifacts: a toolkit (its folder as one deterministic tar.gz layer, the config
#: naming id, version, content digest and signer) and a ``.wbundle`` (the zip as one layer).
TOOLKIT_TYPE = "application/vnd.wbcore.toolkit.v1"
TOOLKIT_CONFIG = "application/vnd.wbcore.toolkit.config.v1+json"
TOOLKIT_LAYER = "application/vnd.wbcore.toolkit.layer.v1.tar+gzip"
BUNDLE_TYPE = "application/vnd.wbcore.wbundle.v1"
BUNDLE_CONFIG = "application/vnd.wbcore.wbundle.config.v1+json"
BUNDLE_LAYER = "application/vnd.wbcore.wbundle.v1+zip"

ENV_CHOICE = "WB_DISTRIBUTION"
NONE_INSTALLED = "no OCI distribution client is installed; pip install wbcore-oci"

_REPO_RE = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*\Z")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_REGISTRY_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?\Z")


@dataclass(frozen=True, slots=True)
class Reference:
    """``registry/repository`` and a ``tag`` or a ``digest`` (a digest pins the bytes)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        raw = text.strip()
        rest = raw.removeprefix("oci://")
        where = f"OCI reference {text!r}"
        registry, sep, path = rest.partition("/")
        if not sep or not path:
            raise InvalidArgs(f"{where}: write it as [oci://]host[:port]/repository:tag or …@sha256:<hex>")
        if not _REGISTRY_RE.match(registry):
            raise InvalidArgs(f"{where}: {registry!r} is not a registry host[:port]")
        tag = digest = None
        if "@" in path:
            path, digest = path.rsplit("@", 1)
            if not DIGEST_RE.match(digest):
                raise InvalidArgs(f"{where}: {digest!r} is not a sha256:<64 hex> digest")
        last = path.rsplit("/", 1)[-1]
        if ":" in last:
            path, tag = path.rsplit(":", 1)
            if not _TAG_RE.match(tag):
                raise InvalidArgs(f"{where}: {tag!r} is not a valid tag "
                                  f"([A-Za-z0-9_][A-Za-z0-9._-]{{0,127}})")
        if not _REPO_RE.match(path) or len(path) > 255:
            raise InvalidArgs(f"{where}: {path!r} is not a repository name (lower-case, '/'-separated)")
        if tag is None and digest is None:
            raise InvalidArgs(f"{where}: name a tag (…:1.0) or a digest (…@sha256:…)")
        return cls(registry, path, tag, digest)

    @property
    def ref(self) -> str:
        """What the manifest endpoint is asked for: the digest when pinned, else the tag."""
        return self.digest or self.tag or ""

    def pinned(self, digest: str) -> Reference:
        return Reference(self.registry, self.repository, None, digest)

    def text(self) -> str:
        out = f"oci://{self.registry}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


@dataclass(frozen=True, slots=True)
class Descriptor:
    """One blob as a manifest names it: media type, digest and size (what a pull verified)."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, data: bytes, media_type: str, annotations: Mapping[str, str] | None = None) -> Descriptor:
        return cls(media_type, "sha256:" + hashlib.sha256(data).hexdigest(), len(data),
                   dict(annotations or {}))


@dataclass(frozen=True, slots=True)
class Pushed:
    reference: Reference  # pinned: the manifest digest
    tag: str | None
    manifest: Descriptor
    blobs_sent: int  # blobs the registry did not already hold


@dataclass(frozen=True, slots=True)
class Pulled:
    reference: Reference  # pinned: the manifest digest
    artifact_type: str
    config: bytes
    layers: tuple[tuple[Descriptor, Path], ...]  # each layer's bytes, checked against its descriptor
    annotations: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class SkillImage:
    """One ``#+SKILL_IMAGES`` entry (``wbcore_runtime.store.skill_images.parse``): an image and
    the guest path its tree is mounted at, read-only."""

    reference: str
    mount: str


#: A layer to push: its bytes, media type and annotations.
Layer = tuple[bytes, str, Mapping[str, str]]


class Distribution(Protocol):
    """What ``DistributionService.factory(runtime)`` returns (``wbcore-oci``)."""

    #: The most bytes one blob may have, pushed or pulled.
    max_blob: int

    def pull(self, reference: str | Reference, dest: Path, *, artifact_types: tuple[str, ...],
             env: Mapping[str, str] | None = None) -> Pulled:
        """Fetch and verify a manifest (against a pinned digest), its config and every layer
        (digest and size, counted as they stream) into ``dest``; an artifact of a type not in
        ``artifact_types`` is refused (``InvalidArgs``), and nothing unverified is kept."""
        ...

    def push(self, reference: str | Reference, *, artifact_type: str, config: tuple[bytes, str],
             layers: Sequence[Layer], annotations: Mapping[str, str] | None = None,
             env: Mapping[str, str] | None = None) -> Pushed:
        """Push the blobs the registry lacks, then the manifest under the reference's tag."""
        ...

    def toolkit_layer(self, folder: Path) -> bytes:
        """A toolkit folder as the tar.gz layer of a ``TOOLKIT_TYPE`` artifact, its bytes a
        function of its content alone (one content, one digest)."""
        ...

    def skill_image(self, home: Path, image: SkillImage, env: Mapping[str, str] | None = None) -> Path:
        """The unpacked, read-only tree of ``image`` under ``home``'s cache
        (``store.skill_images.cache_root``): from the cache, else pulled, verified and unpacked
        once, one pull at a time per home. A tier asks ``store.skill_images.cached`` first, which
        needs no client."""
        ...


#: A client asked for only to pull or push: a cached image or a folder install needs no plugin.
Client = Callable[[], Distribution]


#: ``service(runtime, name)``: the OCI client to use (``contract.host.Choice``).
service: Choice[Distribution] = Choice(lambda r: r.distributions, ENV_CHOICE,
                                       ("OCI distribution client", "OCI distribution clients"),
                                       NONE_INSTALLED)
