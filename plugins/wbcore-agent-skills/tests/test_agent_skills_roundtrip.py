"""Agent Skills both ways, losslessly: export → import → export is byte-identical, the spec's
frontmatter rules are enforced with ``file:line``, and the import audit names only real commands."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import pytest

from wbcore_agent_skills import export, native_audit, skill_import
from wbcore_runtime.contract.errors import InvalidArgs

LONG_DESCRIPTION = (
    "Fill, extract and merge PDF forms and documents. "
    + " ".join(f"Use it when the user mentions case {n}: a PDF form, a scanned page or a table to extract."
               for n in range(9))
)
assert 800 < len(LONG_DESCRIPTION) <= 1024

SKILL_MD = f"""---
name: pdf-forms
description: >
  {LONG_DESCRIPTION[:400]}
  {LONG_DESCRIPTION[400:].lstrip()}
license: Proprietary. LICENSE.txt has complete terms
compatibility: Requires Python 3.11+ and poppler-utils
allowed-tools:
  - Bash(python:*)
  - Read
metadata:
  author: example-org
  version: "2.1.0"
---

# PDF forms

Fill PDF forms with the bundled script. Read [the reference](references/REFERENCE.md) first.

## Quick start

Run the checker, then fill:

```bash
python scripts/fill_form.py input.pdf fields.json \\
  --pages 5 \\
  --out filled.pdf
```

| step | tool |
|---|---|
| check | `scripts/check.sh` |

## Extracting text

> Scanned pages need OCR first.

```console
$ pdftotext -layout in.pdf -
and 5 more lines of output
```

### Tables

* one table per page
* merge with **care**

## Templates

Start from `assets/template.json` and see [forms](references/forms.md).
"""

REFERENCE_MD = """# PDF reference

Everything about the PDF object model.

## Objects

```python
# a comment, not a heading
print("hi")
```
"""

FORMS_MD = "# Form fields\n\nText, checkbox and signature fields.\n\n## Checkboxes\n\nOn is `/Yes`.\n"
SCRIPT = b"#!/usr/bin/env python3\nimport sys\nprint(sys.argv)\n"
PNG = bytes(range(256)) * 4  # not text: assets are copied byte for byte


def _write_skill(root: Path) -> Path:
    d = root / "pdf-forms"
    for sub in ("scripts", "references", "assets"):
        (d / sub).mkdir(parents=True)
    (d / "SKILL.md").write_text(SKILL_MD, encoding="utf-8")
    (d / "scripts" / "fill_form.py").write_bytes(SCRIPT)
    (d / "scripts" / "check.sh").write_text("#!/bin/sh\nset -e\npdfinfo \"$1\" | grep -q Pages\n")
    (d / "references" / "REFERENCE.md").write_text(REFERENCE_MD, encoding="utf-8")
    (d / "references" / "forms.md").write_text(FORMS_MD, encoding="utf-8")
    (d / "assets" / "template.json").write_text('{"fields": []}\n')
    (d / "assets" / "logo.png").write_bytes(PNG)
    (d / "LICENSE.txt").write_text("All rights reserved.\n")
    return d


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _export(make_runtime, roots: list[Path], ident: str, out: Path) -> Path:
    rt = make_runtime(roots=roots)
    return export.export_agent_skills(rt.toolkit(ident), out)


def test_export_import_export_is_byte_identical(tmp_path, make_runtime):
    source = _write_skill(tmp_path / "src")
    first = skill_import.import_skill(source, tmp_path / "tk1")
    assert first.skills == ("reference", "forms")  # documents are skills; headings stay in the overview
    report = make_runtime(roots=[tmp_path / "tk1"]).verify("pdf-forms")
    assert report.ok, report.render()
    pkg1 = _export(make_runtime, [tmp_path / "tk1"], "pdf-forms", tmp_path / "out1")
    again = skill_import.import_skill(pkg1, tmp_path / "tk2")
    assert again.id == "pdf-forms" and again.skills == first.skills  # no new skill per heading
    pkg2 = _export(make_runtime, [tmp_path / "tk2"], "pdf-forms", tmp_path / "out2")
    tree1, tree2 = _tree(pkg1), _tree(pkg2)
    assert sorted(tree1) == sorted(tree2) == [
        "LICENSE.txt", "SKILL.md", "assets/logo.png", "assets/template.json", "references/REFERENCE.md",
        "references/forms.md", "scripts/check.sh", "scripts/fill_form.py",
    ]
    for rel in tree1:
        assert tree1[rel] == tree2[rel], f"{rel} changed on the second export"
    # Scripts and assets are the author's bytes; the description is whole; links still resolve.
    assert tree1["scripts/fill_form.py"] == SCRIPT and tree1["assets/logo.png"] == PNG
    text = tree1["SKILL.md"].decode()
    front, body = skill_import.parse_frontmatter(text)
    assert front["description"] == " ".join(LONG_DESCRIPTION.split())
    assert front["compatibility"] == "Requires Python 3.11+ and poppler-utils"
    assert front["allowed-tools"] == ["Bash(python:*)", "Read"]
    assert front["metadata"]["author"] == "example-org" and front["metadata"]["version"] == "2.1.0"
    assert body.startswith("# PDF forms\n") and "## Quick start" in body and "### Tables" in body
    assert "[the reference](references/REFERENCE.md)" in body and "## References" not in body
    for link in re.findall(r"\]\(([^)]+)\)", body):
        assert link in tree1, f"SKILL.md links to {link}, which the package lacks"
    # A third round changes nothing either.
    skill_import.import_skill(pkg2, tmp_path / "tk3")
    assert _tree(_export(make_runtime, [tmp_path / "tk3"], "pdf-forms", tmp_path / "out3")) == tree1


def test_a_native_toolkit_round_trips_after_its_first_export(make_toolkit, make_runtime, tmp_path,
                                                             toolkit_root):
    make_toolkit("Demo_Tool", exec="command", caps="net", extra={"CLI_BIN": "demo"},
                 skills={"overview": "#+TITLE: o\n\nUse ~demo~ well.\n\n* Notes\n\nSome.\n",
                         "usage": "#+TITLE: Usage\n\nRun it.\n\n#+begin_src sh\ndemo -x\n#+end_src\n"})
    pkg1 = _export(make_runtime, [toolkit_root], "Demo_Tool", tmp_path / "out1")
    back = skill_import.import_skill(pkg1, tmp_path / "tk")
    assert back.id == "Demo_Tool" and back.skills == ("usage",)  # the id comes back from metadata
    pkg2 = _export(make_runtime, [tmp_path / "tk"], "Demo_Tool", tmp_path / "out2")
    assert _tree(pkg1) == _tree(pkg2)
    assert ("## Running" in _tree(pkg2)["SKILL.md"].decode()
            and "## References" in _tree(pkg2)["SKILL.md"].decode())


def _spec_errors(pkg: Path) -> list[str]:
    """The specification's rules (agentskills.io/specification), checked independently of wbcore."""
    front, _ = skill_import.parse_frontmatter((pkg / "SKILL.md").read_text(encoding="utf-8"))
    errors = []
    unknown = set(front) - {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    if unknown:
        errors.append(f"unexpected fields {sorted(unknown)}")
    name = unicodedata.normalize("NFKC", str(front.get("name", "")))
    if not (1 <= len(name) <= 64 and name == name.lower() and all(c.isalnum() or c == "-" for c in name)
            and not name.startswith("-") and not name.endswith("-") and "--" not in name
            and name == pkg.name):
        errors.append(f"bad name {name!r}")
    if not 1 <= len(str(front.get("description", ""))) <= 1024:
        errors.append("bad description")
    if "compatibility" in front and not 1 <= len(front["compatibility"]) <= 500:
        errors.append("bad compatibility")
    if "metadata" in front and not all(isinstance(v, str) for v in front["metadata"].values()):
        errors.append("metadata values must be strings")
    return errors


def test_exports_pass_the_reference_validator(tmp_path, make_runtime, make_toolkit, toolkit_root):
    source = _write_skill(tmp_path / "src")
    skill_import.import_skill(source, toolkit_root)
    make_toolkit("Odd__Name.v2", exec="command", extra={"CLI_BIN": "odd"}, tagline="word " * 300)
    rt = make_runtime(roots=[toolkit_root])
    pkgs = [export.export_agent_skills(rt.toolkit(i), tmp_path / "out")
            for i in ("pdf-forms", "Odd__Name.v2")]
    assert [p.name for p in pkgs] == ["pdf-forms", "odd-name-v2"]
    for pkg in pkgs:
        assert _spec_errors(pkg) == []
    validator = pytest.importorskip("skills_ref.validator",
                                    reason="skills-ref (the core's test extra) validates exports")
    for pkg in pkgs:
        assert validator.validate(pkg) == [], pkg


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("name", "PDF-Forms", "uppercase"),
    ("name", "pdf--forms", "consecutive hyphens"),
    ("name", "-pdf-forms", "starts or ends with a hyphen"),
    ("name", "pdf_forms", "other than letters"),
    ("name", "a" * 65, "at most 64"),
    ("name", "other-name", "does not match its folder"),
    ("description", "x" * 1025, "1025 characters (at most 1024)"),
    ("description", '""', "missing or empty"),
    ("compatibility", "y" * 501, "501 characters (at most 500)"),
    ("compatibility", '""', "empty"),
])
def test_import_refuses_what_the_spec_refuses_with_file_and_line(tmp_path, field, value, problem):
    d = tmp_path / "pdf-forms"
    d.mkdir()
    front = {"name": "pdf-forms", "description": "Fill PDF forms.", "compatibility": "Python"}
    front[field] = value
    lines = ["---", *(f"{k}: {v}" for k, v in front.items()), "---", "", "# T", ""]
    (d / "SKILL.md").write_text("\n".join(lines))
    line = 2 + list(front).index(field)
    with pytest.raises(InvalidArgs,
                       match=re.escape(f"SKILL.md:{line}: {field}: ") + ".*" + re.escape(problem)):
        skill_import.import_skill(d, tmp_path / "out")
    assert not (tmp_path / "out" / "pdf-forms").exists()


def test_a_description_of_1024_characters_is_kept_whole(tmp_path, make_runtime):
    d = tmp_path / "long"
    d.mkdir()
    desc = ("abcdefghi " * 103)[:1023] + "z"
    assert len(desc) == 1024
    (d / "SKILL.md").write_text(f"---\nname: long\ndescription: {desc}\n---\n\nBody.\n")
    skill_import.import_skill(d, tmp_path / "tk")
    rt = make_runtime(roots=[tmp_path / "tk"])
    assert rt.toolkit("long").manifest.tagline == desc
    pkg = export.export_agent_skills(rt.toolkit("long"), tmp_path / "out")
    assert skill_import.parse_frontmatter((pkg / "SKILL.md").read_text())[0]["description"] == desc


NOISY = """---
name: noisy
description: Shell blocks the way real skills write them.
---

# Noisy

```bash
python scripts/fill_form.py in.pdf \\
  --pages 5 \\
  and-more.json
echo "$(date +%F) and more" 2>&1 | tee log.txt
x=$(git rev-parse HEAD) && make -j 5
cat <<EOF > notes.txt
and this is prose in a here-document
5 is a number
EOF
for f in *.pdf; do qpdf --check "$f"; done
```

```console
$ pdftotext in.pdf -
and 5 more lines of output
Total: 12 pages
```

```sh
5 files changed
and then run it again
```
"""


def test_import_audit_names_only_real_commands(tmp_path):
    d = tmp_path / "noisy"
    d.mkdir()
    (d / "SKILL.md").write_text(NOISY)
    done = skill_import.import_skill(d, tmp_path / "tk")
    report = native_audit.audit(done.path)
    names = {f.name for f in report.findings if f.kind in ("native-cli", "interpreter", "requires")}
    assert names == {"python", "date", "tee", "git", "make", "cat", "qpdf", "pdftotext"}
    messages = "\n".join(f.render() for f in report.findings)
    for noise in ("5 is assumed", "and is assumed", "calls 5", "calls and", "calls Total", "calls this"):
        assert noise not in messages
    python = next(f for f in report.findings if f.name == "python")
    assert "runs scripts/fill_form.py natively through python" in python.message


@pytest.mark.parametrize(("line", "commands"), [
    ("5 files changed", []),
    ("and then run it", []),
    ('echo "$(date) and more" 2>&1 | tee log', ["echo", "date", "tee"]),
    ("x=$(git rev-parse HEAD) && make -j 5", ["git", "make"]),
    ("env -i PATH=/bin ls -l", ["ls"]),
    ("if grep -q x f; then sed s/a/b/ f; fi", ["grep", "sed", "fi"]),
    ("echo 'a | b; c' # jq", ["echo"]),
    ("`which jq` .x f", ["which"]),
])
def test_command_position(line, commands):
    assert [c for c, _ in native_audit.commands_in(line)] == commands


def test_scripts_are_data_the_audit_names_them(tmp_path):
    source = _write_skill(tmp_path / "src")
    done = skill_import.import_skill(source, tmp_path / "tk")
    mode = os.stat(done.path / "scripts" / "fill_form.py").st_mode
    assert (done.path / "scripts" / "fill_form.py").read_bytes() == SCRIPT and mode
    scripts = {f.path for f in native_audit.audit(done.path).findings if f.kind == "script"}
    assert scripts == {"scripts/check.sh", "scripts/fill_form.py"}


def test_export_writes_nothing_outside_the_package(make_toolkit, make_runtime, tmp_path, toolkit_root):
    """A skill's #+SOURCE is a path inside the package or ignored; links out of the toolkit are not
    followed."""
    bad = {"up": "../../escape.md", "abs": "/tmp/escape.md", "skill": "SKILL.md", "org": "skills/x.md",
           "dot": ".hidden/x.md"}
    skills = {"overview": "#+TITLE: o\n\nO.\n"}
    skills.update({slug: f"#+TITLE: {slug}\n#+SOURCE: {src}\n\nText.\n" for slug, src in bad.items()})
    d = make_toolkit("sneaky", skills=skills)
    (d / "scripts").mkdir()
    (d / "scripts" / "leak").symlink_to("/etc/passwd")
    (d / "scripts" / "ok.sh").write_text("echo ok\n")
    rt = make_runtime(roots=[toolkit_root])
    files = export.render(rt.toolkit("sneaky"))
    assert sorted(files) == ["SKILL.md", *(f"references/{s}.md" for s in sorted(bad)), "scripts/ok.sh"]
    pkg = export.export_agent_skills(rt.toolkit("sneaky"), tmp_path / "out" / "deep")
    assert not (tmp_path / "escape.md").exists() and not (tmp_path / "out" / "escape.md").exists()
    assert sorted(p.name for p in (tmp_path / "out" / "deep").iterdir()) == [pkg.name]


def test_an_exported_toolkit_id_cannot_name_a_path(tmp_path):
    d = tmp_path / "dots"
    d.mkdir()
    (d / "SKILL.md").write_text('---\nname: dots\ndescription: x\nmetadata:\n  toolkit: ".."\n  generator: '
                                'wbcore\n---\n')
    done = skill_import.import_skill(d, tmp_path / "out")
    assert done.path.parent == tmp_path / "out" and done.id not in ("..", ".", "")


def test_a_skill_folder_past_the_byte_cap_is_refused_as_it_is_read(tmp_path, monkeypatch):
    """The one byte cap of an import is the snapshot's, counted as the folder is read: a folder
    past it is refused naming the folder, and nothing is written."""
    monkeypatch.setattr(skill_import, "MAX_TOTAL_BYTES", 4096)
    d = tmp_path / "big"
    (d / "assets").mkdir(parents=True)
    (d / "SKILL.md").write_text("---\nname: big\ndescription: x\n---\n\nBody.\n")
    (d / "assets" / "blob.bin").write_bytes(b"\0" * 5000)
    with pytest.raises(InvalidArgs, match=r"more than 4096 bytes in the skill folder .*big"):
        skill_import.import_skill(d, tmp_path / "out")
    assert not (tmp_path / "out" / "big").exists()
