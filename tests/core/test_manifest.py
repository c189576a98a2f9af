from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime.toolkit import manifest
from wbcore_runtime.contract.errors import ManifestError
from wbcore_testing.fixtures import manifest_text


def parse(text: str) -> manifest.Manifest:
    return manifest.parse(text, Path("/tk/demo/manifest.org"))


def test_modern_manifest_fields():
    m = parse(manifest_text("demo", exec="command", caps="vfs kv vfs",
                            extra={"CLI_BIN": "demo", "ARG_MODE": "stdin1", "KERNEL_ENTRY": "run"}))
    assert ((m.id, m.version, m.status, m.exec, m.trust)
            == ("demo", "0.1.0", "stable", "command", "first-party"))
    assert m.caps == ("vfs", "kv")  # duplicates collapse, order kept
    assert m.cli_bin == "demo" and m.arg_mode == "stdin1"
    assert m.extra("KERNEL_ENTRY") == "run"
    assert m.format == "manifest"
    assert m.lines["TOOLKIT"] == 2
    assert m.node_title == "demo toolkit"


def test_cli_bin_from_drawer_when_keyword_absent():
    m = parse(manifest_text("demo", exec="command", drawer={"CLI_BIN": "dm"}))
    assert m.cli_bin == "dm"


@pytest.mark.parametrize(
    ("mutation", "line", "field", "problem"),
    [
        (lambda t: t.replace("#+VERSION: 0.1.0", "#+VERSION: one"), 3, "VERSION", "not semver"),
        (lambda t: t.replace("#+STATUS: stable", "#+STATUS: shiny"), 4, "STATUS", "not one of"),
        (lambda t: t.replace("#+TAGLINE: Use demo for testing.\n", ""), 1, "TAGLINE", "missing"),
        (lambda t: t.replace("#+TOOLKIT: demo", "#+TOOLKIT: de mo"), 2, "TOOLKIT", "must match"),
        (lambda t: t.replace("#+TITLE: demo toolkit\n", "#+TITLE: demo toolkit\n#+TRUST: nobody\n"), 2,
         "TRUST", "not one of"),
        (lambda t: t.replace("#+TITLE: demo toolkit\n", "#+TITLE: demo toolkit\n#+ARG_MODE: stdin2\n"), 2,
         "ARG_MODE", "not one of"),
        (lambda t: t.replace("#+TITLE: demo toolkit\n", "#+TITLE: demo toolkit\n#+SHA256: abc\n"), 2,
         "SHA256", "64 hex"),
        (lambda t: t.replace("#+TITLE: demo toolkit\n", "#+TITLE: demo toolkit\n#+CAPS: net k$v\n"), 2,
         "CAPS", "must match"),
        (lambda t: t.replace("#+TITLE: demo toolkit\n", "#+TITLE: demo toolkit\n#+TITLE: again\n"), 2,
         "TITLE", "given twice"),
        (lambda t: t.replace("  :ID: demo", "  :ID: other"), 10, "drawer ID", "must match"),
        (lambda t: t.replace("  :STATUS: stable", "  :STATUS: deprecated"), 11, "drawer STATUS",
         "must match"),
        (lambda t: t.replace(":toolkit:", ":tool:"), 1, "headline", "no headline"),
        (lambda t: t.replace("demo toolkit\n", "demo toolkit\n\x00", 1), 2, "file", "NUL"),
    ],
)
def test_malformed_manifest_names_file_line_field(mutation, line, field, problem):
    text = mutation(manifest_text("demo", exec="command"))
    with pytest.raises(ManifestError) as err:
        parse(text)
    e = err.value
    assert (e.line, e.field) == (line, field), str(e)
    assert problem in e.problem
    assert str(e).startswith(f"/tk/demo/manifest.org:{line}: {field}: ")


def test_drawer_cli_bin_must_match_keyword():
    text = manifest_text("demo", exec="command", extra={"CLI_BIN": "a"}, drawer={"CLI_BIN": "b"})
    with pytest.raises(ManifestError, match=r":13: drawer CLI_BIN: drawer says 'b' but #\+CLI_BIN says 'a'"):
        parse(text)


def test_keywords_inside_src_blocks_are_ignored():
    text = manifest_text("demo") + "#+begin_src org\n#+TOOLKIT: not-me\n#+end_src\n"
    assert parse(text).id == "demo"


LEGACY = """\
* My Toolkit :toolkit:
  :PROPERTIES:
  :EXEC:      my-tool
  :CAPS:      read network
  :CLI_BIN:   my-tool
  :ARG_MODE:  flags
  :END:

** process <file>
   Processes an org file. Outputs JSON to stdout.
"""


def test_legacy_drawer_only_manifest():
    m = manifest.parse(LEGACY, Path("/tk/my-toolkit/manifest.org"))
    assert m.format == "legacy-drawer"
    assert ((m.id, m.title, m.exec, m.cli_bin, m.arg_mode)
            == ("my-toolkit", "My Toolkit", "posix", "my-tool", "argv"))
    assert m.caps == ("vfs", "net")
    assert m.sections[0][0] == "process <file>"
    assert any("#+EXEC: posix" in n and "#+CLI_BIN: my-tool" in n for n in m.notes)


def test_legacy_with_build_src_is_a_command():
    text = LEGACY.replace("  :END:", "  :BUILD_SRC: path:src\n  :BUILD_LANG: c\n  :END:")
    m = manifest.parse(text, Path("/tk/x/manifest.org"))
    assert m.exec == "command" and m.build_src == "path:src"


def test_legacy_bad_arg_mode_names_line():
    with pytest.raises(ManifestError) as err:
        manifest.parse(LEGACY.replace("flags", "sideways"), Path("/tk/x/manifest.org"))
    assert (err.value.line, err.value.field) == (6, "drawer ARG_MODE")


def test_oversized_and_non_utf8_files(tmp_path):
    big = tmp_path / "big" / "manifest.org"
    big.parent.mkdir()
    big.write_bytes(b"#" * (manifest.MAX_MANIFEST_BYTES + 1))
    with pytest.raises(ManifestError, match="cap"):
        manifest.load(big)
    bad = tmp_path / "bad" / "manifest.org"
    bad.parent.mkdir()
    bad.write_bytes(b"#+TITLE: ok\n#+TOOLKIT: \xff\n")
    with pytest.raises(ManifestError) as err:
        manifest.load(bad)
    assert (err.value.line, err.value.field) == (2, "file")


@pytest.mark.parametrize("brk", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_line_breaks_other_than_lf_and_crlf_are_refused(brk, tmp_path):
    from wbcore_runtime.toolkit import manifest as m
    from wbcore_runtime.toolkit.skills import read_skill

    text = manifest_text("demo") + f"\nsome body{brk}* Evil :toolkit:\n"
    line = text[: text.index(brk)].count("\n") + 1
    with pytest.raises(ManifestError, match=rf"manifest.org:{line}: file: .*lines must end in LF") as exc:
        m.parse(text, Path("/x/demo/manifest.org"))
    assert exc.value.line == line
    assert m.parse(manifest_text("demo").replace("\n", "\r\n"), "manifest.org").id == "demo"  # CRLF is fine
    with pytest.raises(ManifestError, match="mixes LF and CRLF"):
        m.parse(manifest_text("demo").replace("\n", "\r\n", 1), "manifest.org")
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "x.org").write_text(f"#+TITLE: x\n\nok{brk}then\n", newline="")
    with pytest.raises(ManifestError, match=r"x.org:3: skill: "):
        read_skill(tmp_path, "x")
