"""The install contract: what ``wbx toolkit install`` and the other surfaces ask of the installer.

The installer (sources fetched, staged and verified under ``$WB_HOME/.staging``, landed with
``wbx.lock`` through a journal, all or nothing; ``install --locked``; uninstall) is an engine: a
plugin serves it through ``wbcore_installers`` (``wbcore-install``), and a caller takes it with
:func:`service`. The core keeps the records a caller reads (a parsed source, a lock entry, what
landed, what a dry run would change) and the names under the home the sweep of leftovers knows
(``store.leftovers``: ``STAGING``, ``STAGING_PREFIX``, ``JOURNAL``).

A served installer verifies through the core (``trust.verdict``, ``trust.signing``), fetches
through its one fetcher and SSRF guard (``guard.fetch``, ``guard.gitfetch``) and unpacks with
``guard.unpack``; an ``oci://`` source is pulled by ``contract.distribution``'s client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from wbcore_runtime.contract import distribution as _dist
from wbcore_runtime.contract.host import Choice

ENV_CHOICE = "WB_INSTALLER"
NONE_INSTALLED = "no toolkit installer is installed; pip install wbcore-install"


@dataclass(frozen=True, slots=True)
class Source:
    """An install source, parsed: ``kind`` is "dir", "git", "archive" or "oci"."""

    kind: str
    location: str  # path, clone URL, archive URL/path or OCI reference
    commit: str | None = None
    sha256: str | None = None

    def text(self, commit: str | None = None) -> str:
        if self.kind == "git":
            pin = commit or self.commit
            return f"git+{self.location}" + (f"@{pin}" if pin else "")
        if self.kind == "oci" and commit:
            return _dist.Reference.parse(self.location).pinned(commit).text()  # the manifest digest pins it
        return self.location


@dataclass(frozen=True, slots=True)
class LockEntry:
    """One toolkit in ``wbx.lock``: id, version, pinned source, content digest (per
    ``trust.signing``), trust, signer."""

    id: str
    version: str
    source: str
    digest: str
    trust: str
    signer: str | None = None
    sha256: str | None = None  # the archive's pin, for archive sources
    path: str = ""  # where inside the fetched tree the toolkit sat ("" = its root)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


@dataclass(frozen=True, slots=True)
class Installed:
    """A toolkit an install landed (or found already there: ``unchanged``)."""

    entry: LockEntry
    path: Path
    caps: tuple[str, ...]
    unchanged: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    """What installing one staged toolkit would change (``install --dry-run``, ``wbx toolkit
    push --dry-run``): caps, trust and signer against what is installed now."""

    id: str
    action: str  # "new", "replace", "unchanged", "refused"
    version: tuple[str | None, str]
    caps: tuple[tuple[str, ...] | None, tuple[str, ...]]
    trust: tuple[str | None, str]
    signer: tuple[str | None, str | None]
    why: str = ""
    #: Deployer environment variables the incoming manifest reads (each needs a grant naming it).
    env: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The diff as text: ``-`` what goes, ``+`` what comes, per field."""
        out = [f"{self.action} {self.id} {self.version[1]}"
               + (f" (installed: {self.version[0]})" if self.version[0] else "")
               + (f": {self.why}" if self.why else "")]
        old_caps, new_caps = self.caps
        if old_caps is None:
            out.append(f"  caps: + {' '.join(new_caps) or '(none)'}")
        else:
            gone, come = sorted(set(old_caps) - set(new_caps)), sorted(set(new_caps) - set(old_caps))
            if gone or come:
                out.append("  caps: " + " ".join([*(f"-{c}" for c in gone), *(f"+{c}" for c in come)]))
            else:
                out.append(f"  caps: unchanged ({' '.join(new_caps) or 'none'})")
        for field_name, (old, new) in (("trust", self.trust), ("signer", self.signer)):
            if old != new:
                out.append(f"  {field_name}: {old or '(none)'} -> {new or '(none)'}")
        if self.env:
            names = " ".join(self.env)
            out.append(f"  env: reads the deployer's {names} (sent nowhere until granted: "
                       f"wbx toolkit grant {self.id} " + " ".join(f"--env {v}" for v in self.env) + ")")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "action": self.action, "version": list(self.version),
                "caps": {"installed": list(self.caps[0]) if self.caps[0] is not None else None,
                         "incoming": list(self.caps[1])},
                "trust": list(self.trust), "signer": list(self.signer), "why": self.why,
                "env": list(self.env), "diff": self.lines()}


class Installer(Protocol):
    """What ``InstallerService.factory(runtime)`` returns (``wbcore-install``). Every refusal is
    an ``InvalidArgs`` (or ``NotFound``) and leaves the user root and ``wbx.lock`` as they were."""

    def parse_source(self, text: str, sha256: str | None = None) -> Source:
        """A folder, ``git+…[@commit]``, an archive (path or URL with ``sha256``) or ``oci://…``."""
        ...

    def fetch(self, source: Source, work: Path, env: Mapping[str, str] | None = None,
              distribution: _dist.Client | None = None) -> tuple[Path, str | None, str | None]:
        """Bring the source into ``work/tree``; returns (tree, resolved commit, archive sha256)."""
        ...

    def install(self, home: Path, source_text: str, *, sha256: str | None = None, force: bool = False,
                env: Mapping[str, str] | None = None, first_party: bool = False,
                distribution: _dist.Client | None = None) -> list[Installed]:
        """Install every toolkit of one source into ``home``; all of them land, or none."""
        ...

    def preview(self, home: Path, source_text: str, *, sha256: str | None = None, force: bool = False,
                env: Mapping[str, str] | None = None, first_party: bool = False,
                distribution: _dist.Client | None = None) -> list[Change]:
        """What :meth:`install` would do with the same arguments, landing nothing."""
        ...

    def install_locked(self, home: Path, lockfile: Path | None = None, *,
                       env: Mapping[str, str] | None = None,
                       distribution: _dist.Client | None = None) -> list[Installed]:
        """Reproduce exactly the set in the lockfile; any drift fails and nothing lands."""
        ...

    def uninstall(self, home: Path, ident: str) -> LockEntry | None:
        """Remove an installed toolkit and its lock entry together; returns the entry it had."""
        ...

    def recover(self, home: Path) -> str | None:
        """Finish or undo a landing a kill interrupted (``store.leftovers.JOURNAL``); None when
        there is none, or when another process's landing is live."""
        ...


#: An installer asked for only when needed (a remote source, a journal to replay).
Client = Callable[[], Installer]


#: ``service(runtime, name)``: the installer to use (``contract.host.Choice``).
service: Choice[Installer] = Choice(lambda r: r.installers, ENV_CHOICE,
                                    ("toolkit installer", "toolkit installers"), NONE_INSTALLED)
