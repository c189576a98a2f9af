"""The ts lane: TypeScript type-stripped by typescript.js inside QuickJS, then the js lane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.toolkit.manifest import load
from wbcore_testing.fixtures import manifest_text

from wbcore_testing.guests import guest_runner
from wbcore_lane_js import artifact
from wbcore_lane_js.runner import run_artifact
from wbcore_lane_js.ts import TsLane

REPO_TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"


def build(lane: TsLane, tk: Path, out: Path, entry: str | None = None):
    s = tk / "src"
    return lane.build(BuildRequest(manifest=load(tk / "manifest.org"),
                                   source=ResolvedSource(digest=tree_digest(s), dir=s, entry=entry),
                                   outdir=out))


def test_ts_lane_is_listed_and_available(make_runtime):
    rec = make_runtime(plugins=["lane-js", "wasmtime"]).lanes.get("ts")
    assert rec.available().ok, rec.available().reason
    assert rec.kind == "compile-and-run" and "typescript" in rec.where


def test_types_erased_enums_emitted_and_syntax_errors_located(tmp_path, wb_home):
    tk = tmp_path / "tstool"
    (tk / "src").mkdir(parents=True)
    (tk / "manifest.org").write_text(manifest_text("tstool", exec="command",
                                                   extra={"CLI_BIN": "tstool", "BUILD_LANG": "ts",
                                                          "BUILD_SRC": "path:src"},
                                                   drawer={"CLI_BIN": "tstool"}))
    (tk / "src" / "util.ts").write_text("export enum Mode { Up = 'UP', Down = 'DOWN' }\nexport interface P { "
                                        "v: number }\nexport const twice = <T extends P>(p: T): number => "
                                        "p.v * 2;\n")
    (tk / "src" / "main.ts").write_text("import { Mode, twice, type P } from './util.ts';\n"
                                        "class Box { constructor(private readonly p: P) {} get value(): "
                                        "number { return twice(this.p); } }\nconst n: number = await "
                                        "Promise.resolve(new Box({ v: 21 }).value satisfies "
                                        "number);\nconsole.log(Mode.Up, n, (scriptArgs as "
                                        "string[]).slice(1).join(','));\n")
    lane = TsLane(home=wb_home, guests=guest_runner())
    out = build(lane, tk, tmp_path / "out")
    assert "main.ts" not in artifact.unpack(out.artifact.read_bytes()).files
    res = run_artifact(out.artifact, ["tstool", "a"], home=wb_home, guests=guest_runner())
    assert (res.exit_code, res.stdout) == (0, b"UP 42 a\n"), res.stderr
    (tk / "src" / "util.ts").write_text("export const twice = (p: { v: number }): number => {\n  return p.v "
                                        "* ;\n};\n")
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out2")
    assert "util.ts:2:" in str(err.value)


@pytest.fixture(scope="module")
def mdtext(tmp_path_factory) -> tuple[Path, Path]:
    tk = REPO_TOOLKITS / "mdtext"
    if not tk.is_dir():
        pytest.skip("toolkits/mdtext is not beside this plugin")
    home = tmp_path_factory.mktemp("home")
    return build(TsLane(home=home, guests=guest_runner()), tk, home / "out").artifact, home


DOC = """Guide
=====

Some *intro* with a [link](https://example.org "t") and `code [x](y)`.

## Install

- step **one**
  - nested [ref][r]

```sh
# not a heading
```

![logo](img/logo.png)

[r]: https://ref.example/
"""


def md(mdtext, *args: str) -> tuple[int, str]:
    art, home = mdtext
    res = run_artifact(art, ["mdtext", *args], stdin=DOC.encode(), home=home, guests=guest_runner())
    return res.exit_code, res.stdout.decode()


def test_mdtext_toolkit(mdtext):
    code, plain = md(mdtext, "plain")
    assert code == 0
    assert plain.splitlines()[:3] == ["GUIDE", "", "Some intro with a link and code [x](y)."]
    assert "  - nested ref" in plain and "    # not a heading" in plain
    assert md(mdtext, "outline") == (0, "Guide  (line 1)\n  Install  (line 6)\n")
    assert md(mdtext, "links")[1].splitlines() == [
        "4\tlink\tlink\thttps://example.org", "9\tlink\tref\thttps://ref.example/",
        "15\timage\tlogo\timg/logo.png"]
    stats = json.loads(md(mdtext, "stats")[1])
    assert (stats["headings"], stats["links"], stats["images"], stats["code_blocks"]) == (2, 2, 1, 1)
    assert md(mdtext, "nope")[0] == 2


def test_a_reference_path_outside_the_tree_is_refused(tmp_path, wb_home):
    """``/// <reference path="../../outside.ts" />`` (issue 11): refused with file:line; the
    outside file's text never reaches the artifact."""
    (tmp_path / "outside.ts").write_text('export const LEAK = "HOST-SECRET-TS";\n')
    tk = tmp_path / "a" / "reftool"
    (tk / "src").mkdir(parents=True)
    (tk / "manifest.org").write_text(manifest_text("reftool", exec="command",
                                                   extra={"CLI_BIN": "reftool", "BUILD_LANG": "ts",
                                                          "BUILD_SRC": "path:src"},
                                                   drawer={"CLI_BIN": "reftool"}))
    (tk / "src" / "main.ts").write_text('/// <reference path="../../outside.ts" />\nconsole.log("hi");\n')
    lane = TsLane(home=wb_home, guests=guest_runner())
    with pytest.raises(Exception,
                       match=r'main.ts:1: /// <reference path="../../outside.ts"> names a file '
                             r'outside') as err:
        build(lane, tk, tmp_path / "out")
    assert "HOST-SECRET-TS" not in str(err.value) and not (tmp_path / "out").exists()
    (tk / "src" / "main.ts").write_text('/// <reference path="/etc/passwd" />\nconsole.log("hi");\n')
    with pytest.raises(Exception, match="names a file outside"):
        build(lane, tk, tmp_path / "out")
    (tk / "src" / "types.d.ts").write_text("declare const X: number;\n")
    (tk / "src" / "main.ts").write_text('/// <reference path="./types.d.ts" />\nconsole.log("hi");\n')
    assert build(lane, tk, tmp_path / "out2").artifact.is_file()  # inside the tree: fine


# --- the compiler is fetched, pinned, never vendored -----------------------------------

def test_compiler_is_not_in_the_package():
    import wbcore_lane_js

    pkg = Path(wbcore_lane_js.__file__).parent
    assert not list(pkg.rglob("typescript*.js")), "the compiler is fetched from npm, not shipped"


def test_a_tarball_that_is_not_the_pinned_one_is_refused_and_nothing_kept(tmp_path):
    import io
    import tarfile

    from wbcore_runtime.contract.errors import InvalidArgs

    from wbcore_lane_js import ts

    # a well-formed npm-style tarball whose compiler is not the pinned one
    tgz = tmp_path / "typescript-5.9.3.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        for name in ts.KEEP:
            data = b"var ts = {}; /* planted */" if name.endswith(".js") else b"license"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    env = {"WB_NPM_CACHE": str(tmp_path / "npm")}
    with pytest.raises(InvalidArgs, match="is not the pinned"):
        ts.fetch(env, tarball=tgz)
    assert ts.compiler(env) is None
    assert not (tmp_path / "npm" / f"typescript-{ts.TYPESCRIPT_VERSION}").exists()
    assert not [p for p in (tmp_path / "npm").iterdir()], "no temp leftovers"


def test_a_compiler_changed_after_the_check_is_refused_where_it_is_copied(tmp_path, monkeypatch):
    import os
    import shutil

    from wbcore_runtime.contract.errors import InvalidArgs

    from wbcore_lane_js import ts

    real = ts.compiler()
    if real is None:
        pytest.skip(ts.compiler_ok())
    kept = tmp_path / "npm" / f"typescript-{ts.TYPESCRIPT_VERSION}" / "typescript.js"
    kept.parent.mkdir(parents=True)
    shutil.copyfile(real, kept)
    monkeypatch.setenv("WB_NPM_CACHE", str(tmp_path / "npm"))
    assert ts.compiler() == kept  # checked: the stamp (inode, mtime) is kept for this process
    st = kept.stat()
    with kept.open("r+b") as fh:  # rewritten in place, its mtime set back: the stamp still matches
        fh.write(b"globalThis.ts={};/*planted*/")
    os.utime(kept, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ts.compiler() == kept
    with pytest.raises(InvalidArgs, match="changed after it was checked"):
        ts.copy_compiler(kept, tmp_path / "copy.js")
    good = tmp_path / "good.js"
    ts.copy_compiler(real, good)
    assert good.read_bytes() == real.read_bytes()


def test_a_planted_compiler_makes_the_lane_unavailable(tmp_path, monkeypatch):
    from wbcore_lane_js import ts

    where = tmp_path / "npm" / f"typescript-{ts.TYPESCRIPT_VERSION}"
    where.mkdir(parents=True)
    (where / "typescript.js").write_text("globalThis.ts = { transpileModule() { /* planted */ } };")
    monkeypatch.setenv("WB_NPM_CACHE", str(tmp_path / "npm"))
    assert ts.compiler() is None
    got = ts.check()
    assert not got.ok and "not the pinned typescript" in got.reason and "wbcore_lane_js fetch" in got.reason


def test_a_fifo_planted_as_the_compiler_is_refused_at_once(tmp_path, monkeypatch):
    """Checking the kept compiler reads it once, capped and never through a FIFO: one planted
    at its name hung every look at the lane (``wbx lanes``, a build) waiting for a writer."""
    import os
    import threading

    from wbcore_lane_js import ts

    where = tmp_path / "npm" / f"typescript-{ts.TYPESCRIPT_VERSION}"
    where.mkdir(parents=True)
    os.mkfifo(where / "typescript.js")
    monkeypatch.setenv("WB_NPM_CACHE", str(tmp_path / "npm"))
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(ts.check()), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # still blocked opening the FIFO: let it go so the test process can end
        os.close(os.open(where / "typescript.js", os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail("checking the lane waited on a FIFO planted as the compiler")
    assert not got[0].ok and "not the pinned typescript" in got[0].reason, got  # type: ignore[attr-defined]
