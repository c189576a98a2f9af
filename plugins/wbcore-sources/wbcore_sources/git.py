"""``git+<url>@<commit>``: a pinned commit fetched with the git CLI, then built like ``path:``.

The fetch runs in a fresh repository this module creates, with no system or global git
config, hooks pointed at nothing, no credential prompts, only the https/http/file
transports (never ``ext::`` or ``ssh``), no submodules, a deadline, and a cap on the
bytes it leaves on disk. Nothing from the fetched repository configures git.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from wbcore_runtime.build import ResolvedSource, SourceRequest, tree_digest
from wbcore_runtime.errors import InvalidArgs, NotFound, Timeout

from wbcore_sources.local import inside

COMMIT_RE = re.compile(r"^[0-9a-fA-F]{40}$")
SCHEMES = ("https://", "http://", "file://")


def parse(rest: str) -> tuple[str, str, str | None]:
    """(url, commit, sub-folder) of ``https://host/repo@<40-hex>[#sub/dir]``."""
    body, _, sub = rest.strip().partition("#")
    url, at, commit = body.rpartition("@")
    if not at or "/" in commit or not url:
        raise InvalidArgs(f"git+{rest} is not pinned: write git+<url>@<40-hex commit> (a branch or tag can move)")
    if not COMMIT_RE.match(commit):
        raise InvalidArgs(f"git+{rest}: the pin {commit!r} must be a full 40-hex commit id, not a branch or tag")
    if not url.startswith(SCHEMES):
        raise InvalidArgs(f"git+{rest}: only {', '.join(SCHEMES)} are fetched")
    if "@" in url or any(c.isspace() for c in url):
        raise InvalidArgs(f"git+{rest}: the URL must carry no credentials or spaces")
    return url, commit.lower(), sub or None


def _env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "GIT_ALLOW_PROTOCOL": "https:http:file",
        "LC_ALL": "C",
    }


SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.symlinks=true", "-c", "core.fsmonitor=false",
        "-c", "protocol.file.allow=always", "-c", "submodule.recurse=false", "-c", "transfer.fsckObjects=true"]


class GitSource:
    def __init__(self, env: dict[str, str]) -> None:
        self.timeout = float(env.get("WB_SOURCE_TIMEOUT", 120))
        self.max_bytes = int(env.get("WB_SOURCE_MAX_BYTES", 256 << 20))

    def _git(self, args: list[str], cwd: Path, env: dict[str, str]) -> str:
        if shutil.which("git") is None:
            raise NotFound("git+ sources need the git command (apt-get install git)")
        try:
            res = subprocess.run(["git", *SAFE, *args], cwd=cwd, env=env, capture_output=True, timeout=self.timeout,
                                 stdin=subprocess.DEVNULL, preexec_fn=self._limit)
        except subprocess.TimeoutExpired:
            raise Timeout(f"git {args[0]} did not finish within {self.timeout:g}s") from None
        if res.returncode != 0:
            msg = res.stderr.decode("utf-8", "replace").strip()[-2000:]
            raise NotFound(f"git {args[0]} failed: {msg}")
        return res.stdout.decode("utf-8", "replace")

    def _limit(self) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (self.max_bytes, self.max_bytes))

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        url, commit, sub = parse(request.rest)
        repo = request.workdir / "git"
        if repo.exists():
            shutil.rmtree(repo)
        repo.mkdir(parents=True)
        gh = request.workdir / "git-home"
        gh.mkdir(exist_ok=True)
        env = _env(gh)
        self._git(["init", "-q", "--template=", "."], repo, env)
        try:
            self._git(["fetch", "-q", "--no-tags", "--depth", "1", "--no-recurse-submodules", url, commit], repo, env)
        except NotFound:
            # Servers that refuse a want by id: fetch their branches, then look for the commit.
            self._git(["fetch", "-q", "--no-tags", "--no-recurse-submodules", url, "+refs/heads/*:refs/remotes/src/*"], repo, env)
        try:
            self._git(["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit], repo, env)
        except NotFound:
            raise NotFound(f"git+{url}: commit {commit} is not in that repository") from None
        got = self._git(["rev-parse", "HEAD"], repo, env).strip()
        if got != commit:
            raise InvalidArgs(f"git+{url}: checked out {got}, not the pinned {commit}")
        shutil.rmtree(repo / ".git")
        size = sum(p.stat().st_size for p in repo.rglob("*") if p.is_file() and not p.is_symlink())
        if size > self.max_bytes:
            raise InvalidArgs(f"git+{url}@{commit}: {size} bytes is over the {self.max_bytes}-byte cap")
        target = inside(repo, sub, "the repository") if sub else repo
        if not target.is_dir():
            raise NotFound(f"git+{url}@{commit}: no folder {sub!r}")
        return ResolvedSource(digest=tree_digest(target), dir=target)


def git(runtime: Any) -> GitSource:
    return GitSource(dict(getattr(runtime, "env", {}) or {}))
