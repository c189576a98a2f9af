"""One home: $WB_HOME wins, else the project's wbx.toml, else ~/.workbooks; and what
discovery says outside a project."""

from __future__ import annotations

from pathlib import Path


from wbcore_runtime.toolkit import roots as toolkit_roots
from wbcore_runtime.runtime import Runtime


def _project(tmp_path: Path, text: str = 'home = ".wb-home"\ntoolkits = ["kits"]\n') -> Path:
    proj = tmp_path / "proj"
    (proj / "deep" / "er").mkdir(parents=True)
    (proj / "wbx.toml").write_text(text)
    return proj


def test_list_outside_a_project_names_the_roots_searched_and_how_to_add_one(tmp_path: Path, wbx) -> None:
    empty = tmp_path / "nowhere" / "here"
    empty.mkdir(parents=True)
    rt = Runtime.open(plugins=[], env={"WB_HOME": str(tmp_path / "h")}, cwd=empty)
    res = wbx("toolkit", "list", runtime=rt)
    assert res.exit_code == 0 and res.stdout == ""
    assert f"{empty / 'toolkits'} (missing)" in res.stderr
    assert f"{tmp_path / 'nowhere' / 'toolkits'} (missing)" in res.stderr
    assert f"{tmp_path / 'h' / 'toolkits'} (missing)" in res.stderr
    assert "WB_TOOLKIT_PATH" in res.stderr and "wbx toolkit install" in res.stderr
    assert toolkit_roots.roots(rt.env, empty, rt.home) == []


def test_agent_prompt_without_the_agent_loop_names_the_package(tmp_path: Path, wbx) -> None:
    agent = tmp_path / "agent.org"
    agent.write_text("* Helper :agent:\n  :PROPERTIES:\n  :ID: h\n  :END:\n")
    rt = Runtime.open(plugins=[], env={"WB_HOME": str(tmp_path / "h")}, cwd=tmp_path)
    res = wbx("agent", "prompt", str(agent), runtime=rt)
    assert res.exit_code == 127 and "pip install wbcore-agent" in res.stderr, res.stderr


def test_list_json_names_every_folder_searched(tmp_path: Path, wbx) -> None:
    import json

    empty = tmp_path / "nowhere" / "here"  # not beside the wbx fixture's tmp_path/toolkits
    empty.mkdir(parents=True)
    rt = Runtime.open(plugins=[],
                      env={"WB_HOME": str(tmp_path / "h"), "WB_TOOLKIT_PATH": str(tmp_path / "extra")},
                      cwd=empty)
    data = json.loads(wbx("toolkit", "list", "--json", runtime=rt).stdout)
    assert data["roots"] == [] and str(tmp_path / "extra") in data["searched"]
    assert str(tmp_path / "h" / "toolkits") in data["searched"]
