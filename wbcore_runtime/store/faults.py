"""Fault injection for crash-safety tests: ``WB_FAULT_AT=<step>`` SIGKILLs the process at that step.

The steps are named where state lands (wbcore-install's ``wbcore_install/journal.py``: ``land:*``;
``wbcore_runtime/store/artifacts.py``'s ``write:*``); ``tests/integration/test_crash_safety.py`` runs
an install or a build in a subprocess once per step and checks that the home holds the old state
or the new one and nothing else once the next command ran. Unset (always, outside those tests), a
step costs one dictionary lookup.
"""

from __future__ import annotations

import os

ENV = "WB_FAULT_AT"


def point(step: str) -> None:
    """Die here, as a power cut or ``kill -9`` would, when ``WB_FAULT_AT`` names this step."""
    if os.environ.get(ENV) == step:
        import signal  # only when dying: every command imports this module

        os.kill(os.getpid(), signal.SIGKILL)
