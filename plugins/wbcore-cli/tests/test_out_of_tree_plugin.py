"""pip-install a plugin from a folder outside the workspace; verify uses its shape."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wbcore_testing.fixtures import write_toolkit

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_pip_installed_plugin_serves_a_new_shape(tmp_path: Path):
    src = tmp_path / "src"
    shutil.copytree(HERE / "data" / "outside-plugin", src)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--target", str(target), str(src)],
        check=True,
    )
    root = tmp_path / "toolkits"
    write_toolkit(root, "proxy", exec="wasi-http", extra={"HANDLER": "handle"})
    env = dict(os.environ, PYTHONPATH=str(target), WB_HOME=str(tmp_path / "home"), WB_TOOLKITS_ROOT=str(root))
    wbx = [sys.executable, "-m", "wbcore_runtime"]
    out = subprocess.run([*wbx, "toolkit", "verify", "proxy"], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "✓ exec: wasi-http handler handle" in out.stdout
    listing = subprocess.run([*wbx, "plugins"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "wasi-http · wb-wasi-http-example 1.2.3 · ok" in listing.stdout
    # Without the plugin on the path the same toolkit's shape is unknown.
    env.pop("PYTHONPATH")
    out = subprocess.run([*wbx, "toolkit", "verify", "proxy"], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert out.returncode == 1 and "unknown EXEC shape 'wasi-http'" in out.stdout
