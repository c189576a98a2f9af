"""``wbx publish oci``: a signed toolkit or a ``.wbundle`` as an OCI artifact in a registry.

What is published is checked first, the way an install will check it: a toolkit's
signature must verify (a third-party toolkit that does not would be refused on every
install anyway), a bundle must inspect clean. What is checked is what is pushed: a toolkit
folder is copied once (:func:`wbcore_runtime.build.snapshot.take`, ``.git`` left out as the
signed form leaves it out) and the copy is verified and packed; a bundle is read once and
those bytes are inspected and pushed. A file changed in between is never published. The
artifact formats are the core's (:mod:`wbcore_runtime.contract.distribution`): the installer
and this publisher share one definition; the registry client is the runtime's
(``distribution.service``, wbcore-oci).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.build import snapshot
from wbcore_runtime.toolkit import manifest as _manifest
from wbcore_runtime.contract import distribution as oci
from wbcore_runtime.contract.distribution import Distribution
from wbcore_runtime.trust import signing, verdict as trust
from wbcore_runtime.contract.canonical import canonical_json
from wbcore_runtime.contract.errors import InvalidArgs, WbError


@dataclass(frozen=True, slots=True)
class Published:
    kind: str  # "toolkit" | "bundle"
    name: str
    reference: str  # pinned: oci://host/repo@sha256:…
    tag: str | None
    digest: str
    blobs_sent: int


def _reference(target: str) -> oci.Reference:
    ref = oci.Reference.parse(target if target.startswith("oci://") else "oci://" + target)
    if ref.tag is None or ref.digest is not None:
        raise InvalidArgs(f"{target}: publish to <registry>/<repo>:<tag>; the digest is computed from what "
                          "is published")
    return ref


def toolkit(client: Distribution, folder: Path, target: str, *, env: Mapping[str, str]) -> Published:
    ref = _reference(target)
    with tempfile.TemporaryDirectory(prefix="wb-publish-") as tmp:
        snap = snapshot.take(folder, Path(tmp) / "toolkit", label=f"the toolkit folder {folder}",
                             skip_dirs=signing.EXCLUDED_DIRS)
        try:
            return _toolkit(client, snap.dir, ref, env=env)
        except WbError as exc:
            raise snapshot.shown(exc, snap.dir, folder) from None
        finally:
            snapshot.discard(snap.dir)


def _toolkit(client: Distribution, folder: Path, ref: oci.Reference, *, env: Mapping[str, str]) -> Published:
    """Verify and pack ``folder``, a private copy nobody else writes."""
    m = _manifest.load(folder / signing.MANIFEST)
    verdict = trust.folder_verdict(folder, env)
    if trust.refusal(verdict):
        if m.trust != "third-party":
            # `wbx toolkit sign` refuses first-party toolkits: say the step that works.
            raise InvalidArgs(f"{m.id} is first-party and first-party toolkits are not signed; what is "
                              "published to a registry is installed as third-party and must be signed: set "
                              f"#+TRUST: third-party in its manifest, then wbx toolkit sign {m.id}, then "
                              "publish")
        raise InvalidArgs(f"{m.id}: signature {verdict.code}: {verdict.message}; sign it first "
                          f"(wbx toolkit sign {m.id}): installs refuse an unsigned third-party toolkit")
    config = {"id": m.id, "version": m.version, "digest": verdict.digest or signing.content_digest(folder),
              "signer": verdict.signer, "trust": m.trust}
    pushed = client.push(
        ref, artifact_type=oci.TOOLKIT_TYPE,
        config=(canonical_json(config), oci.TOOLKIT_CONFIG),
        layers=[(client.toolkit_layer(folder), oci.TOOLKIT_LAYER,
                 {"org.opencontainers.image.title": f"{m.id}.tar.gz"})],
        annotations={"org.opencontainers.image.version": m.version, "dev.wbcore.toolkit.id": m.id},
        env=env,
    )
    return Published("toolkit", m.id, pushed.reference.text(), ref.tag, pushed.manifest.digest,
                     pushed.blobs_sent)


def bundle(client: Distribution, path: Path, target: str, *, env: Mapping[str, str]) -> Published:
    from wbcore_publish import bundle as _bundle

    data = _bundle.read_bundle(path)  # read once: these bytes are inspected and pushed
    if len(data) > client.max_blob:  # the client's cap on one blob: the registry would refuse it mid-way
        raise InvalidArgs(f"{path}: {len(data)} bytes is over the {client.max_blob}-byte cap for a published "
                          "bundle")
    ins = _bundle.inspect_bytes(data, path.name, env=env, resolve_web=False)
    if not ins.verified:
        raise InvalidArgs(f"{path}: the bundle does not verify ({ins.signature.reason}; "
                          f"{'; '.join(ins.changes) or 'members hold'}); not published")
    ref = _reference(target)
    name = str(ins.manifest.get("workspace", {}).get("name") or path.stem)
    config = {"workspace": name, "signer": ins.signature.signer}
    pushed = client.push(
        ref, artifact_type=oci.BUNDLE_TYPE,
        config=(canonical_json(config), oci.BUNDLE_CONFIG),
        layers=[(data, oci.BUNDLE_LAYER, {"org.opencontainers.image.title": path.name})],
        env=env,
    )
    return Published("bundle", name, pushed.reference.text(), ref.tag, pushed.manifest.digest,
                     pushed.blobs_sent)


def fetch_bundle(client: Distribution, reference: str, dest: Path, *, env: Mapping[str, str]) -> Path:
    """Pull a published ``.wbundle`` (digest and size checked as it streams) to ``dest``;
    ``wbx bundle restore`` then verifies its signature and members before anything lands."""
    work = dest.with_name(f".{dest.name}.oci")
    try:
        pulled = client.pull(reference, work, artifact_types=(oci.BUNDLE_TYPE,), env=env)
        desc, layer = pulled.layers[0]
        if len(pulled.layers) != 1 or desc.media_type != oci.BUNDLE_LAYER:
            raise InvalidArgs(f"{reference}: a bundle artifact has one {oci.BUNDLE_LAYER} layer")
        layer.replace(dest)
        return dest
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
