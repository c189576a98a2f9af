"""Build orchestration: ``wbx toolkit build <id> [which]``.

    #+BUILD_SRC ─parse─▶ source prefix driver .resolve(SourceRequest) ─▶ ResolvedSource
                ─#+BUILD_LANG─▶ lane driver .build(BuildRequest) ─▶ BuildOutput (.wasm + log)
                ─▶ artifact store (sha256) ─▶ #+SHA256 check ─▶ registry (command / kernel)

The stages are :mod:`wbcore_runtime.build.pipeline` (shared with the BuildBroker and the
built-ins); the cache key is :func:`wbcore_runtime.build.cache.key`, over every input that changes
the output: an unchanged toolkit rebuilds instantly (no lane runs) and registers the same artifact.
A prebuilt source (``wasm:``/``archive:`` resolving to an artifact) skips the lane. Every
build writes its log to ``$WB_HOME/build/logs/<id>.log``; a failed build raises with the
log attached (``BuildFailed.log``) and its path in the message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.build import buildable
from wbcore_runtime.store import faults, leftovers
from wbcore_runtime.trust import policy
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_runtime.build import BuildFailed, ResolvedSource, pipeline
from wbcore_runtime.contract.kernel_calls import KernelSpec
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError
from wbcore_runtime.store.registry import Entry
from wbcore_runtime.store.registry import OwnedName
from wbcore_runtime.dispatch import resolve as resolution
from wbcore_runtime.trust import verdict as trust
from wbcore_runtime.guard import paths as guard_paths
from wbcore_runtime.guard import preopen
from wbcore_runtime.trust import signing
from wbcore_runtime.build import snapshot
from wbcore_runtime.toolkit.manifest import load
from wbcore_runtime.store import skill_images
from wbcore_runtime.dispatch.audit import AuditLog, digest

if TYPE_CHECKING:
    from wbcore_runtime.toolkit.manifest import Manifest
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.toolkit.loaded import Toolkit

Progress = pipeline.Progress
#: What each #+EXEC shape registers as.
KINDS = {"command": "command", "kernel": "kernel", "component": "component"}
MAX_LOG_BYTES = 1 << 20
#: The artifact of a ``#+EXEC: posix`` command: no wasm, a small manifest naming the native
#: CLI (resolved inside the container tier's root at call time, never on this host's PATH).
POSIX_MAGIC = b"wb-posix-command/1\n"


@dataclass(frozen=True, slots=True)
class BuildResult:
    toolkit: str
    kind: str
    name: str
    sha256: str
    lane: str | None
    cached: bool
    seconds: float
    log_path: Path
    entry: Entry
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "toolkit": self.toolkit, "kind": self.kind, "name": self.name, "sha256": self.sha256,
            "lane": self.lane, "cached": self.cached, "seconds": round(self.seconds, 4),
            "log": str(self.log_path), "notes": list(self.notes),
        }


def kernel_spec(tk: Toolkit) -> KernelSpec:
    """The kernel ABI from ``#+KERNEL_ENTRY`` / ``_IN_OFF`` / ``_OUT_OFF`` / ``_TIMEOUT``."""
    m = tk.manifest
    d = KernelSpec()

    def number(key: str, default: float, conv: Callable[[str], float]) -> float:
        raw = m.extra(key)
        if raw is None:
            return default
        try:
            value = conv(raw.replace("_", ""))
        except ValueError:
            raise InvalidArgs(f"{m.path}: #+{key}: {raw!r} is not a number") from None
        if value < 0:
            raise InvalidArgs(f"{m.path}: #+{key}: must not be negative")
        return value

    entry = m.extra("KERNEL_ENTRY") or d.entry
    if not entry.replace("_", "a").isalnum():
        raise InvalidArgs(f"{m.path}: #+KERNEL_ENTRY: {entry!r} is not an export name")
    return KernelSpec(
        entry=entry,
        in_off=int(number("KERNEL_IN_OFF", d.in_off, lambda s: int(s, 0))),
        out_off=int(number("KERNEL_OUT_OFF", d.out_off, lambda s: int(s, 0))),
        timeout_s=float(number("KERNEL_TIMEOUT", d.timeout_s, float)),
    )


def registered_name(tk: Toolkit, kind: str) -> str:
    m = tk.manifest
    if kind == "command":
        if not m.cli_bin:
            raise InvalidArgs(f"{m.id}: a command toolkit needs #+CLI_BIN (the name to register)")
        return m.cli_bin
    return m.cli_bin or m.id


def _claim(runtime: RuntimeServices, tk: Toolkit, kind: str, name: str,
           replace_command: str | None) -> str | None:
    """The current owner of ``name``; raises unless it is free, ours, or handed over."""
    if replace_command is not None and replace_command != name:
        raise InvalidArgs(f"--replace-command {replace_command}: {tk.id} registers {kind} {name!r}, "
                          f"not {replace_command!r}")
    owner = runtime.registry.owner(kind, name)
    if owner and owner != tk.id and replace_command != name:
        raise OwnedName(kind, name, owner, tk.id)
    return owner


def _register(runtime: RuntimeServices, tk: Toolkit, kind: str, name: str, sha256: str, prov: dict[str, Any],
              owner: str | None, *, pinned: bool, options: dict[str, Any], shape: str | None = None) -> Entry:
    """Register ``sha256`` for ``tk`` with its provenance: the one way a toolkit's artifact
    enters the registry (builds and :func:`register_artifact`)."""
    m = tk.manifest
    if trust.content_digest(tk, runtime) != prov["digest"]:
        raise resolution.Unavailable(f"{m.id}: its files changed while it was being built; build it again")
    trust.remember_form(tk, runtime)
    opts: dict[str, Any] = {"caps": list(m.caps), "pinned": pinned, **options, resolution.PROVENANCE: prov}
    if kind == "kernel":
        opts.update(kernel_spec(tk).as_options())
    prof = policy.profile_for(m.extra("PROFILE"), m.caps, runtime.caps_universe_for(m.caps))
    entry = runtime.registry.register(Entry(
        kind=kind, name=name, sha256=sha256, shape=shape or (m.exec if m.exec in KINDS else kind),
        toolkit=m.id, arg_mode=m.arg_mode, profile=prof.name, builtin=False, options=opts,
    ), take_from=owner if owner and owner != m.id else None)
    if owner and owner != m.id:
        _audit_handover(runtime, kind, name, owner, m.id)
    return entry


def _preopen_option(toolkit_dir: Path, value: str | None, *, home: Path, folder: str | None = None,
                    scratch: str | None = None) -> dict[str, Any]:
    """The entry options a build records for ``#+PREOPEN`` and ``#+SCRATCH`` (``{}`` without
    either): each folder must exist inside ``toolkit_dir`` (``Refused``/``InvalidArgs``
    naming it otherwise); it is copied into ``home``'s content-addressed tree store
    (:func:`wbcore_runtime.build.snapshot.store_tree`) and the entry records the tree's digest.
    ``folder``: the folder of a single ``#+PREOPEN`` when it is stored elsewhere than its name
    says (an ``archive:`` bundle's, resolved by its source plugin)."""
    entries = preopen.parse_all(value)
    out: dict[str, Any] = {}
    sc = preopen.parse_scratch(scratch, [g for _, g in entries])
    if sc is not None:
        out[preopen.SCRATCH_OPTION] = sc
    if not entries:
        return out
    if folder is not None and len(entries) != 1:
        raise InvalidArgs("#+PREOPEN: an archive's folder is named once; "
                          "give one #+PREOPEN for an archive: bundle")
    stored = []
    for named, guest in entries:
        where = folder or named
        try:
            host = guard_paths.inside(toolkit_dir, where, expect="dir")
        except NotFound:
            raise InvalidArgs(f"#+PREOPEN: {where!r} is not a folder inside {toolkit_dir}") from None
        digest, _ = snapshot.store_tree(Path(home), host, label=f"the #+PREOPEN folder {where!r}")
        stored.append({"tree": digest, "dir": named, "guest": guest})
    out[preopen.OPTION] = stored
    return out


def _preopen(runtime: RuntimeServices, m: Manifest, kind: str, resolved: ResolvedSource) -> dict[str, Any]:
    """A command's ``#+PREOPEN`` folders, copied into the home's content-addressed tree
    store now, and its ``#+SCRATCH`` folder (:func:`_preopen_option`): from the
    toolkit's verified snapshot (``m`` is the snapshot's manifest), or from inside an
    ``archive:`` bundle (checked by its source plugin). Calls read the stored copies, never
    the toolkit folder."""
    scratch = m.keywords.get("SCRATCH") or None
    if kind != "command" or not (m.preopen or scratch):
        return {}
    if (m.build_src or "").startswith("archive:") and m.preopen:
        if resolved.preopen is None:
            return _preopen_option(m.dir, None, home=runtime.home, scratch=scratch)
        return _preopen_option(resolved.preopen.parent, m.preopen, home=runtime.home,
                              folder=resolved.preopen.name, scratch=scratch)
    return _preopen_option(m.dir, m.preopen, home=runtime.home, scratch=scratch)


def _verified_snapshot(runtime: RuntimeServices, tk: Toolkit, prov: dict[str, Any], work: Path) -> Manifest:
    """The toolkit folder copied into ``work`` (:func:`wbcore_runtime.build.snapshot.take`,
    ``.git`` left out as the signed form leaves it out) and checked to be the very content
    the provenance recorded (``signing.content_digest`` of the copy == ``prov['digest']``):
    the manifest of the copy, from which the build resolves its source and reads its
    ``#+PREOPEN``. A file changed between the check and the copy is caught here, and one
    changed after the copy is never seen by the build."""
    try:
        snap = snapshot.take(tk.dir, work / "toolkit", label=f"toolkit {tk.id}",
                             skip_dirs=signing.EXCLUDED_DIRS)
    except ValueError as exc:
        raise InvalidArgs(f"{tk.id}: {exc}") from None
    if signing.content_digest(snap.dir) != prov["digest"]:
        raise resolution.Unavailable(f"{tk.id}: its files changed while it was being built; build it again")
    return load(snap.dir / "manifest.org")


def register_artifact(runtime: RuntimeServices, ident: str, sha256: str, kind: str | None = None, *,
                      replace_command: str | None = None) -> Entry:
    """Register an artifact already in the store for toolkit ``ident`` without building
    (an embedder that compiled it elsewhere). The same rules as a build: the toolkit must
    be available, ``#+SHA256`` must match, the name must be free or handed over, and the
    entry records the toolkit's provenance."""
    tk = runtime.toolkit(ident)
    m = tk.manifest
    kind = kind or KINDS.get(m.exec or "")
    if kind is None or kind not in KINDS.values():
        raise InvalidArgs(f"{m.id}: #+EXEC {m.exec or '(none)'} does not register an artifact")
    runtime.artifacts.verify(sha256)
    trust.check_digest(m, sha256)
    name = registered_name(tk, kind)
    owner = _claim(runtime, tk, kind, name, replace_command)
    prov = resolution.provenance(runtime, tk)
    return _register(runtime, tk, kind, name, sha256, prov, owner, pinned=bool(m.sha256), options={})


def posix_manifest(tk: Toolkit) -> bytes:
    """The artifact a posix toolkit registers: :data:`POSIX_MAGIC` + JSON naming its CLI."""
    import json

    m = tk.manifest
    if not m.cli_bin:
        raise InvalidArgs(f"{m.id}: a posix toolkit needs #+CLI_BIN (the native CLI to run, found inside the "
                          "container tier's root)")
    obj: dict[str, Any] = {"cli_bin": m.cli_bin, "toolkit": m.id}
    images = m.keywords.get("SKILL_IMAGES")
    if images:  # OCI skill images its calls see read-only (wbcore_runtime.store.skill_images)
        obj["skill_images"] = [[s.reference, s.mount]
                               for s in skill_images.parse(images, f"{m.id}: #+SKILL_IMAGES")]
    return POSIX_MAGIC + json.dumps(obj, sort_keys=True).encode()


def read_posix_manifest(data: bytes) -> dict[str, Any] | None:
    """The posix manifest in an artifact's bytes (``None``: it is not one)."""
    import json

    if not data.startswith(POSIX_MAGIC):
        return None
    try:
        obj = json.loads(data[len(POSIX_MAGIC):].decode())
    except (UnicodeDecodeError, ValueError):
        raise InvalidArgs("the posix manifest artifact is not valid JSON; rebuild its toolkit") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("cli_bin"), str):
        raise InvalidArgs("the posix manifest artifact names no cli_bin; rebuild its toolkit")
    return obj


def register_posix(runtime: RuntimeServices, tk: Toolkit, *,
                   replace_command: str | None = None) -> tuple[Entry, str]:
    """Register a ``#+EXEC: posix`` toolkit as command ``#+CLI_BIN``, shape ``posix``: its
    artifact is :func:`posix_manifest` (nothing is compiled), with the same provenance as
    any build. Only a tier whose record lists ``posix`` in its kinds can run it."""
    data = posix_manifest(tk)
    name = registered_name(tk, "command")
    owner = _claim(runtime, tk, "command", name, replace_command)
    prov = resolution.provenance(runtime, tk)
    art = runtime.artifacts.put_bytes(data)
    entry = _register(runtime, tk, "command", name, art.sha256, prov, owner, pinned=False,
                      options={"posix": True}, shape="posix")
    return entry, owner or ""


def _audit_handover(runtime: RuntimeServices, kind: str, name: str, old: str, new: str) -> None:
    AuditLog.for_home(runtime.home, runtime.env).record(
        principal="deployer", cap="registry", op="replace-command",
        args_digest=digest(f"{kind} {name} {old} {new}".encode()), outcome="allowed",
        target=f"{kind} {name}: {old} -> {new}")


def wants_build(manifest: Any) -> bool:
    """A toolkit ``wbx toolkit build`` builds: a buildable ``#+EXEC`` and a ``#+BUILD_SRC``."""
    return manifest.exec in KINDS and bool(manifest.build_src)


def build_row(runtime: RuntimeServices, ident: str, *, force: bool = False) -> dict[str, Any]:
    """Build ``ident`` and say how it went as one row, never raising for the build's own
    failure: ``state`` is built / cached / skipped (its lane cannot run here) / failed, with
    the error kind and message. ``wbx toolkit build --all`` and the engine's push print these."""
    try:
        res = build(runtime, ident, force=force)
    except buildable.LaneUnavailable as exc:
        return {"toolkit": ident, "state": "skipped", "kind": exc.kind.value, "error": exc.message}
    except WbError as exc:
        return {"toolkit": ident, "state": "failed", "kind": exc.kind.value, "error": exc.message}
    return {"toolkit": ident, "state": "cached" if res.cached else "built", **res.as_dict()}


def build(runtime: RuntimeServices, ident: str, which: str | None = None, *, progress: Progress | None = None,
          force: bool = False, replace_command: str | None = None) -> BuildResult:
    """Build toolkit ``ident`` and register its artifact. ``which`` picks the registry
    kind (``command`` / ``kernel``; default from ``#+EXEC``). ``force`` skips the cache.

    The name it registers must be free or already this toolkit's; ``replace_command``
    (the deployer's ``--replace-command NAME``) hands over a name another toolkit owns,
    and the hand-over is written to the audit trail. A toolkit that may not run (a
    third-party signature that does not verify, a shipped artifact off its pin) is not
    built. The entry records the build's provenance (``wbcore_runtime.dispatch.resolve.provenance``)."""
    say = progress or (lambda _stage, _detail: None)
    t0 = time.perf_counter()
    tk = runtime.toolkit(ident)
    m = tk.manifest
    if m.exec == "posix" and which in (None, "command"):
        entry, _owner = register_posix(runtime, tk, replace_command=replace_command)
        logs = runtime.home / "build" / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{m.id}.log"
        detail = f"command {entry.name} → posix manifest {entry.sha256[:12]}… (no wasm; runs in a posix tier)"
        atomic_write(log_path, f"# build {m.id} {m.version} (posix)\n[register] {detail}\n".encode())
        say("register", detail)
        return BuildResult(toolkit=m.id, kind="command", name=entry.name, sha256=entry.sha256, lane=None,
                           cached=False, seconds=time.perf_counter() - t0, log_path=log_path, entry=entry,
                           notes=("posix: nothing compiled; the CLI is resolved inside the container root",))
    kind = which or KINDS.get(m.exec or "")
    if kind is None or kind not in KINDS.values():
        if which:
            raise InvalidArgs(f"build target {which!r}: "
                              f"choose one of {', '.join(sorted(set(KINDS.values())))}")
        raise InvalidArgs(f"{m.id}: #+EXEC {m.exec or '(none)'} does not build a registered artifact; "
                          f"buildable shapes: {', '.join(sorted(KINDS))}")
    if not m.build_src:
        raise InvalidArgs(f"{m.id}: no #+BUILD_SRC to build from ({m.path})")
    name = registered_name(tk, kind)
    owner = _claim(runtime, tk, kind, name, replace_command)
    prov = resolution.provenance(runtime, tk)
    if kind == "kernel":
        kernel_spec(tk)  # a malformed ABI fails before anything is built
    logs = runtime.home / "build" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{m.id}.log"
    log: list[str] = [f"# build {m.id} {m.version} ({kind} {name}) "
                      f"at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"]

    def note(stage: str, detail: str) -> None:
        log.append(f"[{stage}] {detail}")
        say(stage, detail)

    def save_log() -> None:
        text = "\n".join(log) + "\n"
        atomic_write(log_path, text.encode()[-MAX_LOG_BYTES:])

    buildable.check(runtime, m)  # what verify shows as ✗ is refused here, before any fetch or compile
    tmp_root = runtime.home / "build" / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    work = leftovers.mkdtemp("build-", dir=tmp_root)  # owner in the name: swept if this process is killed
    faults.point("build:work")
    lane_name: str | None = None
    cached = False
    try:
        # Everything below reads the verified copy, never the toolkit folder.
        snap_m = _verified_snapshot(runtime, tk, prov, work)
        resolved = pipeline.resolve(runtime, snap_m, work, progress=note)
        if resolved.artifact is not None:
            note("fetch", f"prebuilt module {resolved.artifact.name}")
            art = runtime.artifacts.put_file(resolved.artifact)
            sha256, size = art.sha256, art.size
            note("store", f"artifact {sha256[:12]}… ({size} bytes)")
        else:
            lane_name = buildable.lane(runtime, m).name  # the lane verify names (third-party C → c-wasm)
            flags = buildable.flags(m)
            try:
                done = pipeline.compile_source(runtime, lane_name, snap_m, resolved, work=work, flags=flags,
                                               force=force, cache_dir=runtime.home / "build" / "cache",
                                               progress=note, signer=prov.get("signer"))
            except BuildFailed as exc:
                log.append(exc.log or "")
                note("error", exc.message)
                save_log()
                raise BuildFailed(f"{exc.message} (log: {log_path})", log=exc.log) from None
            if done.log:
                log.append(done.log.rstrip("\n"))
            sha256, size, cached = done.sha256, done.size, done.cached
            resolved = ResolvedSource(digest=done.source_digest, dir=resolved.dir, entry=resolved.entry,
                                      preopen=resolved.preopen,
                                      sha256_pins_source=resolved.sha256_pins_source)
        if m.sha256 and not resolved.sha256_pins_source and m.sha256 != sha256:
            note("error", f"#+SHA256 {m.sha256} != built {sha256}")
            save_log()
            raise trust.IntegrityError(  # capability-denied (126), as docs/signing.md says
                f"{m.id}: built artifact {sha256[:12]}… does not match #+SHA256 {m.sha256[:12]}…; "
                "not registered")
        entry = _register(runtime, tk, kind, name, sha256, prov, owner,
                          pinned=bool(m.sha256) and not resolved.sha256_pins_source,
                          options={"lane": lane_name, "source_digest": resolved.digest,
                                   **_preopen(runtime, snap_m, kind, resolved)})
        if owner and owner != m.id:
            note("register", f"{kind} {name} handed over from toolkit {owner} (--replace-command, audited)")
        note("register", f"{kind} {name} → {sha256[:12]}… (profile {entry.profile})")
        save_log()
        return BuildResult(toolkit=m.id, kind=kind, name=name, sha256=sha256, lane=lane_name, cached=cached,
                           seconds=time.perf_counter() - t0, log_path=log_path, entry=entry)
    except WbError as exc:
        if not log[-1].startswith("[error]"):
            log.append(f"[error] {exc.message}")
        save_log()
        raise
    finally:
        snapshot.discard(work)  # its snapshots are read-only
