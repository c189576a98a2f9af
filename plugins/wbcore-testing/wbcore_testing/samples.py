"""Sample content the core's tests and the CLI's share: an agent definition and an audit trail."""

from __future__ import annotations

from wbcore_runtime.dispatch.audit import AuditLog

#: An agent definition with a decoy node before it, a ghost toolkit in its list and a system prompt
#: heading with a sub-heading (kept) and a sibling (dropped).
AGENT = """\
#+TITLE: Research helper

* Notes
Not the agent.

* Researcher :agent:
  :PROPERTIES:
  :ID: researcher
  :MODEL: gpt-test
  :TOOLKITS: beta ghost alpha
  :TAGLINE: Finds things.
  :END:
Body text that is not the prompt.
** System prompt
You are careful.
*** Rules
Cite sources.
** Other
Ignored.
"""


def fill_audit(log: AuditLog, n: int) -> None:
    """``n`` allowed ``kv.get`` entries by ``t/p``, flushed."""
    for _ in range(n):
        log.record(principal="t/p", cap="kv", op="get", args_digest="sha256:x", outcome="allowed",
                   nbytes=1, ms=0.1)
    log.flush()
