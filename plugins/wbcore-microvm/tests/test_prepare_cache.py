"""``python -m wbcore_microvm prepare`` fills the cache the tier reads (issue: it wrote one and
the tier read another, so the first call after it still booted cold)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_microvm import __main__ as cli
from wbcore_microvm import image, tiers


@pytest.fixture
def no_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stop right after the cache is chosen: this test is about where, not about booting.
    monkeypatch.setattr(tiers, "_probe_tools", lambda: (False, "stopped by the test"))


def test_prepare_defaults_to_the_homes_tier_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], no_tools: None) -> None:
    monkeypatch.setenv("WB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WB_MICROVM_CACHE", raising=False)
    assert cli.main(["prepare"]) == 1
    out = capsys.readouterr().out
    want = image.cache_root(tmp_path / "home", {})
    assert want == tmp_path / "home" / "tiers" / "microvm"
    assert f"microvm: cache {want} (in the home {tmp_path / 'home'}" in out


def test_prepare_follows_wb_microvm_cache_as_the_tier_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str],
                                                           no_tools: None) -> None:
    monkeypatch.setenv("WB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WB_MICROVM_CACHE", str(tmp_path / "shared"))
    assert cli.main(["prepare"]) == 1
    assert f"microvm: cache {tmp_path / 'shared'} (from $WB_MICROVM_CACHE)" in capsys.readouterr().out
    assert image.cache_root(tmp_path / "home",
                            {"WB_MICROVM_CACHE": str(tmp_path / "shared")}) == tmp_path / "shared"
