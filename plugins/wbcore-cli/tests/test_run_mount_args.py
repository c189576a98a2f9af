"""``wbx run --mount``'s grammar in the fast parser (``wbcore_cli.fastrun``): repeatable
before NAME, in both spellings; after NAME it is the program's, with the one note."""

from __future__ import annotations

from wbcore_cli import fastrun


def test_mounts_before_the_name_are_wbx_options() -> None:
    got = fastrun.parse(["run", "--mount", "/a:/a", "--mount=/b:/b:rw", "--tier", "container", "git", "log"])
    assert got == fastrun.RunArgs("git", ("log",), None, "container", False, mounts=("/a:/a", "/b:/b:rw"))
    assert fastrun.parse(["run", "git", "log"]).mounts == ()  # type: ignore[union-attr]
    assert fastrun.parse(["run", "--mount"]) is None  # no value: Typer prints the usage


def test_a_mount_after_the_name_is_the_programs_with_a_note() -> None:
    args, note = fastrun.guest_args(("--mount", "/a:/a", "log"))
    assert args == ("--mount", "/a:/a", "log")
    assert note is not None and "--mount after the command name is passed to the program" in note
    assert fastrun.guest_args(("--", "--mount", "x")) == (("--mount", "x"), None)
