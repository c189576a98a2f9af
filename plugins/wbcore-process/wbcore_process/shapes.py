"""The task shape and its verify contract (seed 000). The posix shape is wbcore-container's: it runs
only in the container tier."""

from __future__ import annotations

import re
from collections.abc import Iterator

from wbcore_runtime.contract.records import Check, ExecShape, VerifyContext

TASK_BLOCK_RE = re.compile(r"^[ \t]*#\+begin_src\b[^\n]*:role[ \t]+task\b", re.IGNORECASE | re.MULTILINE)


def verify_task(ctx: VerifyContext) -> Iterator[Check]:
    tk = ctx.toolkit
    texts = [tk.manifest.path] + [s.path for s in tk.skills]
    blocks = 0
    for path in texts:
        try:
            blocks += len(TASK_BLOCK_RE.findall(path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    yield Check(True, "exec", f"task recipes: {blocks} :role task block(s); structural check only")
    if blocks:
        yield Check(
            True, "exec",
            "native :role bash execution is banned on the host; task blocks run via wbx toolkit run <tk> "
            "<task> only with WB_TOOLKIT_EXEC=1, inside a sandbox tier (container or stronger)",
            warning=True,
        )


def shapes() -> Iterator[ExecShape]:
    yield ExecShape(
        name="task",
        summary="recipe-only toolkit: :role task blocks, no single CLI",
        verify=verify_task,
        default_tier="container",
    )
