from __future__ import annotations





def lines(report):
    return [c.render() for c in report.checks]


def test_unknown_exec_mode_fails_listing_known(make_toolkit, make_runtime):
    make_toolkit("odd", exec="teleport")
    r = make_runtime().verify("odd")
    assert not r.ok
    exec_line = next(c for c in r.checks if c.area == "exec")
    assert exec_line.render().startswith("✗ exec: unknown mode: unknown EXEC shape 'teleport'; known: ")
    assert "command" in exec_line.message and "posix" in exec_line.message


def test_posix_shape_resolves_inside_the_container_root(make_toolkit, make_runtime, tmp_path):
    # A binary on this host's PATH is not what a posix command runs: only the container
    # root (Debian's /usr) counts, and verify names the tier that would run it.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "mytool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    make_toolkit("px", exec="posix", extra={"CLI_BIN": "mytool"})
    missing = make_runtime(env={"PATH": str(bindir)}).verify("px")
    assert any(line.startswith("✗ exec: posix CLI 'mytool' is not in the container root")
               for line in lines(missing))
    make_toolkit("sh", exec="posix", extra={"CLI_BIN": "sh"})
    found = lines(make_runtime().verify("sh"))
    assert any(line.startswith("✓ exec: posix CLI 'sh' is in the container root at /usr/") for line in found)
    assert any("tier container" in line for line in found)


def test_command_shape_not_registered_not_buildable(make_toolkit, make_runtime):
    make_toolkit("cmd", exec="command", extra={"CLI_BIN": "cmd"})
    r = make_runtime().verify("cmd")
    assert "✗ exec: command 'cmd' not registered and no #+BUILD_SRC to build it from" in lines(r)
    make_toolkit("scr", exec="command",
                 extra={"CLI_BIN": "scr", "BUILD_SRC": "script:build.sh", "BUILD_LANG": "c"})
    r = make_runtime().verify("scr")
    assert any("script: is refused" in line for line in lines(r))
    make_toolkit("svn", exec="command", extra={"CLI_BIN": "svn", "BUILD_SRC": "svn:trunk", "BUILD_LANG": "c"})
    r = make_runtime().verify("svn")
    assert any("unknown BUILD_SRC prefix 'svn:'; known: " in line for line in lines(r))
