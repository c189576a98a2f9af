"""``git+<url>@<commit>``: a pinned commit fetched by the core's one git fetcher, then built like ``path:``.

:mod:`wbcore_runtime.guard.gitfetch` does the fetch: the SSRF guard with the deployer's allowances
(``WB_ALLOW_PRIVATE_HOSTS`` / ``WB_ALLOW_PRIVATE_SOURCES``) and the connection pinned to the
checked address, only the URL's own transport, no system or global git config, hooks pointed
at nothing, no credential prompts, no submodules, no redirects, a deadline
(``WB_SOURCE_TIMEOUT``) and a cap on the bytes it leaves on disk (``WB_SOURCE_MAX_BYTES``).
"""

from __future__ import annotations

import re
from typing import Any

from wbcore_runtime.guard import gitfetch
from wbcore_runtime.build import ResolvedSource, SourceRequest, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.guard.netguard import NetGuard

from wbcore_sources.local import inside

COMMIT_RE = re.compile(r"^[0-9a-fA-F]{40}$")
SCHEMES = ("https://", "http://", "file://")


def parse(rest: str) -> tuple[str, str, str | None]:
    """(url, commit, sub-folder) of ``https://host/repo@<40-hex>[#sub/dir]``."""
    body, _, sub = rest.strip().partition("#")
    url, at, commit = body.rpartition("@")
    if not at or "/" in commit or not url:
        raise InvalidArgs(f"git+{rest} is not pinned: write git+<url>@<40-hex commit> (a branch or tag can "
                          "move)")
    if not COMMIT_RE.match(commit):
        raise InvalidArgs(f"git+{rest}: the pin {commit!r} must be a full 40-hex commit id, not a branch or "
                          "tag")
    if not url.startswith(SCHEMES):
        raise InvalidArgs(f"git+{rest}: only {', '.join(SCHEMES)} are fetched")
    if "@" in url or any(c.isspace() for c in url):
        raise InvalidArgs(f"git+{rest}: the URL must carry no credentials or spaces")
    return url, commit.lower(), sub or None


class GitSource:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.limits = gitfetch.GitLimits(max_bytes=int(env.get("WB_SOURCE_MAX_BYTES", 256 << 20)),
                                      timeout=float(env.get("WB_SOURCE_TIMEOUT", 120)))

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        url, commit, sub = parse(request.rest)
        repo = request.workdir / "git"
        gitfetch.checkout(url, repo, commit=commit, guard=NetGuard.from_env(self.env), limits=self.limits,
                          env=self.env, allow_file=True)
        target = inside(repo, sub, "the repository") if sub else repo
        if not target.is_dir():
            raise NotFound(f"git+{url}@{commit}: no folder {sub!r}")
        return ResolvedSource(digest=tree_digest(target), dir=target)


def git(runtime: Any) -> GitSource:
    return GitSource(dict(getattr(runtime, "env", {}) or {}))
