"""The build pipeline's stages: resolve → lane → store, each reporting progress.

Every entry point that turns source into an artifact goes through here — ``wbx toolkit
build`` (:func:`wbcore_runtime.build.builder.build`, which adds registration), the BuildBroker (a guest
compiling files it sends) and the reserved built-ins — so the cache rule, the key
(:func:`wbcore_runtime.build.cache.key`) and the progress events are the same for all of them.

Progress is a callable ``(phase, detail)``: the pipeline calls it at each stage and
hands the lane a line callback (``BuildRequest.progress``) that reports as phase
``compile``; the CLI prints the lines, re-prints the current phase with its elapsed time
on a TTY, and streams them as JSON events with ``--json`` (docs/build.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from wbcore_runtime.build import cache, snapshot
from wbcore_runtime.build.request import BuildRequest, ResolvedSource, SourceRequest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.plugins import sources

if TYPE_CHECKING:
    from wbcore_runtime.toolkit.manifest import Manifest
    from wbcore_runtime.contract.host import RuntimeServices

#: ``(phase, detail)``: one call per stage and per line a lane reports.
Progress = Callable[[str, str], None]
PHASES = ("resolve", "fetch", "cache", "compile", "store", "register", "error")


def _quiet(_phase: str, _detail: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Compiled:
    """What the lane stage produced: an artifact in the store (built now, or a cache hit)."""

    sha256: str
    size: int
    lane: str
    version: str
    cached: bool
    key: str
    log: str = ""
    #: The digest of the snapshot the lane compiled (the key's source part).
    source_digest: str = ""


def resolve(runtime: RuntimeServices, manifest: Manifest, work: Path, *,
            progress: Progress = _quiet) -> ResolvedSource:
    """Stage 1: ``#+BUILD_SRC`` → a read-only source folder (or a prebuilt artifact)."""
    if not manifest.build_src:
        raise InvalidArgs(f"{manifest.id}: no #+BUILD_SRC to build from ({manifest.path})")
    src = sources.parse(manifest.build_src, runtime.prefixes)
    if src.prefix.factory is None:
        raise InvalidArgs(f"BUILD_SRC {src.prefix.name} has no driver")
    progress("resolve", src.text)
    resolved = src.prefix.factory(runtime).resolve(
        SourceRequest(manifest=manifest, rest=src.rest, workdir=work / "src", home=runtime.home))
    progress("resolve", f"source digest {resolved.digest[:16]}…")
    return resolved


def cache_key(*, lane: str, version: str, output_fields: tuple[str, ...], manifest: Manifest,
              source_digest: str, entry: str | None, flags: tuple[str, ...],
              signer: str | None = None) -> str:
    """The key of one lane build: the lane's identity, the snapshot's digest, the entry,
    the flags, the toolkit's id and signer and the manifest fields the lane declares
    output-relevant, through the one key function."""
    return cache.key(lane=lane, version=version, source_digest=source_digest, flags=flags, entry=entry,
                     fields=cache.manifest_fields(manifest, (*cache.ALWAYS_FIELDS, *output_fields)),
                     signer=signer)


def compile_source(runtime: RuntimeServices, lane_name: str, manifest: Manifest, resolved: ResolvedSource, *,
                   work: Path, cache_dir: Path, flags: tuple[str, ...] = (),
                   env: Mapping[str, str] | None = None, force: bool = False, progress: Progress = _quiet,
                   signer: str | None = None) -> Compiled:
    """Stages 2 and 3: snapshot → the lane (or a cache hit) → the artifact store.

    The lane never sees ``resolved.dir``: it gets a private, read-only snapshot of it
    (:func:`wbcore_runtime.build.snapshot.take`, under ``work``), whose digest is the key's
    source part, so the artifact always matches the bytes it is keyed by, whatever
    happens to the source folder while the compiler runs. ``signer`` (the toolkit's
    signing DID, when it has one) is part of the key. ``cache_dir`` scopes the cache
    records (the builder's and the BuildBroker's are apart, so a guest's builds are never
    served to ``wbx toolkit build`` and back). A lane's failure propagates
    (``BuildFailed`` carries its log)."""
    if resolved.dir is None:
        raise InvalidArgs(f"{manifest.id}: the {lane_name} lane builds a source folder, "
                          "not a prebuilt artifact")
    lane = runtime.lanes.get(lane_name)
    avail = lane.availability(runtime)
    if not avail.ok:
        raise NotFound(f"lane {lane_name} is not available here: {avail.reason}")
    driver = lane.factory(runtime)
    version = str(getattr(driver, "version", ""))
    work.mkdir(parents=True, exist_ok=True)
    snap_dir = work / "snapshot"
    snapshot.discard(snap_dir)  # a second compile in one work folder (the built-ins) starts afresh
    try:
        snap = snapshot.take(resolved.dir, snap_dir)
    except ValueError as exc:
        raise InvalidArgs(f"{manifest.id}: source folder: {exc}") from None
    try:
        progress("resolve", f"snapshot {snap.digest[:16]}… ({snap.files} files, {snap.bytes} bytes)")
        k = cache_key(lane=lane.name, version=version, output_fields=lane.output_fields, manifest=manifest,
                      source_digest=snap.digest, entry=resolved.entry, flags=flags, signer=signer)
        hit = None if force else cache.lookup(cache_dir, k, runtime.artifacts)
        if hit is not None:
            progress("cache", f"hit: lane {lane.name} {version}, unchanged inputs → {hit[:12]}…")
            size = runtime.artifacts.path(hit).stat().st_size
            progress("store", f"artifact {hit[:12]}… ({size} bytes)")
            return Compiled(sha256=hit, size=size, lane=lane.name, version=version, cached=True, key=k,
                            source_digest=snap.digest)
        progress("compile", f"lane {lane.name} ({lane.where})")
        out = driver.build(BuildRequest(manifest=manifest,
                                        source=replace(resolved, dir=snap.dir, digest=snap.digest),
                                        outdir=work / "out", flags=flags, env=dict(env or {}),
                                        progress=lambda line: progress("compile", line)))
        art = runtime.artifacts.put_file(out.artifact)
        progress("store", f"artifact {art.sha256[:12]}… ({art.size} bytes)")
        cache.remember(cache_dir, k, art.sha256, lane=lane.name, version=version, source=snap.digest,
                       toolkit=manifest.id, signer=signer, flags=list(flags), entry=resolved.entry)
        return Compiled(sha256=art.sha256, size=art.size, lane=lane.name, version=version, cached=False,
                        key=k, log=out.log or "", source_digest=snap.digest)
    finally:
        snapshot.discard(snap_dir)
