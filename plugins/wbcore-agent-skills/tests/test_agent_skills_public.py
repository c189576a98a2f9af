"""Public Agent Skills (plugins/wbcore-agent-skills/tests/data/agent-skills: three of the anthropics/skills
repository, Apache-2.0) survive import → export byte for byte, and re-importing drifts nothing: the import
keeps the package as it came (``agent-skill/``) beside the Org manifest and skills it writes,
and export gives that package back while the generated files are unedited."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wbcore_agent_skills import export, skill_import

PUBLIC = Path(__file__).resolve().parent / "data" / "agent-skills"
SKILLS = ("mcp-builder", "webapp-testing", "internal-comms")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def generated(folder: Path) -> dict[str, bytes]:
    return {rel: data for rel, data in tree(folder).items()
            if rel == "manifest.org" or rel.startswith("skills/")}


@pytest.mark.parametrize("name", SKILLS)
def test_a_public_skill_round_trips_byte_for_byte(name: str, tmp_path: Path, make_runtime) -> None:
    source = PUBLIC / name
    first = skill_import.import_skill(source, tmp_path / "tk1")
    assert first.id == name and first.warnings == ()
    pkg = export.export_agent_skills(make_runtime(roots=[tmp_path / "tk1"]).toolkit(name), tmp_path / "out1")
    assert tree(pkg) == tree(source)  # every file, SKILL.md included, exactly as published
    # Importing the export is importing the original: nothing drifts, round after round.
    again = skill_import.import_skill(pkg, tmp_path / "tk2")
    assert generated(tmp_path / "tk2" / name) == generated(tmp_path / "tk1" / name)
    pkg2 = export.export_agent_skills(make_runtime(roots=[tmp_path / "tk2"]).toolkit(again.id),
                                      tmp_path / "out2")
    assert tree(pkg2) == tree(source)


def test_an_edited_toolkit_exports_its_edits(tmp_path: Path, make_runtime) -> None:
    skill_import.import_skill(PUBLIC / "webapp-testing", tmp_path / "tk")
    overview = tmp_path / "tk" / "webapp-testing" / "skills" / "overview.org"
    overview.write_text(overview.read_text() + "\n* Added after import\nA line the deployer wrote.\n")
    pkg = export.export_agent_skills(make_runtime(roots=[tmp_path / "tk"]).toolkit("webapp-testing"),
                                     tmp_path / "out")
    files = tree(pkg)
    assert "A line the deployer wrote." in files["SKILL.md"].decode()
    # the kept copy is not exported
    assert not any(rel.startswith(skill_import.ORIGINAL_DIR + "/") for rel in files)
    assert (files["scripts/with_server.py"]
            == (PUBLIC / "webapp-testing" / "scripts" / "with_server.py").read_bytes())


def test_as_names_the_toolkit_when_the_skill_name_differs_from_its_folder(tmp_path: Path) -> None:
    moved = tmp_path / "renamed-folder"
    shutil.copytree(PUBLIC / "internal-comms", moved)
    with pytest.raises(Exception, match="does not match its folder"):
        skill_import.import_skill(moved, tmp_path / "tk")  # without --as: the specification's rule
    done = skill_import.import_skill(moved, tmp_path / "tk", ident="comms")
    assert done.id == "comms" and len(done.warnings) == 1
    assert "'internal-comms' does not match its folder 'renamed-folder'" in done.warnings[0]
    assert "imported as comms (--as)" in done.warnings[0]
