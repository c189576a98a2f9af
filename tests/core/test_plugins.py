from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from wbcore import hookimpl, plugins
from wbcore.errors import NotFound, PluginError
from wbcore.records import Check, ExecShape, SourcePrefix
from wbcore.runtime import Runtime


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
        Runtime.open(plugins=[WrongType()], home=wb_home).shapes


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
        from wbcore.runtime import Runtime
        rt = Runtime.open()
        rt.collect_all()
        heavy = [m for m in ("wasmtime", "httpx", "aiosqlite", "mcp", "ray") if m in sys.modules]
        print(",".join(heavy))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"WB_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == ""
