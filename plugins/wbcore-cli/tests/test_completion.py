"""``wbx --install-completion`` / ``--show-completion`` (typer's completion) and the
completion protocol itself, in a real process (the options exit the interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WBX = str(Path(sys.executable).parent / "wbx")


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "WB_HOME": str(tmp_path / "home"), "HOME": str(tmp_path), "SHELL": "/bin/bash",
            **env}
    return subprocess.run([WBX, *args], capture_output=True, text=True, env=full, cwd=tmp_path, timeout=120)


def test_help_lists_completion_and_install_writes_the_script(tmp_path: Path) -> None:
    assert "--install-completion" in _run(["--help"], tmp_path).stdout
    # The shell is named, not detected from the process tree (which differs under CI).
    named = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    shown = _run(["--show-completion", "bash"], tmp_path, **named)
    assert shown.returncode == 0 and "_wbx_completion()" in shown.stdout and "_WBX_COMPLETE" in shown.stdout
    done = _run(["--install-completion", "bash"], tmp_path, **named)
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "wbx.sh"
    assert script.is_file() and "_wbx_completion" in script.read_text()


def test_the_shell_gets_command_names(tmp_path: Path) -> None:
    r = _run([], tmp_path, _WBX_COMPLETE="complete_bash", COMP_WORDS="wbx tool", COMP_CWORD="1")
    assert r.stdout.split() == ["toolkit"]
    r = _run([], tmp_path, _WBX_COMPLETE="complete_bash", COMP_WORDS="wbx toolkit bu", COMP_CWORD="2")
    assert r.stdout.split() == ["build"]
