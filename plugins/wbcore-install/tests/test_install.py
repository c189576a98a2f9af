"""``wbx toolkit install``: concurrent installs keep one lock; how sources parse."""

from __future__ import annotations

import json

import pytest

from wbcore_install import install
from wbcore_testing.toolkit_sources import SEED0_B64


# --- --locked -------------------------------------------------------------------------


def test_parallel_installs_keep_one_consistent_lock(src, wb_home):
    from concurrent.futures import ThreadPoolExecutor

    env = {"WB_SIGNING_KEY": SEED0_B64}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: install.install(wb_home, str(src / p), env=env), ["tp", "fp"]))
    lock = json.loads((wb_home / "wbx.lock").read_text())["toolkits"]
    assert sorted(lock) == ["fp", "tp"]


def test_plain_git_urls_are_git_sources():
    src = install.parse_source("https://example.invalid/tk.git@" + "a" * 40)
    assert (src.kind, src.location, src.commit) == ("git", "https://example.invalid/tk.git", "a" * 40)
    with pytest.raises(Exception, match="pin a commit"):
        install.parse_source("https://example.invalid/tk.git")
