"""The svelte lane: components compiled by the Svelte compiler inside QuickJS, rendered on
the server by Svelte's runtime bundled from the same pinned tarballs, packed as js."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.toolkit.manifest import load
from wbcore_testing.fixtures import manifest_text

from wbcore_testing.guests import guest_runner
from wbcore_lane_js import artifact, svelte
from wbcore_lane_js.runner import run_artifact
from wbcore_lane_js.svelte import SvelteLane

REPO_TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"

needs_tarballs = pytest.mark.skipif(bool(svelte.missing()),
                                    reason="svelte tarballs not fetched: run `python dev.py warm` "
                                    "(or `python -m wbcore_lane_js fetch svelte`) once; tests use no network")


def build(lane: SvelteLane, tk: Path, out: Path, entry: str | None = None):
    s = tk / "src"
    return lane.build(BuildRequest(manifest=load(tk / "manifest.org"),
                                   source=ResolvedSource(digest=tree_digest(s), dir=s, entry=entry),
                                   outdir=out))


def toolkit(tmp_path: Path, files: dict[str, str], name: str = "sv") -> Path:
    tk = tmp_path / name
    (tk / "src").mkdir(parents=True)
    (tk / "manifest.org").write_text(manifest_text(name, exec="command",
                                                   extra={"CLI_BIN": name, "BUILD_LANG": "svelte",
                                                          "BUILD_SRC": "path:src"},
                                                   drawer={"CLI_BIN": name}))
    for rel, text in files.items():
        (tk / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tk / "src" / rel).write_text(text)
    return tk


APP = """<script>
  import Item from './Item.svelte';
  let { title, items = [], show = false } = $props();
</script>
<h1>{title}</h1>
<ul>{#each items as item, i}<Item {item} {i} />{/each}</ul>
{#if show}<p class="on">shown</p>{:else}<p>hidden</p>{/if}
"""
ITEM = """<script>
  let { item, i } = $props();
</script>
<li class:first={i === 0}>{i}: {item}</li>
"""


def test_svelte_lane_is_listed_and_available(make_runtime):
    rec = make_runtime(plugins=["lane-js", "wasmtime"]).lanes.get("svelte")
    assert rec.available().ok, rec.available().reason
    assert rec.kind == "compile-and-run" and "svelte" in rec.where and "QuickJS" in rec.where


@needs_tarballs
def test_a_component_with_props_each_and_if_renders(tmp_path, wb_home):
    tk = toolkit(tmp_path, {"App.svelte": APP, "Item.svelte": ITEM})
    out = build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")
    files = artifact.unpack(out.artifact.read_bytes()).files
    assert "App.svelte.js" in files and "App.svelte" not in files
    assert any(f.startswith("__wb_svelte/svelte/src/internal/server/") for f in files)
    props = {"title": "Fruit <&>", "items": ["apple", "pear"], "show": True}
    res = run_artifact(out.artifact, ["sv"], stdin=json.dumps(props).encode(), home=wb_home,
                       guests=guest_runner())
    assert res.exit_code == 0, res.stderr
    html = res.stdout.decode()
    assert "<h1>Fruit &lt;&amp;></h1>" in html
    assert '<li class="first">0: apple</li>' in html and "<li>1: pear</li>" in html
    assert '<p class="on">shown</p>' in html and "hidden" not in html
    res = run_artifact(out.artifact, ["sv"], stdin=b'{"title": "none"}', home=wb_home, guests=guest_runner())
    assert res.exit_code == 0 and "<p>hidden</p>" in res.stdout.decode() and "<li" not in res.stdout.decode()
    bad = run_artifact(out.artifact, ["sv"], stdin=b"[1, 2]", home=wb_home, guests=guest_runner())
    assert bad.exit_code == 2 and b"must be a JSON object" in bad.stderr
    bad = run_artifact(out.artifact, ["sv"], stdin=b"{nope", home=wb_home, guests=guest_runner())
    assert bad.exit_code == 2 and b"stdin is not JSON" in bad.stderr


@needs_tarballs
def test_a_rune_module_is_compiled_with_compile_module(tmp_path, wb_home):
    counter = ("export function counter(start) {\n  let n = $state(start);\n"
               "  return { get n() { return n; }, up() { n += 1; } };\n}\n")
    app = ("<script>\n  import { counter } from './counter.svelte.js';\n  let { start = 0 } = $props();\n"
           "  const c = counter(start);\n  c.up();\n</script>\n<b>{c.n}</b>\n")
    tk = toolkit(tmp_path, {"App.svelte": app, "counter.svelte.js": counter})
    out = build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")
    assert "$state" not in artifact.unpack(out.artifact.read_bytes()).files["counter.svelte.js"]
    res = run_artifact(out.artifact, ["sv"], stdin=b'{"start": 41}', home=wb_home, guests=guest_runner())
    assert res.exit_code == 0 and "<b>42</b>" in res.stdout.decode(), res.stderr
    (tk / "src" / "App.svelte.js").write_text(counter)
    with pytest.raises(InvalidArgs, match="both a rune module"):
        build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out2")


@needs_tarballs
def test_script_lang_ts_is_stripped_by_svelte(tmp_path, wb_home):
    app = ("<script lang=\"ts\">\n  interface Props { n?: number }\n  let { n = 1 }: Props = $props();\n"
           "  const twice = (v: number): number => v * 2;\n</script>\n<p>{twice(n)}</p>\n")
    out = build(SvelteLane(home=wb_home, guests=guest_runner()), toolkit(tmp_path, {"App.svelte": app}),
                tmp_path / "out")
    res = run_artifact(out.artifact, ["sv"], stdin=b'{"n": 21}', home=wb_home, guests=guest_runner())
    assert res.exit_code == 0 and "<p>42</p>" in res.stdout.decode(), res.stderr


@needs_tarballs
def test_a_syntax_error_is_located_file_line(tmp_path, wb_home):
    tk = toolkit(tmp_path, {"App.svelte": "<h1>ok</h1>\n<ul>\n{#each items as}\n</ul>\n"})
    with pytest.raises(BuildFailed) as err:
        build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")
    assert "App.svelte:3:" in str(err.value)
    assert not (tmp_path / "out").exists()


@needs_tarballs
def test_own_main_js_may_import_svelte_server(tmp_path, wb_home):
    main = ("import { render } from 'svelte/server';\nimport App from './App.svelte';\n"
            "console.log(render(App, { props: { title: scriptArgs[1] } }).body);\n")
    tk = toolkit(tmp_path, {"App.svelte": APP, "Item.svelte": ITEM, "main.js": main})
    out = build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")
    res = run_artifact(out.artifact, ["sv", "Hi"], home=wb_home, guests=guest_runner())
    assert res.exit_code == 0 and "<h1>Hi</h1>" in res.stdout.decode(), res.stderr


@needs_tarballs
def test_report_html_toolkit(tmp_path, wb_home):
    tk = REPO_TOOLKITS / "report-html"
    if not tk.is_dir():
        pytest.skip("toolkits/report-html is not beside this plugin")
    out = build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")
    props = {"title": "Q3", "rows": [{"region": "north", "sales": 12}, {"region": "<south>", "sales": 30}],
             "note": "draft"}
    res = run_artifact(out.artifact, ["report-html"], stdin=json.dumps(props).encode(), home=wb_home,
                       guests=guest_runner())
    assert res.exit_code == 0, res.stderr
    html = res.stdout.decode()
    assert "<h1>Q3</h1>" in html and "<th>region</th>" in html and "<th>sales</th>" in html
    assert '<td class="num">12</td>' in html and "<td>&lt;south></td>" in html
    assert "<td>42</td>" in html and "2 rows" in html and "<footer>draft</footer>" in html
    empty = run_artifact(out.artifact, ["report-html"], stdin=b"{}", home=wb_home, guests=guest_runner())
    assert empty.exit_code == 0 and "No rows." in empty.stdout.decode()


@needs_tarballs
def test_a_toolkit_cannot_plant_the_runtime_or_the_entry(tmp_path, wb_home):
    """The bundled runtime lives under ``__wb_svelte/`` and the generated entry has a fixed
    name: a toolkit's own file there would replace Svelte's code, so it is refused."""
    for rel in ("__wb_svelte/svelte/src/server/index.js", "__wb_svelte_main.mjs"):
        tk = toolkit(tmp_path / rel.replace("/", "_"),
                     {"App.svelte": "<p>x</p>\n",
                      rel: "export const render = () => ({ body: 'PLANTED' });\n"})
        with pytest.raises(InvalidArgs, match="reserves"):
            build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")


def test_no_svelte_file_is_refused(tmp_path, wb_home):
    tk = toolkit(tmp_path, {"main.js": "console.log(1);\n"})
    with pytest.raises(InvalidArgs, match="no .svelte files"):
        build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")


# --- the compiler is fetched, pinned, never vendored -----------------------------------

def test_svelte_is_not_in_the_package():
    import wbcore_lane_js

    pkg = Path(wbcore_lane_js.__file__).parent
    assert not [p for p in pkg.rglob("*")
                if "svelte" in p.name and p.name not in ("svelte.py", "svelte.mjs", "svelte-main.mjs")
                and "__pycache__" not in p.parts]


def _fake_tgz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo("package/" + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_a_tarball_that_is_not_the_pinned_one_is_refused_and_nothing_kept(tmp_path):
    tgz = _fake_tgz(tmp_path / svelte.SVELTE.tgz,
                    {"package.json": b"{}", svelte.COMPILER: b"globalThis.svelte = {}; /* planted */"})
    env = {"WB_NPM_CACHE": str(tmp_path / "npm")}
    with pytest.raises(InvalidArgs, match="is not the pinned"):
        svelte.fetch(env, tarballs=[tgz])
    assert svelte.SVELTE in svelte.missing(env)
    assert not [p for p in (tmp_path / "npm").iterdir()], "nothing kept, no temp leftovers"
    with pytest.raises(InvalidArgs, match="not one of the pinned tarballs"):
        svelte.fetch(env, tarballs=[_fake_tgz(tmp_path / "svelte-4.0.0.tgz", {})])


def test_a_planted_compiler_makes_the_lane_unavailable_and_is_never_read(tmp_path, monkeypatch, wb_home):
    where = tmp_path / "npm"
    where.mkdir()
    for pkg in svelte.PACKAGES:  # the right names, the wrong bytes
        _fake_tgz(where / pkg.tgz,
                  {"package.json": b'{"exports": {}}',
                   svelte.COMPILER: b"globalThis.svelte = {compile() {}};"})
    monkeypatch.setenv("WB_NPM_CACHE", str(where))
    assert set(svelte.missing()) == set(svelte.PACKAGES)
    got = svelte.check()
    assert (not got.ok and "is not the pinned svelte" in got.reason
            and "wbcore_lane_js fetch svelte" in got.reason)
    with pytest.raises(InvalidArgs, match="is not the pinned"):
        svelte.members(svelte.SVELTE)
    tk = toolkit(tmp_path, {"App.svelte": "<p>x</p>\n"})
    with pytest.raises(InvalidArgs, match="is not the pinned"):
        build(SvelteLane(home=wb_home, guests=guest_runner()), tk, tmp_path / "out")


def test_a_fifo_planted_as_a_tarball_is_refused_at_once(tmp_path, monkeypatch):
    """A cached tarball is read once, capped and never through a FIFO: one planted at its name
    hung every look at the lane (``wbx lanes``, a build) waiting for a writer."""
    import os
    import threading

    where = tmp_path / "npm"
    where.mkdir()
    os.mkfifo(where / svelte.SVELTE.tgz)
    monkeypatch.setenv("WB_NPM_CACHE", str(where))
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(svelte.check()), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # still blocked opening the FIFO: let it go so the test process can end
        os.close(os.open(where / svelte.SVELTE.tgz, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail("checking the lane waited on a FIFO planted as a tarball")
    assert not got[0].ok and "is not the pinned svelte" in got[0].reason, got  # type: ignore[attr-defined]


def test_cache_key_names_the_pinned_tarballs(wb_home):
    v = SvelteLane(home=wb_home, guests=guest_runner()).version
    for pkg in svelte.PACKAGES:
        assert f"{pkg.name} {pkg.version} ({pkg.sha256[:12]})" in v
