"""The OCI distribution API, client side: push and pull one artifact (manifest, config, layers).

Served to the core and the other plugins as ``contract.distribution.Distribution``
(:class:`OciDistribution`, through ``wbcore_distributions``); the references, the records a
pull and a push return and wbcore's media types are the contract's
(``wbcore_runtime.contract.distribution``).

Toolkits (``wbx toolkit install oci://…``) and bundles travel through any registry that
speaks the distribution spec (``/v2/<name>/manifests/<ref>``, ``/v2/<name>/blobs/<digest>``,
``POST …/blobs/uploads/`` then ``PUT <location>?digest=``). Every request goes through the
one fetcher (:mod:`wbcore_runtime.guard.fetch`): the SSRF guard on every hop — a registry on a private or
loopback address is refused unless the deployer allows it (``WB_ALLOW_PRIVATE_HOSTS`` /
``WB_ALLOW_PRIVATE_SOURCES``) — and every body is capped while it streams.

Pulling trusts nothing the registry says: the manifest's bytes must hash to the digest a
pinned reference names (``oci://host/repo@sha256:…``), and each blob's bytes must match its
descriptor's digest *and* size, counted as they arrive (a blob is never read past its
declared size). A blob that does not match is refused before the caller sees it; the caller
(install) then lands nothing.

Registries speak https. A registry on plain http (a local mirror, a test registry on
loopback) must be named in ``WB_OCI_PLAIN_HTTP`` (``host:port`` entries separated by spaces
or commas): never inferred from the address.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

from wbcore_runtime.contract import jsonbound
from wbcore_runtime.contract.canonical import canonical_json
from wbcore_runtime.contract.distribution import (
    BUNDLE_CONFIG,
    BUNDLE_LAYER,
    BUNDLE_TYPE,
    DIGEST_RE,
    MANIFEST_TYPE,
    TOOLKIT_CONFIG,
    TOOLKIT_LAYER,
    TOOLKIT_TYPE,
    Descriptor,
    Distribution,
    Layer,
    Pulled,
    Pushed,
    Reference,
    SkillImage,
)
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.dispatch.audit import redact_target
from wbcore_runtime.guard import fetch as _fetch
from wbcore_runtime.guard.netguard import NetGuard
from wbcore_oci import skill_images

__all__ = ["BUNDLE_CONFIG", "BUNDLE_LAYER", "BUNDLE_TYPE", "MANIFEST_TYPE", "TOOLKIT_CONFIG", "TOOLKIT_LAYER",
           "TOOLKIT_TYPE", "Descriptor", "OciClient", "OciDistribution", "OciError", "Pulled", "Pushed",
           "Reference", "manifest_bytes", "pull", "push", "toolkit_layer"]

ENV_PLAIN_HTTP = "WB_OCI_PLAIN_HTTP"
MAX_MANIFEST = 4 << 20
MAX_CONFIG = 1 << 20
MAX_BLOB = 64 << 20
TIMEOUT_S = 60.0
MAX_LAYERS = 16
MAX_TOKEN = 64 << 10


class OciError(InvalidArgs):
    """A registry answer that breaks the protocol or fails verification; nothing was kept."""


def descriptor_json(desc: Descriptor) -> dict[str, Any]:
    """A descriptor as a manifest writes it."""
    out: dict[str, Any] = {"mediaType": desc.media_type, "digest": desc.digest, "size": desc.size}
    if desc.annotations:
        out["annotations"] = dict(sorted(desc.annotations.items()))
    return out


def descriptor_from_json(obj: object, where: str) -> Descriptor:
    """A descriptor as a registry's manifest states it, checked (types, a sha256 digest, a size)."""
    if not isinstance(obj, dict):
        raise OciError(f"{where}: a descriptor is not an object")
    mt, dg, size = obj.get("mediaType"), obj.get("digest"), obj.get("size")
    if not isinstance(mt, str) or not isinstance(dg, str) or not DIGEST_RE.match(dg):
        raise OciError(f"{where}: descriptor without a mediaType or a sha256 digest")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise OciError(f"{where}: descriptor size {size!r} is not a byte count")
    ann = obj.get("annotations") or {}
    if not isinstance(ann, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in ann.items()):
        raise OciError(f"{where}: annotations must map strings to strings")
    return Descriptor(mt, dg, size, ann)


def _plain_http(env: Mapping[str, str]) -> frozenset[str]:
    return frozenset(h.strip().lower() for h in re.split(r"[\s,]+", env.get(ENV_PLAIN_HTTP, "")) if h.strip())


class OciClient:
    """One registry, spoken to through the one fetcher with the deployer's SSRF allowances."""

    def __init__(self, registry: str, env: Mapping[str, str] | None = None, *,
                 guard: NetGuard | None = None) -> None:
        self.env = os.environ if env is None else env
        self.registry = registry
        scheme = "http" if registry.lower() in _plain_http(self.env) else "https"
        self.base = f"{scheme}://{registry}"
        self.guard = guard or NetGuard.from_env(self.env)
        self._token: str | None = None  # an anonymous bearer token, when the registry asks for one

    def _call(self, url: str, *, method: str = "GET", body: bytes | None = None,
              headers: Mapping[str, str] | None = None, ok: tuple[int, ...] = (200,),
              max_bytes: int = MAX_MANIFEST, sink: Any = None) -> tuple[bytes, _fetch.Fetched]:
        limits = _fetch.FetchLimits(max_bytes=max_bytes, timeout=TIMEOUT_S)
        sent = {**(headers or {}), **({"Authorization": f"Bearer {self._token}"} if self._token else {})}
        if sink is not None:
            # A blob: the token was obtained on the manifest or HEAD call before it, so a 401
            # here is an error (its body must never reach the sink).
            got = _fetch.stream(url, sink, guard=self.guard, limits=limits, env=self.env, headers=sent,
                                method=method, body=body, ok=ok)
            return b"", got
        try:
            data, got = _fetch.get_bytes(url, guard=self.guard, limits=limits, env=self.env, headers=sent,
                                         method=method, body=body, ok=(*ok, 401))
            if got.status == 401 and 401 not in ok:
                if self._token or not self._anonymous_token(got.header("www-authenticate")):
                    # named as the fetcher names a URL: an upload Location's query holds its session
                    raise _fetch.StatusRefused(f"{redact_target(url)}: answered HTTP 401", 401)
                sent = {**(headers or {}), "Authorization": f"Bearer {self._token}"}
                data, got = _fetch.get_bytes(url, guard=self.guard, limits=limits, env=self.env, headers=sent,
                                             method=method, body=body, ok=ok)
            return data, got
        except _fetch.StatusRefused as exc:
            if exc.status in (401, 403):
                raise OciError(f"{self.registry}: the registry wants credentials ({exc.message}); "
                               "wbcore speaks to registries that allow anonymous push/pull "
                               "(with or without an anonymous token) on this repository") from None
            raise

    def _anonymous_token(self, challenge: str) -> bool:
        """The distribution spec's token flow, anonymously: ``WWW-Authenticate: Bearer realm=…,
        service=…,scope=…`` → ``GET realm?service&scope`` → ``{"token": …}``. The realm is
        fetched through the same guard (and must be https unless named in WB_OCI_PLAIN_HTTP);
        the token is kept in memory only and never put in a message."""
        if not challenge.lower().startswith("bearer "):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.get("realm", "")
        parts = urlsplit(realm)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            return False
        if parts.scheme == "http" and (parts.netloc.lower() not in _plain_http(self.env)):
            raise OciError(f"{self.registry}: the token realm {parts.scheme}://{parts.netloc} is plain http; "
                           f"name it in {ENV_PLAIN_HTTP} to allow it")
        query = urlencode([(k, params[k]) for k in ("service", "scope") if params.get(k)])
        url = realm + (("&" if parts.query else "?") + query if query else "")
        data, _ = _fetch.get_bytes(url, guard=self.guard,
                                   limits=_fetch.FetchLimits(max_bytes=MAX_TOKEN, timeout=TIMEOUT_S),
                                   env=self.env, headers={"Accept": "application/json"})
        try:
            doc = jsonbound.loads(data, what="its answer")
        except jsonbound.JsonRefused as exc:
            raise OciError(f"{self.registry}: the token service answered something "
                           f"that is not JSON we parse ({exc})") from None
        token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        # matched whole: `$` passes a final line feed, and the HTTP library's refusal of such a
        # header prints its value (the token) in the error
        if not isinstance(token, str) or not re.fullmatch(r"[A-Za-z0-9._~+/=-]+", token):
            raise OciError(f"{self.registry}: the token service gave no usable token")
        self._token = token
        return True

    def _v2(self, repository: str, tail: str) -> str:
        return f"{self.base}/v2/{repository}/{tail}"

    # --- push -----------------------------------------------------------------------------

    def has_blob(self, repository: str, digest: str) -> bool:
        try:
            self._call(self._v2(repository, f"blobs/{digest}"), method="HEAD", ok=(200,))
        except NotFound:
            return False
        return True

    def push_blob(self, repository: str, data: bytes, desc: Descriptor) -> bool:
        """Upload ``data`` (monolithic: POST then PUT ?digest=); False when the registry already held it."""
        if self.has_blob(repository, desc.digest):
            return False
        _, started = self._call(self._v2(repository, "blobs/uploads/"), method="POST", body=b"", ok=(202,))
        location = started.header("location")
        if not location:
            raise OciError(f"{self.registry}: upload started without a Location")
        target = urljoin(self.base + "/", location)
        if not target.startswith(self.base + "/"):
            # The upload must stay on this registry: a Location elsewhere would carry the bytes off.
            raise OciError(f"{self.registry}: upload Location {redact_target(target)!r} "
                           "points at another host")
        target += ("&" if "?" in target else "?") + "digest=" + quote(desc.digest, safe="")
        self._call(target, method="PUT", body=data, ok=(201,),
                   headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
        return True

    def push_manifest(self, repository: str, ref: str, manifest: bytes) -> str:
        _, got = self._call(self._v2(repository, f"manifests/{ref}"), method="PUT", body=manifest, ok=(201,),
                            headers={"Content-Type": MANIFEST_TYPE})
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        said = got.header("docker-content-digest")
        if said and said != digest:
            raise OciError(f"{self.registry}: stored the manifest as {said}, but its bytes hash to {digest}")
        return digest

    # --- pull -----------------------------------------------------------------------------

    def pull_manifest(self, ref: Reference) -> tuple[bytes, str]:
        body, _ = self._call(self._v2(ref.repository, f"manifests/{ref.ref}"),
                             headers={"Accept": MANIFEST_TYPE})
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if ref.digest and digest != ref.digest:
            raise OciError(f"{ref.text()}: the registry's manifest hashes to {digest}, "
                           "not the pinned digest; refused")
        return body, digest

    def pull_blob(self, repository: str, desc: Descriptor, dest: Path, *, cap: int = MAX_BLOB) -> Path:
        """Stream a blob into ``dest``, never past its declared size, and keep it only if its digest holds."""
        if desc.size > cap:
            raise OciError(f"blob {desc.digest}: {desc.size} bytes is over the {cap}-byte cap")
        part = dest.with_name(f".{dest.name}.part")
        try:
            with part.open("wb") as fh:
                got = self._call(self._v2(repository, f"blobs/{desc.digest}"), max_bytes=desc.size,
                                 sink=fh.write)[1]
            actual = "sha256:" + got.sha256
            if got.size != desc.size or actual != desc.digest:
                raise OciError(f"blob {desc.digest}: the registry sent {got.size} bytes hashing to {actual} "
                               f"(the manifest says {desc.size} bytes, {desc.digest}); "
                               "tampered or corrupt, refused")
            os.replace(part, dest)
            return dest
        except InvalidArgs as exc:
            if isinstance(exc, OciError):
                raise
            if "-byte cap" in exc.message:
                raise OciError(f"blob {desc.digest}: the registry sent more than the {desc.size} bytes "
                               "the manifest declares; tampered or corrupt, refused") from None
            raise
        finally:
            part.unlink(missing_ok=True)


def toolkit_layer(folder: Path, *, max_bytes: int = MAX_BLOB) -> bytes:
    """A toolkit folder as a tar.gz whose bytes depend only on its content: entries sorted,
    owners, times and the gzip header zeroed, modes reduced to 0644/0755. Symlinks and
    special files are refused (installs refuse them too)."""
    import gzip
    import io
    import tarfile

    root = folder.resolve()
    raw = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            here = Path(dirpath)
            for name in sorted(dirnames + filenames):
                p = here / name
                rel = p.relative_to(root).as_posix()
                if p.is_symlink() or not (p.is_file() or p.is_dir()):
                    raise InvalidArgs(f"{folder}: {rel} is a link or special file; "
                                      "a published toolkit holds plain files")
                info = tarfile.TarInfo(rel)
                info.mtime = 0
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if p.is_dir():
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tf.addfile(info)
                    continue
                info.size = p.stat().st_size
                info.mode = 0o755 if os.access(p, os.X_OK) else 0o644
                total += info.size
                if total > max_bytes:
                    raise InvalidArgs(f"{folder}: over the {max_bytes}-byte cap for a published toolkit")
                with p.open("rb") as fh:
                    tf.addfile(info, fh)
    return gzip.compress(raw.getvalue(), mtime=0)


def manifest_bytes(*, artifact_type: str, config: Descriptor, layers: list[Descriptor],
                   annotations: Mapping[str, str] | None = None) -> bytes:
    """An OCI image manifest (artifact form), canonical JSON so one content gives one digest."""
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "artifactType": artifact_type,
        "config": descriptor_json(config),
        "layers": [descriptor_json(d) for d in layers],
    }
    if annotations:
        doc["annotations"] = dict(sorted(annotations.items()))
    return canonical_json(doc)


def push(reference: str | Reference, *, artifact_type: str, config: tuple[bytes, str],
         layers: Sequence[Layer], annotations: Mapping[str, str] | None = None,
         env: Mapping[str, str] | None = None, guard: NetGuard | None = None) -> Pushed:
    """Push the blobs (skipping those the registry holds), then the manifest under the tag."""
    ref = reference if isinstance(reference, Reference) else Reference.parse(reference)
    if ref.tag is None:
        raise InvalidArgs(f"{ref.text()}: publish to a tag (…:1.0); the digest is computed from the content")
    reg = OciClient(ref.registry, env, guard=guard)
    cfg = Descriptor.of(config[0], config[1])
    descs = [Descriptor.of(data, mt, ann) for data, mt, ann in layers]
    sent = sum(reg.push_blob(ref.repository, data, d) for (data, _, _), d in zip(layers, descs, strict=True))
    sent += reg.push_blob(ref.repository, config[0], cfg)
    body = manifest_bytes(artifact_type=artifact_type, config=cfg, layers=descs, annotations=annotations)
    digest = reg.push_manifest(ref.repository, ref.tag, body)
    return Pushed(ref.pinned(digest), ref.tag, Descriptor(MANIFEST_TYPE, digest, len(body)), sent)


def pull(reference: str | Reference, dest: Path, *, artifact_types: tuple[str, ...],
         env: Mapping[str, str] | None = None, guard: NetGuard | None = None) -> Pulled:
    """Fetch and verify a manifest, its config and every layer into ``dest`` (a fresh folder).

    Refuses an artifact of another type, more than :data:`MAX_LAYERS` layers, and any blob
    whose bytes do not match its descriptor.
    """
    ref = reference if isinstance(reference, Reference) else Reference.parse(reference)
    reg = OciClient(ref.registry, env, guard=guard)
    body, digest = reg.pull_manifest(ref)
    where = ref.text()
    try:
        doc = jsonbound.loads(body, what=f"{where}: the manifest")
    except jsonbound.JsonRefused as exc:  # malformed or nested too deep to parse (a RecursionError)
        raise OciError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise OciError(f"{where}: not an OCI image manifest (schemaVersion 2)")
    mt = doc.get("mediaType")
    if mt not in (None, MANIFEST_TYPE):
        raise OciError(f"{where}: manifest media type {mt!r}; expected {MANIFEST_TYPE} "
                       "(an index or a Docker image is not a wbcore artifact)")
    config = descriptor_from_json(doc.get("config"), f"{where} config")
    kind = doc.get("artifactType") or config.media_type
    if kind not in artifact_types:
        raise OciError(f"{where}: artifact type {kind!r}; expected {' or '.join(artifact_types)}")
    raw_layers = doc.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers or len(raw_layers) > MAX_LAYERS:
        raise OciError(f"{where}: expected 1..{MAX_LAYERS} layers")
    layers = [descriptor_from_json(obj, f"{where} layer {i}") for i, obj in enumerate(raw_layers)]
    dest.mkdir(parents=True, exist_ok=True)
    cfg_path = reg.pull_blob(ref.repository, config, dest / "config.json", cap=MAX_CONFIG)
    got: list[tuple[Descriptor, Path]] = []
    for i, d in enumerate(layers):
        got.append((d, reg.pull_blob(ref.repository, d, dest / f"layer-{i}")))
    ann = doc.get("annotations") or {}
    if not isinstance(ann, dict):
        raise OciError(f"{where}: manifest annotations must be an object")
    return Pulled(ref.pinned(digest), str(kind), cfg_path.read_bytes(), tuple(got),
                  {str(k): str(v) for k, v in ann.items()})


class OciDistribution:
    """The served ``contract.distribution.Distribution``: the functions above, for callers that
    reach the client through their runtime (install, the tiers' skill images, publish)."""

    max_blob = MAX_BLOB

    def pull(self, reference: str | Reference, dest: Path, *, artifact_types: tuple[str, ...],
             env: Mapping[str, str] | None = None) -> Pulled:
        return pull(reference, dest, artifact_types=artifact_types, env=env)

    def push(self, reference: str | Reference, *, artifact_type: str, config: tuple[bytes, str],
             layers: Sequence[Layer], annotations: Mapping[str, str] | None = None,
             env: Mapping[str, str] | None = None) -> Pushed:
        return push(reference, artifact_type=artifact_type, config=config, layers=layers,
                    annotations=annotations, env=env)

    def toolkit_layer(self, folder: Path) -> bytes:
        return toolkit_layer(folder)

    def skill_image(self, home: Path, image: SkillImage, env: Mapping[str, str] | None = None) -> Path:
        return skill_images.resolve(home, image, env, client=self)


def service(_runtime: Any) -> Distribution:
    """``DistributionService.factory``: the client holds no state of the runtime's (each call
    takes the deployer's environment); typed as the Protocol, so mypy checks the class against it."""
    return OciDistribution()
