"""One home: $WB_HOME wins, else the project's wbx.toml, else ~/.workbooks; and what
discovery says outside a project."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wbcore_runtime.store import home
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.runtime import Runtime
from wbcore_testing.fixtures import write_toolkit


def _project(tmp_path: Path, text: str = 'home = ".wb-home"\ntoolkits = ["kits"]\n') -> Path:
    proj = tmp_path / "proj"
    (proj / "deep" / "er").mkdir(parents=True)
    (proj / "wbx.toml").write_text(text)
    return proj


def test_project_home_found_from_a_subfolder_and_wb_home_wins(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    chosen = home.choose({}, proj / "deep" / "er")
    assert (chosen.path, chosen.source) == (proj.resolve() / ".wb-home", "wbx.toml")
    assert "wbx.toml" in chosen.describe()
    assert home.choose({"WB_HOME": str(tmp_path / "mine")}, proj).path == tmp_path / "mine"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert home.choose({}, outside).source == "default"


def test_runtime_cli_and_demo_share_the_project_home(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    write_toolkit(proj / "kits", "alpha")
    rt = Runtime.open(plugins=[], env={}, cwd=proj / "deep" / "er")
    assert rt.home == proj.resolve() / ".wb-home"
    # the project's toolkits folders are searched from any folder below it
    assert list(rt.discover().toolkits) == ["alpha"]


def test_the_repository_marks_itself() -> None:
    repo = Path(__file__).resolve().parents[2]
    project = home.find_project(repo / "wbcore_runtime" / "store")
    assert project is not None and project.home == repo / ".wb-home"


@pytest.mark.parametrize("text", ['home = "../outside"\n', 'home = "/etc"\n', 'home = 3\n', 'homes = "x"\n',
                                  'toolkits = ["../../x"]\n', 'home = [\n', "home = 'x'\n", 'home = "x" y\n'])
def test_a_marker_cannot_point_outside_its_project_or_be_malformed(tmp_path: Path, text: str) -> None:
    proj = _project(tmp_path, text)
    with pytest.raises(InvalidArgs, match=r"wbx\.toml"):
        home.choose({}, proj)


def test_a_symlinked_home_leaving_the_project_is_refused(tmp_path: Path) -> None:
    proj = _project(tmp_path, 'home = "state"\n')
    (tmp_path / "victim").mkdir()
    os.symlink(tmp_path / "victim", proj / "state")
    with pytest.raises(InvalidArgs, match="outside the project"):
        home.choose({}, proj)


