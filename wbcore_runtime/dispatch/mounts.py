"""Host folders granted to one sandbox run (``wbx run --mount``, ``wbx toolkit run --mount``,
``wbx shell --mount``): the spec grammar ``HOST[:GUEST][:ro|rw]``, THE check of each folder
(:func:`wbcore_runtime.guard.paths.host_folder`, the one containment rule: symlinks resolved
once, no devices, never the home), and the grant: a tier that binds folders, ``:rw`` only
with the consent-only cap ``mount-rw``, each grant audited. Tiers bind what this module
returns (:class:`Mount` records) and ask :func:`unreachable_by` before they start.

A remote caller (an engine API client, an MCP client, a pipeline run for one) is not the
deployer: its mounts are granted only inside the folders the deployer lists in
:data:`ROOTS_ENV`, by the same :func:`grant`; unset, it may mount nothing."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, WbError
from wbcore_runtime.dispatch.audit import AuditLog, digest
from wbcore_runtime.guard import paths
from wbcore_runtime.trust import policy

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.contract.records import IsolationTier


@dataclass(frozen=True, slots=True)
class Mount:
    """A host folder the sandbox sees at ``guest`` (``rw=False``: read-only)."""

    host: str
    guest: str
    rw: bool = False


#: Guest paths a mount may not cover: the sandbox's own system folders.
RESERVED = ("/proc", "/dev", "/sys", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/wb", "/run")
#: Host folders one call or shell may mount (the micro-VM has as many virtio-9p slots).
MAX_MOUNTS = 4
#: The deployer's setting (folders separated by ``:``) inside which a remote caller may mount.
ROOTS_ENV = "WB_MOUNT_ROOTS"
#: The longest spec a remote caller may send, in bytes of UTF-8.
MAX_SPEC_BYTES = 4096
DOCS = 'docs/running.md "Host folders for one call"'


def parse_mount(spec: str, *, home: Path | str | None = None) -> Mount:
    """``host[:guest][:ro|rw]`` (default ``ro``; guest default: the host folder's own real
    path) → :class:`Mount`, or ``ValueError`` saying what is wrong. The host side is granted
    by :func:`wbcore_runtime.guard.paths.host_folder` (an existing folder, symlinks resolved once,
    no devices, never the wbcore ``home`` or a folder around it); the guest side must be an
    absolute, normalised path outside the sandbox's system folders."""
    parts = spec.split(":")
    mode = "ro"
    if len(parts) > 1 and parts[-1] in ("ro", "rw"):
        mode = parts.pop()
    elif len(parts) == 3:
        raise ValueError(f"--mount {spec!r}: the mode must be ro or rw, not {parts[-1]!r}")
    if len(parts) > 2 or not parts[0] or (len(parts) == 2 and not parts[1]):
        raise ValueError(f"--mount {spec!r}: expected HOST[:GUEST][:ro|rw], e.g. ./data:/data:ro")
    host = parts[0]
    try:
        real = paths.host_folder(host, home=home)
    except WbError as exc:
        raise ValueError(exc.message) from None
    guest = parts[1] if len(parts) == 2 else real
    if not guest.startswith("/") or os.path.normpath(guest) != guest or guest == "/":
        raise ValueError(f"--mount {spec!r}: the guest path must be absolute and normalised "
                         "(no '..', no trailing '/'), e.g. /data")
    for sys_dir in RESERVED:
        if guest == sys_dir or guest.startswith(sys_dir + "/"):
            raise ValueError(f"--mount {spec!r}: {sys_dir} belongs to the sandbox; mount under another path "
                             "(e.g. /data or /tmp/work)")
    return Mount(real, guest, mode == "rw")


def parse_mounts(specs: Sequence[str | Mount], *, home: Path | str | None = None) -> tuple[Mount, ...]:
    """Every ``--mount`` of one call, each through :func:`parse_mount` (a :class:`Mount` built
    by an embedder is checked by the same rule), at most :data:`MAX_MOUNTS`, no guest path
    twice; ``InvalidArgs`` naming the first that is wrong."""
    if len(specs) > MAX_MOUNTS:
        raise InvalidArgs(f"--mount: at most {MAX_MOUNTS} folders per call (got {len(specs)})")
    out: list[Mount] = []
    for spec in specs:
        text = spec if isinstance(spec, str) else f"{spec.host}:{spec.guest}:{'rw' if spec.rw else 'ro'}"
        try:
            out.append(parse_mount(text, home=home))
        except ValueError as exc:
            raise InvalidArgs(str(exc)) from None
    guests = [m.guest for m in out]
    for g in guests:
        if guests.count(g) > 1:
            raise InvalidArgs(f"--mount: the guest path {g} is given twice")
    return tuple(out)


def unreachable_by(path: str, rw: bool, uid: int) -> str:
    """Why host ``uid`` (which owns nothing and is in no group: the unprivileged uid a tier
    runs its sandbox as) cannot use the mounted folder ``path``, or ``""``: every ancestor
    must be searchable by others, the folder readable (and for ``rw`` writable) by others
    or owned by ``uid``. Every tier that mounts a host folder asks this, before it starts."""
    p = Path(path)
    for parent in reversed(p.parents):
        st = parent.stat()
        if st.st_uid != uid and not st.st_mode & stat.S_IXOTH:
            return f"{parent} is not searchable by others (chmod o+x {parent})"
    st = p.stat()
    need = stat.S_IROTH | stat.S_IXOTH | (stat.S_IWOTH if rw else 0)
    if st.st_uid != uid and st.st_mode & need != need:
        return (f"{p} is not {'writable' if rw else 'readable'} by others "
                f"(chmod o+{'rwx' if rw else 'rx'} {p}, or chown {uid} {p})")
    return ""


def requested(value: object, where: str) -> tuple[str, ...]:
    """The mounts a remote request carries (JSON: a list of ``HOST[:GUEST][:ro|rw]`` strings),
    bounded before anything looks at the disk: at most :data:`MAX_MOUNTS`, each at most
    :data:`MAX_SPEC_BYTES`; ``InvalidArgs`` naming ``where`` (e.g. ``'mounts'``) otherwise."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidArgs(f"{where} must be a list of strings HOST[:GUEST][:ro|rw], "
                          "e.g. [\"/srv/data/repo:/repo\"]")
    if len(value) > MAX_MOUNTS:
        raise InvalidArgs(f"{where}: at most {MAX_MOUNTS} folders per call (got {len(value)})")
    for v in value:
        if len(v.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
            raise InvalidArgs(f"{where}: a spec of more than {MAX_SPEC_BYTES} bytes ({v[:64]!r}…)")
    return tuple(value)


def _remote_roots(runtime: RuntimeServices, specs: Sequence[str | Mount], remote: str,
                  what: str) -> list[paths.Root]:
    """The roots of :data:`ROOTS_ENV` a ``remote`` caller's folders must lie in, or
    ``CapabilityDenied``: the setting unset, or a host path not absolute or (as written,
    before the disk is asked, so a refusal says nothing of what exists outside) outside
    every root. Each refusal is audited under ``remote``."""
    raw = runtime.env.get(ROOTS_ENV, "")
    roots = [paths.Root.at(r, f"{ROOTS_ENV} root {r}") for r in raw.split(":") if r]
    bad = [r.shown for r in roots if not r.shown.is_absolute()]
    if bad:
        raise InvalidArgs(f"{ROOTS_ENV}: {bad[0]} is not an absolute path; "
                          "the deployer lists absolute folders, separated by ':'")
    why = ""
    if not roots:
        why = (f"{what}: a remote caller ({remote}) may not mount host folders unless the deployer sets "
               f"{ROOTS_ENV} (folders separated by ':') to the folders remote callers may mount inside; "
               f"see {DOCS}")
    for spec in specs if not why else ():
        host = spec.split(":", 1)[0] if isinstance(spec, str) else spec.host
        if not paths.in_roots(host, roots, resolved=False):
            where = "outside" if os.path.isabs(host) else "not an absolute path inside"
            why = (f"mount {host!r}: {what} was asked for by a remote caller ({remote}); "
                   f"the folder is {where} {ROOTS_ENV} ({raw}); see {DOCS}")
            break
    if why:
        _refused(runtime, remote, why)
    return roots


def _refused(runtime: RuntimeServices, remote: str, why: str) -> NoReturn:
    AuditLog.for_home(runtime.home, runtime.env).record(principal=remote, cap="mount", op="remote",
                                                        args_digest=digest(why.encode()), outcome="denied",
                                                        target=why[:300])
    raise CapabilityDenied(why)


def grant(runtime: RuntimeServices, mounts: Sequence[str | Mount], *, tiers: Iterable[IsolationTier],
          tier: str, caps: frozenset[str], owner: str, what: str, principal: str,
          remote: str | None = None) -> tuple[Mount, ...]:
    """THE check of host folders granted to a sandbox run (calls and tasks): each by
    :func:`parse_mounts`; the run's ``tier`` must be one of ``tiers`` that binds host folders
    (its record lists ``mount``); ``:rw`` only when ``caps`` (the run's effective caps) hold
    :data:`wbcore_runtime.trust.policy.MOUNT_RW`, which toolkit ``owner`` declares in ``#+CAPS``
    and the deployer grants. ``remote``: the remote principal that asked (``"engine"``,
    ``"mcp"``…), ``None`` for the deployer's own surfaces (the CLI, the Python API); a remote
    caller's folders must lie, after :func:`wbcore_runtime.guard.paths.host_folder` resolved
    them, inside a root of :data:`ROOTS_ENV`. Each grant is audited (under ``remote``)."""
    specs = tuple(mounts)
    roots = _remote_roots(runtime, specs, remote, what) if remote is not None and specs else None
    parsed = parse_mounts(specs, home=runtime.home)
    if not parsed:
        return ()
    if remote is not None and roots is not None:
        for m in parsed:
            if not paths.in_roots(m.host, roots, resolved=True):
                _refused(runtime, remote, f"mount {m.host}: {what} was asked for by a remote caller "
                                          f"({remote}); the folder (its symlinks resolved) is outside "
                                          f"{ROOTS_ENV}; see {DOCS}")
    binders = sorted(t.name for t in tiers if "mount" in t.kinds)
    if tier not in binders:
        raise InvalidArgs(f"--mount: {what} runs at tier {tier}, which binds no host folder; tiers that do: "
                          f"{', '.join(binders) or 'none installed (pip install wbcore-container)'} "
                          f"(--tier {binders[0] if binders else 'container'} --mount HOST:GUEST)")
    for m in parsed:
        if m.rw and policy.MOUNT_RW not in caps:
            raise CapabilityDenied(f"--mount {m.host}:{m.guest}:rw: {what} may not write to host folders: "
                                   f"toolkit {owner} must list {policy.MOUNT_RW} in #+CAPS and the deployer "
                                   f"grant it (wbx toolkit grant {owner} {policy.MOUNT_RW}); "
                                   "or mount it read-only")
    log = AuditLog.for_home(runtime.home, runtime.env)
    for m in parsed:
        log.record(principal=remote or principal, cap="mount", op="rw" if m.rw else "ro",
                   args_digest=digest(m.host.encode()), outcome="allowed",
                   target=f"{m.host} → {m.guest} for {what} at {tier}"
                   + (f" ({principal})" if remote else ""))
    return parsed
