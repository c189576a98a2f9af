"""Entry point of wbcore-agent: the agent loop engine. Nothing heavy at import."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import AgentLoop


class Loop:
    """``runtime.agents``: runs (``run``), sessions, promotion of session toolkits, and the
    agent definitions they run (``load``, ``parse``, ``prompt``)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def run(self, agent: Any, task: str | None, **kw: Any) -> Any:
        from wbcore_agent.loop import run_agent

        return run_agent(self.runtime, agent, task, **kw)

    def load(self, path: Path | str) -> Any:
        """The agent defined in an ``.org`` file (a ``wbcore_agent.definitions.AgentDef``)."""
        from wbcore_agent import definitions

        return definitions.load(path)

    def parse(self, text: str, where: Path | str | None = None) -> Any:
        """The agent an Org text defines; ``where`` names it in errors."""
        from wbcore_agent import definitions

        return definitions.parse(text, where)

    def prompt(self, agent: Any) -> str:
        """The agent's system prompt with its toolkit index, as a shell reads skills
        (``wbx agent prompt``; the loop's own run reads them through its ``wb`` tool)."""
        from wbcore_agent import definitions
        from wbcore_runtime.trust import verdict

        return definitions.prompt(agent, self.runtime.discover(),
                                  lambda tk: verdict.unavailable_reason(tk, self.runtime))

    @cached_property
    def sessions(self) -> Any:
        from wbcore_agent.sessions import Sessions

        return Sessions(self.runtime)

    def promote(self, run_id: str, toolkit: str, *, to: str = "workspace", tenant: str = "dev",
                by: str = "deployer") -> Any:
        """``to="workspace"``: signed archive out of the run's VFS; ``to="installed"``:
        through the install path's verify-then-land, then built (``wbcore_agent.promote``)."""
        from wbcore_agent import promote
        from wbcore_runtime.contract.errors import InvalidArgs

        if to == "workspace":
            return promote.to_workspace(self.runtime, run_id, toolkit, tenant=tenant, by=by)
        if to == "installed":
            return promote.to_installed(self.runtime, toolkit, by=by)
        raise InvalidArgs(f"promote: to must be workspace or installed, not {to!r}")


@hookimpl
def wbcore_agent_loops() -> Iterator[AgentLoop]:
    yield AgentLoop(name="wb", summary="LLM ↔ tools ↔ VFS loop, sessions, session toolkits", factory=Loop)
