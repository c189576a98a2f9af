"""wbx fan (JSON lines) and pipelines (Python and Org, wbx pipeline run)."""

from __future__ import annotations

import json

import pytest
from fabric_guests import BRACE, ECHO, K_UPPER

from wbcore_fabric_local import pipeline as pl
from wbcore_runtime.contract.errors import ManifestError


def test_wbx_fan_commands(rt, register, wbx):
    register("echo", ECHO)
    lines = [json.dumps({"argv": [], "stdin": f"line {i}"}) for i in range(10)]
    lines.insert(3, "{not json")
    res = wbx("fan", "echo", "--width", "2", runtime=rt, input="\n".join(lines) + "\n")
    out = [json.loads(x) for x in res.stdout.splitlines()]
    assert res.exit_code == 1 and "1 of 11 inputs failed" in res.stderr
    assert [o["i"] for o in out] == list(range(11))
    assert out[3]["error"]["kind"] == "invalid-args" and "line 4" in out[3]["error"]["message"]
    assert out[0] == {"i": 0, "exit": 0, "stdout": "line 0"}
    assert out[10]["stdout"] == "line 9"


def test_wbx_fan_kernel_threads_engine(rt, register, wbx):
    register("kup", K_UPPER, kind="kernel")
    lines = [json.dumps({"input": "abc"}), json.dumps({"input_base64": "eHl6"})]
    res = wbx("fan", "kup", "--kernel", "--engine", "threads", "--width", "2", runtime=rt,
              input="\n".join(lines))
    assert res.exit_code == 0, res.stderr
    assert [json.loads(x) for x in res.stdout.splitlines()] == [{"i": 0, "output": "ABC"},
                                                                {"i": 1, "output": "XYZ"}]


def test_python_pipeline_pipe_fan_out_pipe(rt, register):
    register("echo", ECHO)
    register("brace", BRACE)
    p = pl.Pipeline.named("analysis", "upper").fan_out(["echo", "brace"]).pipe("echo")
    res = p.run(rt, b"hello")
    assert res.success, res.error
    assert json.loads(res.output) == ["HELLO", {"v": "HELLO"}]
    assert [s.op for s in res.stages] == ["pipe", "fan_out", "pipe"]
    assert all(s.wall_s > 0 for s in res.stages)
    assert (res.folder / "01-fan_out.out").read_bytes() == res.stages[1].output
    assert json.loads((res.folder / "result.json").read_text())["success"] is True


def test_a_failing_box_ends_the_run_and_says_where(rt, register):
    register("echo", ECHO)
    res = pl.Pipeline.named("p", "echo").pipe("echo").run(rt, b"!trap")
    assert not res.success and "stage 0 (pipe) box 'echo'" in res.error and "unreachable" in res.error
    assert len(res.stages) == 1 and res.output == b""


ORG = """#+TITLE: pipelines

* analysis :pipeline:
** pipe :stage:
   :PROPERTIES:
   :RUN: upper
   :END:
** fan_out :stage:
*** as text
    :PROPERTIES:
    :RUN: echo
    :END:
*** as an object
    :PROPERTIES:
    :RUN: brace
    :END:
** pipe :stage:
   :PROPERTIES:
   :RUN: echo
   :END:
"""


def test_org_pipeline_runs_from_the_cli(rt, register, wbx, tmp_path):
    register("echo", ECHO)
    register("brace", BRACE)
    f = tmp_path / "analysis.org"
    f.write_text(ORG)
    (tmp_path / "in.txt").write_text("hello fabric")
    res = wbx("pipeline", "run", str(f), "--input", str(tmp_path / "in.txt"), runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout) == ["HELLO FABRIC", {"v": "HELLO FABRIC"}]
    assert "stage 1 fan_out" in res.stderr and "ms" in res.stderr
    res = wbx("pipeline", "run", str(f), "--input", str(tmp_path / "in.txt"), "--json", runtime=rt)
    record = json.loads(res.stdout)
    assert record["success"] and [s["op"] for s in record["stages"]] == ["pipe", "fan_out", "pipe"]
    assert [b["box"] for b in record["stages"][1]["boxes"]] == ["echo", "brace"]


@pytest.mark.parametrize(("text", "problem"), [
    ("* p :pipeline:\n** pipe :stage:\n", "names no box"),
    ("* p :pipeline:\n** sideways\n   :PROPERTIES:\n   :RUN: x\n   :END:\n", "not a stage"),
    ("* p :pipeline:\n** fan_out :stage:\n", "fan_out needs sub-headings"),
    ("* p :pipeline:\n", "has no stage headings"),
    ("* nothing here\n", "no heading tagged :pipeline:"),
    ("* p :pipeline:\n** pipe\n   :PROPERTIES:\n   :RUN: x 'unclosed\n   :END:\n", "cannot split"),
])
def test_bad_org_pipelines_say_where_and_what(text, problem):
    with pytest.raises(ManifestError, match=problem) as info:
        pl.parse(text, "p.org")
    assert "p.org:" in info.value.message


def test_fan_out_merge_parses_json_else_keeps_text():
    assert (json.loads(pl.merge([b'{"a": 1}', b"plain", b"[1, 2]", b"\xff"]))
            == [{"a": 1}, "plain", [1, 2], "\ufffd"])


def test_a_kernel_box_in_a_pipeline(rt, register):
    register("kup", K_UPPER, kind="kernel")
    register("echo", ECHO)
    res = (pl.Pipeline.named("k", pl.Box("kup", kind="kernel"))
           .fan_out(["echo", pl.Box("kup", kind="kernel")]).run(rt, b"abc", keep=False))
    assert res.success and json.loads(res.output) == ["ABC", "ABC"] and res.folder is None
