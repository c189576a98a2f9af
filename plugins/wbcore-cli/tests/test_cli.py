from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
import typer

from wbcore_runtime import hookimpl
from wbcore_cli.app import GROUP_HELP
from wbcore_testing.fixtures import manifest_text


@pytest.fixture
def kits(make_toolkit):
    make_toolkit("alpha",
                 skills={"overview": "#+TITLE: Alpha\n#+DESCRIPTION: alpha things\n",
                         "fetch": "#+TITLE: Fetch\nUse the zebra flag.\n"})
    make_toolkit("beta", exec="teleport")
    make_toolkit("gamma", manifest=manifest_text("gamma").replace("#+VERSION: 0.1.0", "#+VERSION: 1"))


def test_list_text_and_json_with_malformed_reported(kits, wbx):
    r = wbx("toolkit", "list")
    assert r.exit_code == 0
    assert (r.stdout.splitlines()
            == ["alpha · stable · Use alpha for testing.", "beta · stable · Use beta for testing."])
    assert "gamma/manifest.org:3: VERSION: '1' is not semver" in r.stderr
    data = json.loads(wbx("toolkit", "list", "--json").stdout)
    assert [t["id"] for t in data["toolkits"]] == ["alpha", "beta"]
    assert data["errors"][0]["field"] == "VERSION" and data["errors"][0]["line"] == 3


def test_show_manifest_and_skill(kits, wbx):
    r = wbx("toolkit", "show", "alpha")
    assert r.exit_code == 0
    assert "skills (read one with: wbx toolkit show alpha <skill>):" in r.stdout
    assert "overview" in r.stdout and "alpha things" in r.stdout
    r = wbx("toolkit", "show", "alpha", "fetch")
    assert r.stdout == "#+TITLE: Fetch\nUse the zebra flag.\n"
    assert json.loads(wbx("toolkit", "show", "alpha", "--json").stdout)["skills"][1]["slug"] == "fetch"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("toolkit", "show", "nope"), 127, "wbx: not-found: unknown toolkit 'nope'; known: alpha, beta"),
        (("toolkit", "show", "alpha", "../x"), 2, "wbx: invalid-args: skill slug '../x' must match"),
        (("toolkit", "show", "alpha", "missing"), 127,
         "wbx: not-found: unknown skill 'missing'; known: fetch, overview"),
        (("toolkit", "show", "gamma"), 2, "wbx: invalid-args: "),
    ],
)
def test_errors_are_one_line_with_exit_codes(kits, wbx, args, code, message):
    r = wbx(*args)
    assert r.exit_code == code
    assert r.stderr.startswith(message)
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_search(kits, wbx):
    r = wbx("toolkit", "search", "ZEBRA")
    assert r.exit_code == 0 and r.stdout.startswith("alpha/fetch · text · ")
    hits = json.loads(wbx("toolkit", "search", "beta", "--json").stdout)
    assert hits[0] == {"toolkit": "beta", "skill": None, "field": "id", "snippet": "beta"}
    assert wbx("toolkit", "search", "no-such-thing").exit_code == 1


def test_verify_exit_codes_and_json(kits, wbx):
    ok = wbx("toolkit", "verify", "alpha")
    assert ok.exit_code == 0 and "✓ exec: none declared (discovery-only toolkit)" in ok.stdout
    bad = wbx("toolkit", "verify", "beta")
    assert bad.exit_code == 1 and "✗ exec: unknown mode" in bad.stdout
    data = json.loads(wbx("toolkit", "verify", "beta", "--json").stdout)
    assert data["ok"] is False and any(c["area"] == "exec" and not c["ok"] for c in data["checks"])
    every = wbx("toolkit", "verify", "--all")
    assert every.exit_code == 1 and "gamma:" in every.stdout
    assert wbx("toolkit", "verify").exit_code == 2


def test_version_and_usage_errors(wbx):
    r = wbx("--version")
    assert r.exit_code == 0 and r.stdout.startswith("wbx (wbcore) ")
    assert wbx("no-such-command").exit_code == 2


def test_a_plugin_command_without_its_plugin_names_what_to_install(make_runtime, wbx):
    """``wbx demo`` is wbcore-demo's: with only the core it says which distribution to install,
    not Typer's bare "No such command"; the name is not reserved, so a plugin may take it."""
    r = wbx("demo", runtime=make_runtime(plugins=[]))
    assert r.exit_code == 127 and r.stdout == ""
    assert "wbx demo is served by wbcore-demo" in r.stderr and "pip install wbcore-demo" in r.stderr

    class Demo:
        @hookimpl
        def wbcore_cli_commands(self, add):
            add("demo", lambda: typer.echo("a demo"), help="a demo")

    r = wbx("demo", runtime=make_runtime(plugins=[Demo()]))
    assert (r.exit_code, r.stdout, r.stderr) == (0, "a demo\n", "")


class Boom:
    @hookimpl
    def wbcore_cli_commands(self, add):
        def boom() -> None:
            raise RuntimeError("kaboom")

        add("boom", boom, help="always fails")


def test_internal_error_traceback_only_with_debug(make_runtime, wbx):
    rt = make_runtime(plugins=[Boom()])
    r = wbx("boom", runtime=rt)
    assert r.exit_code == 70
    assert r.stderr.strip() == "wbx: internal: RuntimeError: kaboom (run with --debug for the traceback)"
    r = wbx("--debug", "boom", runtime=rt)
    assert r.exit_code == 70 and "Traceback" in r.stderr


class Hello:
    @hookimpl
    def wbcore_cli_commands(self, add):
        sub = typer.Typer()

        @sub.command("say")
        def say(name: str) -> None:
            typer.echo(f"hello {name}")

        add("hello", sub, help="greetings")


class Hijack:
    """Takes the built-in ``run`` and adds one command of its own."""

    @hookimpl
    def wbcore_cli_commands(self, add):
        add("run", lambda: print("hijacked"))
        add("mine", lambda: print("mine"))


class HelloAgain:
    @hookimpl
    def wbcore_cli_commands(self, add):
        add("hello", lambda: print("the second hello"))


def test_plugins_add_commands_through_the_registrar(make_runtime, wbx):
    r = wbx("hello", "say", "ada", runtime=make_runtime(plugins=[Hello()]))
    assert (r.exit_code, r.stdout) == (0, "hello ada\n")
    assert "warning" not in r.stderr


def test_a_plugin_taking_a_builtin_name_is_a_warning_not_a_failure(make_runtime, wbx):
    rt = make_runtime(plugins=[Hijack()])
    r = wbx("--help", runtime=rt)
    assert r.exit_code == 0 and "mine" in r.stdout
    warning = ("wbx: warning: plugin Hijack: command 'run' not added: "
               "it is a built-in wbx command (see wbx plugins)")
    assert r.stderr.strip().splitlines() == [warning]
    r = wbx("mine", runtime=rt)
    assert (r.exit_code, r.stdout) == (0, "mine\n")  # the plugin's other command still works
    r = wbx("run", "--help", runtime=rt)
    assert r.exit_code == 0 and "hijacked" not in r.stdout  # run is still the built-in
    r = wbx("plugins", runtime=rt)
    assert r.exit_code == 0
    assert "  warning: command 'run' not added: it is a built-in wbx command" in r.stdout.splitlines()
    r = wbx("plugins", "--json", runtime=rt)
    (info,) = json.loads(r.stdout)
    assert (info["name"] == "Hijack"
            and info["warnings"] == ["command 'run' not added: it is a built-in wbx command"])


def test_a_command_name_another_plugin_took_is_refused_with_a_warning(make_runtime, wbx):
    rt = make_runtime(plugins=[Hello(), HelloAgain()])
    r = wbx("hello", "say", "ada", runtime=rt)
    assert (r.exit_code, r.stdout) == (0, "hello ada\n")  # the first plugin keeps its command
    assert r.stderr.strip() == ("wbx: warning: plugin HelloAgain: command 'hello' not added: plugin Hello "
                                "registered it first (see wbx plugins)")
    r = wbx("plugins", "--json", runtime=rt)
    by_name = {i["name"]: i for i in json.loads(r.stdout)}
    assert by_name["Hello"]["warnings"] == []
    assert (by_name["HelloAgain"]["warnings"]
            == ["command 'hello' not added: plugin Hello registered it first"])


class Broken:
    @hookimpl
    def wbcore_cli_commands(self, add):
        raise RuntimeError("no typer here")


def test_a_plugin_whose_registration_raises_loses_only_its_commands(make_runtime, wbx):
    rt = make_runtime(plugins=[Hello(), Broken()])
    r = wbx("hello", "say", "ada", runtime=rt)
    assert (r.exit_code, r.stdout) == (0, "hello ada\n")
    assert r.stderr.strip() == ("wbx: warning: plugin Broken: its commands were not added: "
                                "wbcore_cli_commands raised RuntimeError: no typer here (see wbx plugins)")
    r = wbx("plugins", runtime=rt)
    assert ("  warning: its commands were not added: wbcore_cli_commands raised RuntimeError: no typer here"
            in r.stdout)


@pytest.fixture
def escapes(make_toolkit, toolkit_root, tmp_path):
    """Three attacks on reads (wbcore_runtime.guard.paths): a manifest linked out, a skills/ folder linked
    out, a hard-linked skill; plus one good toolkit that must keep working."""
    import os

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "manifest.org").write_text(manifest_text("evil"))
    (outside / "secret.org").write_text("#+TITLE: Secret\nZEBRA-SECRET\n")
    (outside / "hard.org").write_text("#+TITLE: Hard\nHARD-SECRET\n")
    make_toolkit("good", skills={"overview": "#+TITLE: Good\nZEBRA-GOOD\n"})
    evil = make_toolkit("evil")
    (evil / "manifest.org").unlink()
    os.symlink(outside / "manifest.org", evil / "manifest.org")
    linked = make_toolkit("linked")
    for f in (linked / "skills").iterdir():
        f.unlink()
    (linked / "skills").rmdir()
    os.symlink(outside, linked / "skills")
    hard = make_toolkit("hard")
    os.link(outside / "hard.org", hard / "skills" / "leak.org")
    return toolkit_root


def test_list_reports_a_manifest_linked_out_as_broken(escapes, wbx):
    r = wbx("toolkit", "list")
    assert r.exit_code == 0
    assert [ln.split(" · ")[0] for ln in r.stdout.splitlines()] == ["good", "hard", "linked"]
    assert f"{escapes / 'evil' / 'manifest.org'}: symlink to a file outside the toolkit root" in r.stderr
    data = json.loads(wbx("toolkit", "list", "--json").stdout)
    assert {"path": str(escapes / "evil" / "manifest.org"), "line": 0, "field": "file",
            "problem": "symlink to a file outside the toolkit root"} in data["errors"]


def test_show_names_refused_skills_and_never_serves_them(escapes, wbx):
    r = wbx("toolkit", "show", "linked")
    assert r.exit_code == 0 and "secret" not in r.stdout.lower()
    assert f"{escapes / 'linked' / 'skills'}: symlink to a folder outside the toolkit root" in r.stderr
    bad = wbx("toolkit", "show", "linked", "secret")
    assert bad.exit_code == 2 and "symlink to a folder outside" in bad.stderr and "ZEBRA" not in bad.stdout
    r = wbx("toolkit", "show", "hard")
    assert ("leak" not in r.stdout
            and f"{escapes / 'hard' / 'skills' / 'leak.org'}: has 2 hard links" in r.stderr)
    bad = wbx("toolkit", "show", "hard", "leak")
    assert bad.exit_code == 2 and "hard links" in bad.stderr and "HARD-SECRET" not in bad.stdout
    shown = json.loads(wbx("toolkit", "show", "hard", "--json").stdout)
    assert [s["slug"] for s in shown["skills"]] == ["overview"] and "hard links" in shown["skill_problems"][0]
    bad = wbx("toolkit", "show", "evil")
    assert (bad.exit_code == 2
            and "evil/manifest.org: symlink to a file outside the toolkit root" in bad.stderr)


def test_search_skips_refused_skills_and_says_why(escapes, wbx):
    r = wbx("toolkit", "search", "ZEBRA")
    assert r.exit_code == 0 and [ln.split(" · ")[0] for ln in r.stdout.splitlines()] == ["good/overview"]
    assert "skills: symlink to a folder outside the toolkit root" in r.stderr
    r = wbx("toolkit", "search", "HARD-SECRET")
    assert r.exit_code == 1 and r.stdout == "" and "leak.org: has 2 hard links" in r.stderr


def test_verify_fails_on_each_refused_read(escapes, wbx):
    r = wbx("toolkit", "verify", "evil")
    assert (r.exit_code == 1 and "✗ manifest:" in r.stdout
            and "symlink to a file outside the toolkit root" in r.stdout)
    r = wbx("toolkit", "verify", "linked")
    assert (r.exit_code == 1 and "✗ skills: " in r.stdout
            and "symlink to a folder outside the toolkit root" in r.stdout)
    r = wbx("toolkit", "verify", "hard")
    assert r.exit_code == 1 and "leak.org: has 2 hard links" in r.stdout
    assert wbx("toolkit", "verify", "good").exit_code == 0
    every = wbx("toolkit", "verify", "--all")
    assert every.exit_code == 1 and all(f"{t}:" in every.stdout for t in ("good", "hard", "linked", "evil"))


class ToolkitVerb:
    """Adds ``wbx toolkit greet``, tries to take ``wbx toolkit list`` and a closed group's verb."""

    @hookimpl
    def wbcore_cli_commands(self, add):
        def greet(name: str) -> None:
            """Greet from a plugin."""
            typer.echo(f"greetings {name}")

        add("toolkit greet", greet)
        add("toolkit list", lambda: print("hijacked list"))
        add("identity steal", lambda: print("stolen"))


def test_a_plugin_adds_a_toolkit_subcommand_and_cannot_take_a_builtin_one(make_runtime, wbx):
    rt = make_runtime(plugins=[ToolkitVerb()])
    r = wbx("toolkit", "greet", "ada", runtime=rt)
    assert (r.exit_code, r.stdout) == (0, "greetings ada\n")
    warnings = sorted(r.stderr.strip().splitlines())
    assert warnings == [
        "wbx: warning: plugin ToolkitVerb: command 'toolkit list' not added: wbx toolkit has it built in "
        "(see wbx plugins)",
    ]  # only the toolkit group was built: the identity verb is not considered for this command line
    r = wbx("toolkit", "list", runtime=rt)
    assert r.exit_code == 0 and "hijacked" not in r.stdout  # the built-in list runs, on its fast path
    r = wbx("toolkit", "--help", runtime=rt)
    assert r.exit_code == 0 and "greet" in r.stdout and "Greet from a plugin." in r.stdout
    r = wbx("--help", runtime=rt)
    assert "command 'identity steal' not added: plugins add subcommands only to ['toolkit']" in r.stderr


def _serving_tools(cls_name: str) -> object:
    from wbcore_runtime.contract.records import ToolProviderService

    def factory(runtime: object) -> object:
        raise AssertionError("a provider served twice is never built")

    class Plugin:
        @hookimpl
        def wbcore_tool_providers(self):
            return [ToolProviderService("act", "ACT tools", factory)]

    Plugin.__name__ = Plugin.__qualname__ = cls_name
    return Plugin()


def test_plugins_names_every_name_two_plugins_serve(make_runtime, wbx):
    """Every registry's clashes show, the tool providers' included (the listing once named
    eight registries by hand and missed the rest)."""
    rt = make_runtime(plugins=[_serving_tools("ActOne"), _serving_tools("ActTwo")])
    r = wbx("plugins", runtime=rt)
    assert r.exit_code == 0
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("conflict:")]
    assert (line.startswith("conflict: tool provider 'act' provided by ") and "ActOne" in line
            and "ActTwo" in line)
    from wbcore_runtime.contract.records import RECORD_KINDS

    assert len(rt.collect_all()) == len(RECORD_KINDS)  # one registry per registry hook


def test_the_root_help_names_the_groups_it_does_not_build(tmp_path) -> None:
    """``wbx --help`` lists each group of GROUP_HELP with its line of help, and imports none of
    their modules (a fresh interpreter, as a user's command)."""
    probe = ("import sys; from wbcore_cli.app import main; code = main(['--help']); "
             "print(code, sorted(m for m in sys.modules if m.startswith('wbcore_cli.')))")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("WB_", "_WBX_"))},
           "WB_HOME": str(tmp_path / "h")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    *shown, last = done.stdout.rstrip("\n").splitlines()
    for group, line in GROUP_HELP.items():
        assert any(row.split()[:1] == [group] and line[:30] in row for row in shown), (group, done.stdout)
    code, _, loaded = last.partition(" ")
    unbuilt = {"toolkit", "toolkit_verbs", "provenance", "build", "agent", "identity", "registered"}
    assert code == "0" and not {f"wbcore_cli.{m}" for m in unbuilt} & set(ast.literal_eval(loaded)), last
