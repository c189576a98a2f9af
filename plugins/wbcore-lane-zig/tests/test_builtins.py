"""The reserved built-ins grep and jq: real WASM built by the c lane (grep from this
package's C, jq from upstream jq 1.8.2's pinned sources; see test_jq_upstream.py for its own suite)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, zig_cache: Path):
    from wbcore_runtime.runtime import Runtime

    home = tmp_path_factory.mktemp("wb-home")
    return Runtime.open(home=home, roots=[],
                        env={"WB_ZIG_CACHE": str(zig_cache), "PATH": os.environ.get("PATH", "")})


def grep(rt, arg: str, text: str) -> tuple[int, str]:
    res = rt.call("grep", [arg], text.encode())
    return res.exit_code, res.stdout.decode()


def jq(rt, arg: str, text: str) -> tuple[int, str]:
    res = rt.call("jq", [arg], text.encode())
    return res.exit_code, res.stdout.decode()


def test_builtins_are_registered_as_reserved_stdin1_commands(rt) -> None:
    rt.install_builtins(["grep", "jq"])
    for name in ("grep", "jq"):
        entry = rt.registry.lookup("command", name)
        assert entry.builtin and entry.arg_mode == "stdin1"
        assert rt.artifacts.read_verified(entry.sha256)[:4] == b"\0asm"


@pytest.mark.parametrize(
    "arg, text, want",
    [
        ("fo+", "foo\nbar\nfooo x\n", (0, "foo\nfooo x\n")),
        ("-i -n B", "foo\nbar\nBAR\n", (0, "2:bar\n3:BAR\n")),
        ("-c -v o", "foo\nbar\n", (0, "1\n")),
        ("-o [0-9]+", "a1b22c333\n", (0, "1\n22\n333\n")),
        ("-F a.b", "axb\na.b\n", (0, "a.b\n")),
        ("-w cat", "catalog\nthe cat sat\n", (0, "the cat sat\n")),
        ("-x abc", "abc\nabcd\n", (0, "abc\n")),
        ("-m 1 a", "a\na\n", (0, "a\n")),
        ("zzz", "abc\n", (1, "")),
        ("two words", "has two words here\nno\n", (0, "has two words here\n")),
    ],
)
def test_grep(rt, arg: str, text: str, want: tuple[int, str]) -> None:
    assert grep(rt, arg, text) == want


def test_grep_bad_pattern_is_a_usage_error(rt) -> None:
    res = rt.call("grep", ["("], b"x\n")
    assert res.exit_code == 2 and b"bad pattern" in res.stderr


@pytest.mark.parametrize(
    "arg, text, want",
    [
        (".a", '{"a":1}', "1\n"),
        ("-c .[] | select(.n > 1) | {name, n}", '[{"name":"a","n":1},{"name":"b","n":2}]',
         '{"name":"b","n":2}\n'),
        ('-r .items[] | "\\(.id): \\(.tags | join(","))"', '{"items":[{"id":1,"tags":["x","y"]}]}',
         "1: x,y\n"),
        ("map(.*2) | add", "[1,2,3]", "12\n"),
        ('-c keys, length, has("b")', '{"b":1,"a":2}', '["a","b"]\n2\ntrue\n'),
        ("-c group_by(.k) | map({k: .[0].k, n: length})", '[{"k":"a"},{"k":"b"},{"k":"a"}]',
         '[{"k":"a","n":2},{"k":"b","n":1}]\n'),
        ('-c if . > 2 then "big" elif . > 1 then "mid" else "small" end', "1 2 3", '"small"\n"mid"\n"big"\n'),
        ("-c del(.a, .b[0])", '{"a":1,"b":[1,2],"c":3}', '{"b":[2],"c":3}\n'),
        ("-r @csv", '[1,"a,b","q\\"x"]', '1,"a,b","q""x"\n'),
        ("-c .[1:3], .[-1:]", "[1,2,3,4]", "[2,3]\n[4]\n"),
        ("-c . as $x | [$x, ($x|length)]", '"héllo"', '["héllo",5]\n'),
        ('-c .x // "default"', '{"x":false}', '"default"\n'),
        ('-c try error("boom") catch .', "null", '"boom"\n'),
        ("-c [limit(2; .[])], first(.[]), [range(3)]", "[5,6,7]", "[5,6]\n5\n[0,1,2]\n"),
        ("-c with_entries(.value += 1)", '{"a":1,"b":2}', '{"a":2,"b":3}\n'),
        ("-c .a.b = 1 | .c |= 5", "{}", '{"a":{"b":1},"c":5}\n'),
        ("-c [..|numbers]", "[1,[2,{\"x\":3}]]", "[1,2,3]\n"),
        ("-s -c map(.a)", '{"a":1}\n{"a":2}', "[1,2]\n"),
        ("-r .[] | test(\"^a.c$\")", '["abc","xbc"]', "true\nfalse\n"),
        (".", '{"a":[1,{"b":null}]}', '{\n  "a": [\n    1,\n    {\n      "b": null\n    }\n  ]\n}\n'),
    ],
)
def test_jq(rt, arg: str, text: str, want: str) -> None:
    code, out = jq(rt, arg, text)
    assert (code, out) == (0, want)


@pytest.mark.parametrize(
    "arg, text, want",
    [
        # what the old subset lacked: reduce, foreach, def, label, regex captures, paths(f), dates
        ("-c reduce .[] as $x (0; . + $x)", "[1,2,3]", "6\n"),
        ("-c [foreach .[] as $x (0; . + $x)]", "[1,2,3]", "[1,3,6]\n"),
        ("-c def twice(f): f | f; map(twice(. * 3))", "[1,2]", "[9,18]\n"),
        ("-c [label $out | .[] | if . > 2 then ., break $out else . end]", "[1,2,3,4]", "[1,2,3]\n"),
        ('-c capture("(?<y>[0-9]+)-(?<m>[0-9]+)")', '"2024-05"', '{"y":"2024","m":"05"}\n'),
        ('-c [paths(type == "number")]', '{"a":[1,{"b":2}]}', '[["a",0],["a",1,"b"]]\n'),
        ('-r todate', "1700000000", "2023-11-14T22:13:20Z\n"),
        ("-c [splits(\", *\")]", '"a, b,c"', '["a","b","c"]\n'),
        ("-n -c [limit(3; repeat(1))]", "", "[1,1,1]\n"),
        # options with values, quoted on the first line
        ("-c --arg who 'big world' --argjson n 2 {who: $who, n: $n}", "null", '{"who":"big world","n":2}\n'),
        ("--tab .", '{"a":1}', '{\n\t"a": 1\n}\n'),
        ("-1 + .", "3", "2\n"),  # a leading -digit starts the filter
        ("-e .a", '{"a":1}', "1\n"),
    ],
)
def test_jq_is_the_real_jq(rt, arg: str, text: str, want: str) -> None:
    assert jq(rt, arg, text) == (0, want)


def test_jq_reports_its_upstream_version(rt) -> None:
    res = rt.call("jq", ["--version"], b"")
    assert res.exit_code == 0 and res.stdout == b"jq-1.8.2\n"


def test_jq_without_a_first_line_is_a_usage_error(rt) -> None:
    res = rt.call("jq", [], b"")
    assert res.exit_code == 2 and b"first stdin line" in res.stderr


def test_jq_output_is_valid_json_for_a_real_document(rt) -> None:
    doc = {"name": "wb", "n": 3.5, "tags": ["a", "ü", "\u0001"], "nested": {"deep": [1, 2, {"x": None}]},
           "t": True}
    code, out = jq(rt, ".", json.dumps(doc))
    assert code == 0 and json.loads(out) == doc


@pytest.mark.parametrize(
    "arg, text, code",
    # upstream jq 1.8: 2 usage, 3 compile error, 5 runtime error and invalid JSON input
    [(".a[", "{}", 3), (".", "{bad json", 5), (".a + 1", '{"a":"x"}', 5), ("nosuchfn", "1", 3),
     ("-Z .", "1", 2)],
)
def test_jq_errors_have_jq_exit_codes(rt, arg: str, text: str, code: int) -> None:
    res = rt.call("jq", [arg], text.encode())
    assert res.exit_code == code and res.stderr


def wbox(rt, script: str, stdin: bytes = b"") -> tuple[int, str, str]:
    res = rt.call("wbox", ["-c", script], stdin)
    return res.exit_code, res.stdout.decode(), res.stderr.decode()


def test_wbox_pipes_registered_commands(rt) -> None:
    assert wbox(rt, 'jq -c ".a | map(.*2)" | grep 4', b'{"a":[1,2,3]}') == (0, "[2,4,6]\n", "")
    assert wbox(rt, "echo hello | upper")[:2] == (0, "HELLO\n")


def test_wbox_sequencing_and_status(rt) -> None:
    assert (wbox(rt, "false || echo fallback; true && echo ok; false && echo never; echo $?")[1]
            == "fallback\nok\n1\n")
    code, out, err = wbox(rt, "nosuchcmd; echo status $?")
    assert out == "status 127\n" and "not a registered command" in err
    assert wbox(rt, "echo a; exit 3; echo b")[:2] == (3, "a\n")
    assert wbox(rt, "nosuchcmd")[0] == 66  # 127 leaves as EX_NOINPUT (WASI exit codes stop at 125)


def test_wbox_variables_and_quoting(rt) -> None:
    script = "X=world; Y='a  b'; echo \"hi $X\" '$X' ${X}s \"$Y\"; echo $?"
    assert wbox(rt, script)[1] == "hi world $X worlds a  b\n0\n"


def test_wbox_redirection_lives_in_the_vfs(rt) -> None:
    script = ("echo one > notes.txt; echo two >> notes.txt; upper < notes.txt; cat notes.txt | grep -c o; "
              "nosuch 2> tmp:err.txt; cat tmp:err.txt")
    code, out, err = wbox(rt, script)
    assert out.splitlines()[:3] == ["ONE", "TWO", "2"]
    assert "not a registered command" in out.splitlines()[3]


def test_wbox_syntax_errors_are_usage_errors(rt) -> None:
    for script in ("echo 'open", "| upper", "echo a &&", "echo a > ", "sleep 1 &"):
        code, _, err = wbox(rt, script)
        assert code == 2 and err.startswith("wbox:"), (script, err)


def test_wbox_gets_only_its_caps(rt) -> None:
    wbox_call = rt.resolve("command", "wbox")
    assert wbox_call.entry.builtin and wbox_call.caps == frozenset({"commands", "vfs"})
    assert rt.resolve("command", "jq").caps == frozenset()


def test_builtins_ship_no_copy_of_the_dock_header() -> None:
    from wbcore_lane_zig.builtins import source_dir

    assert not (source_dir() / "wb_dock.h").exists(), "the c lane puts wbcore's wb_dock.h on the include path"
