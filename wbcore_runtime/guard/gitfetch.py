"""The one git fetcher: every git repository wbcore checks out (``git+`` sources, git installs).

It runs the ``git`` command on a URL a manifest or a person named, so it is held to the same
rules as :mod:`wbcore_runtime.guard.fetch`:

- **The one SSRF guard.** An ``http(s)://`` URL's host is resolved and checked by the
  caller's :class:`wbcore_runtime.guard.netguard.NetGuard` (:meth:`NetGuard.from_env`: the
  deployer's ``WB_ALLOW_PRIVATE_HOSTS`` / ``WB_ALLOW_PRIVATE_SOURCES``), and git is told
  to connect to that checked address only (``http.curloptResolve``: curl's resolve
  override, so a DNS answer that changes between check and connect cannot move it; the
  ``Host`` header and the TLS name stay the URL's). Redirects are not followed
  (``http.followRedirects=false``): a hop could not be re-checked.
- **Only the transport the caller named.** ``protocol.allow=never`` with one exception: the
  URL's own scheme (``https``, ``http``, or ``file`` when the caller allows local
  repositories). A remote can never make git speak ``file://``, ``ext::``, ``ssh`` or
  ``git://`` (alternates, submodules and bundle URIs included).
- **Nothing configures git but this module**: no system or global config
  (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``, a fresh ``HOME``), no proxy
  or credential helper from the environment, no terminal prompt, hooks pointed at
  nothing, no submodules, objects checked as they arrive (``transfer.fsckObjects``).
- **Bounded**: one deadline for the whole fetch and checkout, every file git writes
  capped (``RLIMIT_FSIZE``), the commit's entries and bytes counted from the object store
  (streaming) *before* checkout writes any of them, so a small pack that expands is refused,
  and a stalled transfer ends (``http.lowSpeedLimit``).

The result is a plain folder (no ``.git``) at the pinned commit.
"""

from __future__ import annotations

import functools
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout
from wbcore_runtime.dispatch.audit import redact_target
from wbcore_runtime.guard.netguard import NetGuard, parse_literal

MiB = 1 << 20
DEFAULT_PORTS = {"http": 80, "https": 443}
FULL_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")
_PLAIN_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$|^[0-9a-f:.]+$")
#: ``http.curloptResolve`` (the pin) arrived in git 2.37; an older git would ignore it.
MIN_GIT = (2, 37)

#: Set on every git run: none of it can be changed by the repository or the environment.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.symlinks=true", "core.askPass=/bin/false",
    "credential.helper=", "submodule.recurse=false", "fetch.recurseSubmodules=false",
    "transfer.fsckObjects=true", "protocol.allow=never", "http.followRedirects=false",
    "http.lowSpeedLimit=1000", "http.lowSpeedTime=60", "advice.detachedHead=false",
    "transfer.bundleURI=false", "gc.auto=0", "maintenance.auto=false",
)


@dataclass(frozen=True, slots=True)
class GitLimits:
    max_bytes: int = 256 * MiB  # the checked-out tree, and any one file git writes
    max_files: int = 20000
    timeout: float = 300.0  # the whole fetch and checkout


@dataclass(frozen=True, slots=True)
class Target:
    """A checked git URL: its scheme and, for http(s), the host and port to pin."""

    url: str
    scheme: str
    host: str = ""
    port: int = 0


def check_url(url: str, *, allow_file: bool) -> Target:
    """The URL's scheme, host and port, or a clear refusal (credentials, spaces, other transports)."""
    schemes = ("https", "http", "file") if allow_file else ("https", "http")
    shown = ", ".join(f"{s}://" for s in schemes)
    if not url or url.startswith("-") or any(c.isspace() or ord(c) < 32 for c in url):
        raise InvalidArgs(f"git URL {url!r}: must not be empty, start with '-' or hold spaces; "
                          f"only {shown} are fetched")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in schemes or "::" in url.split("/", 1)[0]:
        raise InvalidArgs(f"git URL {redact_target(url)}: only {shown} are fetched "
                          "(never ext::, ssh or git://)")
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidArgs(f"git URL {url}: a file:// URL names an absolute local path (file:///path/to/repo)")
        return Target(url, scheme)
    if parts.username or parts.password or "@" in parts.netloc:
        raise InvalidArgs(f"git URL {redact_target(url)}: credentials in the URL are not allowed")
    host = parts.hostname or ""
    if not host:
        raise InvalidArgs(f"git URL {url}: names no host")
    if not _PLAIN_HOST.match(host) and not host.startswith("["):
        # The pin is matched by name inside curl: a name curl would rewrite (IDNA, a trailing
        # dot) could miss it and be resolved again, so only the plain ASCII form is taken.
        raise InvalidArgs(f"git URL {url}: write the host in plain ASCII (punycode for IDNA), "
                          "without a trailing dot")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise InvalidArgs(f"git URL {url}: bad port") from None
    return Target(url, scheme, host, port)


def _env(home: Path, env: Mapping[str, str]) -> dict[str, str]:
    """A clean environment: no proxies, credentials, config or prompts from the caller's."""
    clean = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "LC_ALL": "C",
    }
    # The deployer's CA (a TLS-intercepting proxy), as the HTTP fetcher honours it.
    for ours, theirs in (("SSL_CERT_FILE", "GIT_SSL_CAINFO"), ("SSL_CERT_DIR", "GIT_SSL_CAPATH")):
        value = env.get(ours) or os.environ.get(ours)
        if value:
            clean[theirs] = value.split(os.pathsep)[0] if ours == "SSL_CERT_DIR" else value
    return clean


class _Run:
    """git with the safe config, one deadline and a per-file size cap."""

    def __init__(self, target: Target, pin_ip: str, env: dict[str, str], limits: GitLimits) -> None:
        self.config = [*SAFE_CONFIG, f"protocol.{target.scheme}.allow=always"]
        if target.scheme != "file" and parse_literal(target.host) is None:
            # A name: curl connects to the checked address only. (An address literal is
            # connected to as written, and it is what the guard checked.)
            ip = f"[{pin_ip}]" if ":" in pin_ip else pin_ip
            self.config.append(f"http.curloptResolve={target.host}:{target.port}:{ip}")
        self.env = env
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout

    def _cap(self) -> None:
        # In the child between fork and exec: one C call on a module imported at load time.
        # (Never below 1 MiB: git's own config and index files must fit.)
        cap = max(self.limits.max_bytes, MiB)
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))

    def __call__(self, args: list[str], cwd: Path) -> str:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Timeout(f"git {args[0]}: the fetch did not finish within {self.limits.timeout:g}s")
        argv = ["git"]
        for item in self.config:
            argv += ["-c", item]
        try:
            done = subprocess.run([*argv, *args], cwd=cwd, env=self.env, capture_output=True, timeout=left,
                                  check=False, stdin=subprocess.DEVNULL, preexec_fn=self._cap)
        except FileNotFoundError:
            raise NotFound("git sources need the git command (apt-get install git)") from None
        except subprocess.TimeoutExpired:
            raise Timeout(f"git {args[0]}: the fetch did not finish within "
                          f"{self.limits.timeout:g}s") from None
        if done.returncode != 0:
            why = done.stderr.decode("utf-8", "replace").strip()[-600:]
            raise NotFound(f"git {args[0]} failed: {why}")
        return done.stdout.decode("utf-8", "replace").strip()


    def bound_tree(self, commit: str, cwd: Path, what: str) -> None:
        """Count the commit's entries and bytes from the object store, streaming, so a tree
        that would fill the disk (a small pack that expands) is refused before checkout."""
        argv = ["git"]
        for item in self.config:
            argv += ["-c", item]
        proc = subprocess.Popen([*argv, "ls-tree", "-r", "-t", "-l", "-z", "--full-tree", commit], cwd=cwd,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        out = proc.stdout
        assert out is not None
        entries = size = 0
        over = ""
        try:
            pending = b""
            for chunk in iter(lambda: out.read(1 << 16), b""):
                *records, pending = (pending + chunk).split(b"\0")
                for record in records:
                    entries += 1
                    fields = record.split(b"\t", 1)[0].split()
                    if len(fields) == 4 and fields[3].isdigit():
                        size += int(fields[3])
                if entries > self.limits.max_files:
                    over = f"{what}: more than {self.limits.max_files} entries"
                elif size > self.limits.max_bytes:
                    over = f"{what}: over the {self.limits.max_bytes}-byte cap"
                elif time.monotonic() > self.deadline:
                    over = "timeout"
                if over:
                    break
        finally:
            proc.kill()
            proc.wait()
        if over == "timeout":
            raise Timeout(f"git ls-tree: the fetch did not finish within {self.limits.timeout:g}s")
        if over:
            raise InvalidArgs(over)


@functools.lru_cache(maxsize=4)
def _git_version(path: str) -> tuple[int, int]:
    try:
        said = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                              check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return (0, 0)
    found = re.search(r"(\d+)\.(\d+)", said)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def _check_git(target: Target) -> None:
    found = shutil.which("git")
    if found is None:
        raise NotFound("git sources need the git command (apt-get install git)")
    if target.scheme != "file" and _git_version(found) < MIN_GIT:
        have = ".".join(map(str, _git_version(found)))
        raise NotFound(f"git {have} cannot pin its connection to the checked address "
                       f"(http.curloptResolve needs git {MIN_GIT[0]}.{MIN_GIT[1]} or newer); "
                       f"upgrade git to fetch {target.url}")


def _measure(tree: Path, limits: GitLimits, what: str) -> None:
    # The containment walk (openat + O_NOFOLLOW, links as text): a checkout's links are
    # counted, never followed; it counts every entry against max_files itself.
    size = 0
    try:
        for node in paths.walk(tree, label=what, max_files=limits.max_files):
            size += os.fstat(node.fd).st_size if node.kind == "file" else len(node.target)
            if size > limits.max_bytes:
                raise InvalidArgs(f"{what}: over the {limits.max_bytes}-byte cap")
    except paths.Refused as exc:
        if f"more than {limits.max_files} files" in exc.reason:
            raise InvalidArgs(f"{what}: more than {limits.max_files} entries") from None
        raise


def checkout(
    url: str,
    dest: Path,
    *,
    commit: str | None,
    guard: NetGuard,
    limits: GitLimits = GitLimits(),
    env: Mapping[str, str] | None = None,
    allow_file: bool = False,
) -> str:
    """Check out ``commit`` of ``url`` into ``dest`` (a new folder, left without ``.git``).

    ``commit``: a full commit id, or an abbreviated one (7+ hex; the remote's branches and
    tags are searched), or None for the remote's ``HEAD`` (only when the caller allows it:
    installs from a local repository). Returns the full commit id checked out. Refusals:
    ``capability-denied`` (the SSRF guard), ``invalid-args`` (the URL, a cap),
    ``not-found`` (git failed, or the commit is not there), ``timeout``.
    """
    seen = os.environ if env is None else env
    target = check_url(url, allow_file=allow_file)
    if commit is not None:
        commit = commit.lower()
        if not COMMIT_RE.match(commit):
            raise InvalidArgs(f"{url}: {commit!r} is not a commit id (7 to 64 hex digits)")
    pin_ip = guard.pin(target.host, target.port).ip if target.scheme != "file" else ""
    _check_git(target)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".git-home-", dir=dest.parent) as home:
        run = _Run(target, pin_ip, _env(Path(home), seen), limits)
        dest.mkdir()
        run(["init", "-q", "--template=", "."], dest)
        fetch = ["fetch", "-q", "--no-tags", "--no-recurse-submodules", "--no-auto-gc", "--", url]
        if commit is None:
            run([*fetch[:-2], "--depth", "1", "--", url, "HEAD"], dest)
            want = "FETCH_HEAD"
        else:
            want = commit
            try:
                if not FULL_COMMIT_RE.match(commit):
                    raise NotFound("an abbreviated id cannot be asked for by name")
                run([*fetch[:-2], "--depth", "1", "--", url, commit], dest)
            except NotFound:
                # Servers that refuse a want by id, and abbreviated ids: fetch every branch and
                # tag, then look for the commit among them.
                run([*fetch, "+refs/heads/*:refs/remotes/src/heads/*",
                     "+refs/tags/*:refs/remotes/src/tags/*"], dest)
        try:
            resolved = run(["rev-parse", "--verify", "--quiet", f"{want}^{{commit}}"], dest)
        except NotFound:
            raise NotFound(f"git checkout failed: commit {commit} is not in {url}") from None
        run.bound_tree(resolved, dest, f"{url}@{resolved}")  # before a byte of the tree is written
        run(["checkout", "-q", "--detach", resolved], dest)
        got = run(["rev-parse", "HEAD"], dest).lower()
        if commit is not None and not got.startswith(commit):
            raise InvalidArgs(f"{url}: checked out {got}, not the pinned {commit}")
        shutil.rmtree(dest / ".git")
    _measure(dest, limits, f"{url}@{got}")
    return got
