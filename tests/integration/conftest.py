"""Integration tests: the core with plugins installed (every test here is marked ``integration``).

``tests/core`` passes with only the core distribution installed; these need the plugins
they exercise (``python3 dev.py test`` installs all of them).
"""

from __future__ import annotations

import pytest

from wbcore_testing.oci_images import allowed_registry  # noqa: F401


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def real_llm_env():
    """The ``WB_LLM_*`` settings of a real model server: the deployer's (``WB_LLM_BASE_URL``
    set), else the local one of wbcore-llm-local, started on loopback for the session and
    stopped after it; skips, saying why, when neither is to be had."""
    import os

    if os.environ.get("WB_LLM_BASE_URL"):
        env = {k: v for k, v in os.environ.items() if k.startswith("WB_LLM_")}
        env.setdefault("WB_LLM_PROVIDER", "openai")
        yield env
        return
    try:
        from wbcore_llm_local.server import LocalServer
    except ImportError:
        pytest.skip("no real model server: WB_LLM_BASE_URL is unset and wbcore-llm-local is not installed "
                    "(see docs/agents.md, 'A real local model')")
    with LocalServer() as srv:
        yield srv.settings()
