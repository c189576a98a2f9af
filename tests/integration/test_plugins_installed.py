from __future__ import annotations


import pytest

from wbcore_runtime.contract.errors import NotFound, PluginError
from wbcore_runtime.runtime import Runtime



def test_strict_selection_by_entry_point_name(wb_home):
    rt = Runtime.open(plugins=["process"], home=wb_home)
    assert rt.shapes.names() == ["task"]  # posix is wbcore-container's (it runs only in the container tier)
    with pytest.raises(PluginError, match=r"unknown plugin 'nosuch'; known: .*process"):
        Runtime.open(plugins=["nosuch"], home=wb_home)


def test_broken_plugin_is_listed_and_breaks_nothing(broken_dist, wb_home, make_toolkit, toolkit_root):
    make_toolkit("fine", exec="posix", extra={"CLI_BIN": "sh"})
    rt = Runtime.open(home=wb_home, roots=[toolkit_root])
    broken = next(i for i in rt.plugin_infos if i.name == "broken")
    assert not broken.loaded
    assert "ModuleNotFoundError" in (broken.error or "") and "wb_broken_missing" in broken.error
    assert broken.origin == "wb-broken 9.9"
    assert rt.verify("fine").ok  # everything else works
    # Selecting a name nobody serves shows the load failure as a possible cause.
    with pytest.raises(NotFound,
                       match=r"plugins that failed to load and might serve it: broken \(wb-broken 9.9\): "
                             r"ModuleNotFoundError"):
        rt.shapes.get("wasi-http")


def test_wbx_plugins_lists_the_failure(broken_dist, wbx, make_runtime):
    r = wbx("plugins")
    assert r.exit_code == 0
    assert "broken · wb-broken 9.9 · FAILED" in r.stdout
    assert "error: ModuleNotFoundError" in r.stdout
    assert "wasmtime · wbcore-wasmtime" in r.stdout


def test_every_plugin_command_names_its_distribution(wb_home):
    """``cli.app.PLUGIN_COMMANDS`` (what ``wbx <command>`` names to install when the command's
    plugin is missing) is exactly what our installed plugins add, each by its distribution."""
    from wbcore_cli.app import PLUGIN_COMMANDS

    rt = Runtime.open(home=wb_home)
    origins = {i.name: i.origin.partition(" ")[0] for i in rt.plugin_infos}
    served: dict[str, str] = {}

    class Record:
        runtime = rt

        def __call__(self, name: str, command: object, help: str | None = None) -> None:
            if " " not in name:  # a subcommand of a built-in group ("toolkit import") is not a command
                served[name] = origins[self.plugin]

    for impl in rt.pm.hook.wbcore_cli_commands.get_hookimpls():
        add = Record()
        add.plugin = impl.plugin_name
        impl.function(add=add)
    ours = {name: dist for name, dist in served.items() if dist.startswith("wbcore-")}
    assert ours == PLUGIN_COMMANDS
