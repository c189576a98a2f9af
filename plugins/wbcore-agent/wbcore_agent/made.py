"""Toolkits an agent makes (issue 15 item 8): written into the run's VFS, built through
the ``build`` cap, registered for that run only.

``wb`` op ``build`` with ``path`` = a folder in the run's VFS holding ``manifest.org``
(``#+EXEC: command``, ``#+BUILD_LANG``, ``#+BUILD_SRC: path:<file or folder>``,
``#+CLI_BIN``), its source and optional ``skills/*.org``. The source goes to the Dock's
``build`` broker (the cadence, the lane's sandbox, the caps on size and count); the
artifact is kept in this run's own table — never the command registry — so no other
run, session, MCP client or ``wbx run`` sees it. It runs first-party but capped by the
run's profile: caps = profile ∩ ``#+CAPS`` (``wbcore_runtime.trust.consent.effective_caps``), through
``wbcore_runtime.dispatch.dispatcher.call_artifact``. An id already used by an installed toolkit is refused
(a session toolkit never shadows one). Promotion is explicit: ``wbcore_agent.promote``.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, WbError

if TYPE_CHECKING:
    from wbcore_agent.loop import Run

MAX_MADE = 16
MANIFEST = "manifest.org"


@dataclass(frozen=True, slots=True)
class MadeToolkit:
    id: str
    tagline: str
    vfs_path: str
    sha256: str
    lane: str
    cli_bin: str
    caps: tuple[str, ...]
    skills: Mapping[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "skills": dict(self.skills), "session_local": True}

    def tool_names(self) -> list[str]:
        return [f"{self.id}.{self.cli_bin}"]

    def tools(self, runtime: Any) -> list[tuple[str, dict[str, Any], str]]:
        """``(cli_bin, JSON Schema, description)``: the same schema MCP gives a command (the
        runtime's tool service, ``wbcore-act``, reads the skill's ``#+ARG:`` lines)."""
        from wbcore_runtime.contract import tools

        text = self.skills.get(self.cli_bin) or self.skills.get("overview") or ""
        desc = (
            f"{self.tagline} (session-local toolkit {self.id}: runs `{self.cli_bin}`: argv + stdin → stdout)"
        )
        return [(self.cli_bin, tools.service(runtime).command_schema(text), desc)]


class MadeToolkits:
    def __init__(self, run: Run) -> None:
        self.run = run
        self._made: dict[str, MadeToolkit] = {}

    def list(self) -> list[MadeToolkit]:
        return list(self._made.values())

    def get(self, ident: str) -> MadeToolkit | None:
        return self._made.get(ident)

    def state(self) -> builtins.list[dict[str, Any]]:  # builtins: the method list shadows it here
        return [m.as_dict() for m in self._made.values()]

    def restore(self, rows: builtins.list[dict[str, Any]]) -> None:
        for r in rows:
            r = {k: v for k, v in r.items() if k != "session_local"}
            r["caps"] = tuple(r.get("caps") or ())
            self._made[r["id"]] = MadeToolkit(**r)

    def build(self, run: Run, path: str) -> MadeToolkit:
        from wbcore_runtime.toolkit import manifest as _manifest

        prefix = path.strip("/")
        if not prefix:
            raise InvalidArgs("wb build: 'path' is the VFS folder holding manifest.org")
        entries = [e["path"] for e in run.vfs_list(prefix + "/")]
        if f"{prefix}/{MANIFEST}" not in entries:
            raise NotFound(f"wb build: no {prefix}/{MANIFEST} in the VFS (write it with vfs_write first)")
        text = run.vfs_read(f"{prefix}/{MANIFEST}").decode("utf-8", "replace")
        m = _manifest.parse(text, f"vfs:{prefix}/{MANIFEST}")
        if (
            m.exec != "command"
            or not m.build_lang
            or not m.cli_bin
            or not (m.build_src or "").startswith("path:")
        ):
            raise InvalidArgs(
                "wb build: a session toolkit needs #+EXEC: command, #+BUILD_LANG, #+CLI_BIN and "
                "#+BUILD_SRC: path:<file or folder>"
            )
        try:
            run.runtime.toolkit(m.id)
        except WbError:
            pass
        else:
            raise CapabilityDenied(
                f"wb build: {m.id!r} is an installed toolkit; a session toolkit may not shadow it "
                "(choose another #+TOOLKIT id)"
            )
        if m.id not in self._made and len(self._made) >= MAX_MADE:
            raise InvalidArgs(f"wb build: a run may make at most {MAX_MADE} toolkits")
        src = (m.build_src or "")[len("path:"):].strip().strip("/") or "."
        files: dict[str, bytes] = {}
        skills: dict[str, str] = {}
        for full in entries:
            rel = full[len(prefix) + 1:]
            if rel == MANIFEST:
                continue
            data = run.vfs_read(full)
            if rel.startswith("skills/") and rel.endswith(".org"):
                skills[rel[len("skills/"):-len(".org")]] = data.decode("utf-8", "replace")
            else:
                files[rel] = data
        entry = src if src in files else None
        if entry is None and src != "." and not any(r.startswith(src + "/") for r in files):
            raise NotFound(f"wb build: #+BUILD_SRC path:{src} is not among the files under {prefix}/")
        got = run.dock(
            "build", "compile", {"lang": m.build_lang, "files": files, **({"entry": entry} if entry else {})}
        )
        made = MadeToolkit(
            id=m.id, tagline=m.tagline, vfs_path=prefix, sha256=got["sha256"], lane=m.build_lang,
            cli_bin=m.cli_bin, caps=tuple(m.caps), skills=skills,
        )
        self._made[m.id] = made
        self.run.runtime.dock.audit.record(principal=run.principal.key, cap="agent", op="session-toolkit",
                                           args_digest=made.sha256, outcome="allowed",
                                           target=f"session:{run.run_id}:{made.id}")
        return made

    def call(self, ident: str, bin_name: str, args: Mapping[str, Any]) -> str:
        from wbcore_runtime.trust import consent, policy
        from wbcore_runtime.dispatch import dispatcher as dispatch
        from wbcore_runtime.contract import tools

        made = self._made.get(ident)
        if made is None or made.cli_bin != bin_name:
            raise NotFound(f"no session toolkit {ident}.{bin_name} in run {self.run.run_id}")
        text = made.skills.get(made.cli_bin) or made.skills.get("overview") or ""
        argv, stdin = tools.service(self.run.runtime).command_argv(f"{ident}.{bin_name}", text, args)
        prof = policy.profile(self.run.profile)
        caps = consent.effective_caps(self.run.runtime.home, toolkit_id=f"session:{self.run.run_id}:{ident}",
                                      trust="first-party", signer=None, declared=made.caps, profile=prof)
        res = dispatch.call_artifact(
            self.run.runtime, name=f"local-{ident}", sha256=made.sha256, lane=made.lane, argv=argv,
            stdin=stdin, principal=self.run.principal, timeout=min(self.run.call_timeout(), prof.timeout_s),
            profile=prof.name, trust="first-party", caps=caps,
        )
        out = res.stdout.decode("utf-8", "replace")
        if res.exit_code != 0:
            raise WbError(
                f"{bin_name} exited with code {res.exit_code}: "
                f"{res.stderr.decode('utf-8', 'replace')[-2000:]}"
            )
        return out

