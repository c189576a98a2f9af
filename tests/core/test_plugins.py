from __future__ import annotations

import sys
import textwrap
import time

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins import manager as plugins
from wbcore_runtime.contract.errors import NotFound, PluginError
from wbcore_runtime.contract.records import Check, ExecShape, SourcePrefix
from wbcore_runtime.runtime import Runtime


def _shape(name: str) -> ExecShape:
    return ExecShape(name=name, summary=name, verify=lambda ctx: [Check(True, "exec", name)])


class ShapeA:
    @hookimpl
    def wbcore_exec_shapes(self):
        return [_shape("dup"), _shape("only-a")]


class ShapeB:
    @hookimpl
    def wbcore_exec_shapes(self):
        return [_shape("dup")]


class Raises:
    @hookimpl
    def wbcore_source_prefixes(self):
        raise RuntimeError("boom")


class WrongType:
    @hookimpl
    def wbcore_exec_shapes(self):
        return [SourcePrefix(name="x:", summary="")]


def test_duplicate_names_are_an_error_naming_both(wb_home):
    rt = Runtime.open(plugins=[ShapeA(), ShapeB()], home=wb_home)
    with pytest.raises(PluginError, match=r"EXEC shape 'dup' is provided twice: by .*ShapeA.* and .*ShapeB"):
        rt.shapes.get("dup")
    assert rt.shapes.get("only-a").name == "only-a"  # other names still work
    assert set(rt.shapes.conflicts) == {"dup"}


def test_a_raising_hook_is_reported_not_fatal(wb_home):
    rt = Runtime.open(plugins=[Raises(), ShapeA()], home=wb_home)
    assert len(rt.prefixes) == 0
    info = next(i for i in rt.plugin_infos if i.name == "Raises")
    assert "boom" in (info.error or "")
    assert rt.shapes.get("only-a")


def test_wrong_record_type_is_an_error(wb_home):
    with pytest.raises(PluginError, match="yielded SourcePrefix from wbcore_exec_shapes; expected ExecShape"):
        _ = Runtime.open(plugins=[WrongType()], home=wb_home).shapes


def test_unknown_name_lists_known(wb_home):
    rt = Runtime.open(plugins=[ShapeA()], home=wb_home)
    with pytest.raises(NotFound, match=r"unknown EXEC shape 'nope'; known: dup, only-a$"):
        rt.shapes.get("nope")


def test_two_runtimes_do_not_share_plugins(wb_home):
    a = Runtime.open(plugins=[ShapeA()], home=wb_home)
    b = Runtime.open(plugins=[ShapeB()], home=wb_home)
    assert a.shapes.names() == ["dup", "only-a"] and b.shapes.names() == ["dup"]
    assert a.pm is not b.pm




def test_selecting_a_broken_plugin_is_a_hard_error(broken_dist, wb_home):
    with pytest.raises(PluginError, match=r"selected plugin 'broken' failed to load: ModuleNotFoundError"):
        Runtime.open(plugins=["broken"], home=wb_home)




def test_plugin_import_does_not_import_heavy_modules(tmp_path):
    import subprocess

    code = textwrap.dedent(
        """
        import sys
        from wbcore_runtime.runtime import Runtime
        rt = Runtime.open()
        rt.collect_all()
        heavy = [m for m in ("wasmtime", "httpx", "aiosqlite", "mcp", "ray") if m in sys.modules]
        print(",".join(heavy))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"WB_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == ""


def _install_fake_dist(site, name: str) -> None:
    """A distribution ``name`` whose entry point names an importable module that is a plugin."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[wbcore.plugins]\n{name} = {name}_mod\n")
    (site / f"{name}_mod.py").write_text("X = 1\n")


def test_the_entry_point_cache_sees_an_install_and_a_removal(tmp_path, monkeypatch):
    import os
    import shutil

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    home = tmp_path / "home"
    old = time.time() - 60  # not racy: a folder changed a minute ago is settled

    def settle() -> None:
        for info in site.glob("*.dist-info"):
            os.utime(info, (old, old))

    settle()
    def names() -> set[str]:
        return {i.name for i in plugins.load(cache_dir=home)[1]}
    before = names()
    assert (home / plugins.ENTRY_POINT_CACHE).is_file()
    assert "wbfake" not in before

    _install_fake_dist(site, "wbfake")
    old += 1
    settle()
    after = plugins.load(cache_dir=home)[1]
    assert "wbfake" in (home / plugins.ENTRY_POINT_CACHE).read_text()
    fake = next(i for i in after if i.name == "wbfake")
    assert fake.loaded and fake.origin == "wbfake 1.0"

    # An editable re-install rewrites the metadata in place: a new mtime, a new scan.
    (site / "wbfake-1.0.dist-info" / "entry_points.txt").write_text(
        "[wbcore.plugins]\nwbfake2 = wbfake_mod\n")
    old += 1
    settle()
    assert {"wbfake2"} <= names() and "wbfake" not in names()

    shutil.rmtree(site / "wbfake-1.0.dist-info")
    assert "wbfake2" not in names()


def test_a_racy_folder_is_scanned_but_not_cached(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    _install_fake_dist(site, "wbracy")  # just written: modified within RACY_SECONDS
    home = tmp_path / "home"
    assert "wbracy" in {i.name for i in plugins.load(cache_dir=home)[1]}
    assert not (home / plugins.ENTRY_POINT_CACHE).exists()


def test_a_corrupt_entry_point_cache_is_rescanned(tmp_path):
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    (home / plugins.ENTRY_POINT_CACHE).write_text('{"key": ')
    plugins.load(cache_dir=home)  # no error: the scan replaces it (unless a sys.path folder is racy)


def test_lazy_imports_its_target_at_the_first_call_only() -> None:
    sys.modules.pop("colorsys", None)
    to_hls = plugins.lazy("colorsys:rgb_to_hls")
    assert "colorsys" not in sys.modules and to_hls.__name__ == "rgb_to_hls"
    assert to_hls(1.0, 0.0, 0.0) == (0.0, 0.5, 1.0)
    assert "colorsys" in sys.modules
    with pytest.raises(ModuleNotFoundError):
        plugins.lazy("wb_no_such_plugin.lane:Lane")()


MISSPELLED = '''
import pluggy
hookimpl = pluggy.HookimplMarker("wbcore")

@hookimpl
def wbcore_exec_shape():  # the hook is wbcore_exec_shapes: pluggy alone would never call this
    return []
'''


def test_a_misspelled_hook_implementation_is_refused_not_silently_ignored(tmp_path, monkeypatch,
                                                                          make_runtime):
    """pluggy registers a ``@hookimpl`` no spec declares and never calls it; the core checks
    every plugin as it registers it (``check_pending``): tolerant for installed plugins (the
    plugin is listed with the reason, the others load), strict for selected or in-process ones."""
    import os

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    _install_fake_dist(site, "wbtypo")
    (site / "wbtypo_mod.py").write_text(MISSPELLED)
    old = time.time() - 60
    os.utime(site / "wbtypo-1.0.dist-info", (old, old))
    home = tmp_path / "home"
    pm, infos = plugins.load(cache_dir=home)
    typo = next(i for i in infos if i.name == "wbtypo")
    assert not typo.loaded and "unknown hook 'wbcore_exec_shape'" in (typo.error or "")
    assert "wbcore_exec_shapes" in (typo.error or "")  # the message lists the real hooks
    assert pm.get_plugin("wbtypo") is None
    with pytest.raises(plugins.PluginError, match="selected plugin 'wbtypo' cannot be used: unknown hook"):
        plugins.load(["wbtypo"], cache_dir=home)
    import types

    module = types.ModuleType("typo_inproc")
    exec(MISSPELLED, module.__dict__)
    with pytest.raises(plugins.PluginError, match="unknown hook 'wbcore_exec_shape'"):
        plugins.load([module])
    rt = make_runtime(plugins=[])
    with pytest.raises(plugins.PluginError, match="unknown hook 'wbcore_exec_shape'"):
        rt.register_plugin(module, name="typo")
    assert rt.pm.get_plugin("typo") is None
