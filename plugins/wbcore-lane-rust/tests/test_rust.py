"""The rust lane: rustc / cargo for wasm32-wasi(p1) inside the build sandbox."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.toolkit.manifest import load
from wbcore_testing.fixtures import manifest_text

from wbcore_lane_rust import lane as rlane
from wbcore_lane_rust.toolchain import Rust, find

MAIN = r"""
use std::io::Read;
fn main() {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap();
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!("{}|{}", args.join(","), s.trim().to_uppercase());
    if args.len() > 2 { std::process::exit(3); }
}
"""


def ready() -> str:
    rust = find()
    return rust if isinstance(rust, str) else ""


needs_toolchain = pytest.mark.skipif(bool(ready()), reason=f"rust lane unavailable here: {ready()}")
#: the installed build sandbox; skips, saying why, where there is none
needs_sandbox = pytest.mark.usefixtures("build_sandbox")


@pytest.fixture
def tk(tmp_path: Path) -> Path:
    d = tmp_path / "rstool"
    (d / "src").mkdir(parents=True)
    (d / "manifest.org").write_text(manifest_text("rstool", exec="command",
                                                  extra={"CLI_BIN": "rstool", "BUILD_LANG": "rust",
                                                         "BUILD_SRC": "path:src"},
                                                  drawer={"CLI_BIN": "rstool"}))
    (d / "src" / "main.rs").write_text(MAIN)
    return d


@pytest.fixture
def lane(make_runtime):
    rt = make_runtime()  # every installed plugin: the lane takes its sandbox from the runtime
    return rt.lanes.get("rust").factory(rt)


def build(lane, tk: Path, out: Path, flags: tuple[str, ...] = ()):
    s = tk / "src"
    return lane.build(BuildRequest(manifest=load(tk / "manifest.org"),
                                   source=ResolvedSource(digest=tree_digest(s), dir=s), outdir=out,
                                   flags=flags))


def run(wasm: Path, argv: list[str], stdin: bytes, tmp_path: Path) -> tuple[int, bytes]:
    import wasmtime

    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    wasi.argv = argv
    (tmp_path / "in").write_bytes(stdin)
    wasi.stdin_file = str(tmp_path / "in")
    wasi.stdout_file = str(tmp_path / "stdout")
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    inst = linker.instantiate(store, wasmtime.Module.from_file(engine, str(wasm)))
    code = 0
    try:
        inst.exports(store)["_start"](store)
    except wasmtime.ExitTrap as exc:
        code = exc.code
    return code, (tmp_path / "stdout").read_bytes()


def test_availability_names_what_to_install(make_runtime, wbx, tk, tmp_path):
    rt = make_runtime(plugins=["lane-rust"])  # the lane alone with the core: no plugin serves a sandbox
    avail = rt.lanes.get("rust").availability(rt)
    assert not avail.ok and "no build sandbox is installed; pip install wbcore-process" in avail.reason
    if ready():
        assert "apt-get install rustc libstd-rust-dev-wasm32" in avail.reason
    else:
        assert "wasm32-wasi" in rt.lanes.get("rust").available().reason
    r = wbx("lanes", runtime=rt)
    assert r.exit_code == 0 and "no build sandbox is installed; pip install wbcore-process" in r.stdout
    with pytest.raises(NotFound, match="^no build sandbox is installed; pip install wbcore-process$"):
        build(rt.lanes.get("rust").factory(rt), tk, tmp_path / "out")


def test_cargo_bin_and_crate_names(tmp_path):
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "my-tool"\nversion = "0.1.0"\n')
    assert rlane.cargo_bin(tmp_path / "Cargo.toml", "other") == "my-tool"
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "p"\n[[bin]]\nname = "a"\n[[bin]]\nname = "b"\n')
    assert rlane.cargo_bin(tmp_path / "Cargo.toml", "b") == "b"
    assert rlane.crate_name("9-lives") == "_9_lives"


def test_flags_outside_the_allowlist_are_refused(lane, tk, tmp_path):
    with pytest.raises(InvalidArgs):
        build(lane, tk, tmp_path / "out", flags=("-Clinker=/bin/sh",))


def test_the_cache_key_names_the_crates_a_cargo_build_links(make_runtime, tmp_path, monkeypatch):
    """A cargo build without vendor/ links crates from $WB_RUST_CRATES: the lane's version
    (the cache key's toolchain part) names that crate set, so a build against other crates
    is never served the artifact linked from the old ones."""
    monkeypatch.setattr(rlane, "find", lambda: Rust(Path("/usr/bin/rustc"), Path("/usr/bin/cargo"),
                                                    Path("/usr"), "wasm32-wasip1", "rustc 1.95.0"))

    def version(reg: Path) -> str:
        rt = make_runtime(env={"WB_RUST_CRATES": str(reg)})
        return str(rt.lanes.get("rust").factory(rt).version)

    for reg, ver in (("a", "1.0.0"), ("b", "1.0.1")):
        (tmp_path / reg / f"tiny-{ver}" / "src").mkdir(parents=True)
    a, b = version(tmp_path / "a"), version(tmp_path / "b")
    assert a != b  # tiny 1.0.1 (a fix) in place of 1.0.0: a rebuild is not a cache hit
    (tmp_path / "a" / "other-2.0.0").mkdir()
    assert version(tmp_path / "a") != a  # a crate added where cargo resolves from
    assert version(tmp_path / "a") == version(tmp_path / "a")
    assert version(tmp_path / "none") != a  # no crate folder at all is a crate set of its own


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_rustc_builds_runs_and_is_reproducible(lane, tk, tmp_path):
    a = build(lane, tk, tmp_path / "a")
    assert run(a.artifact, ["rstool", "x", "y"], b"hi\n", tmp_path) == (0, b"x,y|HI\n")
    assert run(a.artifact, ["rstool", "1", "2", "3"], b"", tmp_path)[0] == 3
    b = build(lane, tk, tmp_path / "b")
    assert (hashlib.sha256(a.artifact.read_bytes()).digest()
            == hashlib.sha256(b.artifact.read_bytes()).digest())


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_compile_error_and_host_files_stay_out(lane, tk, tmp_path):
    (tk / "src" / "main.rs").write_text('fn main() { let x: u8 = "no"; }\n')
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "mismatched types" in err.value.log
    (tk / "src" / "main.rs").write_text('const P: &str = include_str!("/etc/passwd");\nfn main() { '
                                        'println!("{}", P); }\n')
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out2")
    assert "root:" not in err.value.log


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_cargo_package_with_vendored_crate(lane, tk, tmp_path):
    if find().cargo is None:
        pytest.skip("no cargo beside rustc")
    src = tk / "src"
    (src / "main.rs").unlink()
    (src / "src").mkdir()
    (src / "Cargo.toml").write_text('[package]\nname = "rstool"\nversion = "0.1.0"\nedition = '
                                    '"2021"\n\n[dependencies]\ntiny = "1"\n')
    (src / "src" / "main.rs").write_text('fn main() { println!("{}", tiny::answer()); }\n')
    v = src / "vendor" / "tiny"
    (v / "src").mkdir(parents=True)
    (v / "Cargo.toml").write_text('[package]\nname = "tiny"\nversion = "1.0.0"\nedition = "2021"\n')
    (v / "src" / "lib.rs").write_text("pub fn answer() -> u32 { 42 }\n")
    (v / ".cargo-checksum.json").write_text('{"files":{},"package":null}')
    out = build(lane, tk, tmp_path / "out")
    assert run(out.artifact, ["rstool"], b"", tmp_path) == (0, b"42\n")


# --- the shipped freq toolkit (toolkits/freq, a Cargo package), built by this lane -------

REPO_TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_freq_toolkit_builds_and_counts(lane, tmp_path):
    tk = REPO_TOOLKITS / "freq"
    if not tk.is_dir():
        pytest.skip("toolkits/freq is not beside this plugin")
    if find().cargo is None:
        pytest.skip("no cargo beside rustc")
    out = build(lane, tk, tmp_path / "out")
    assert run(out.artifact, ["freq", "lines"], b"b\na\nb\nc\nb\na\n", tmp_path) == (0, b"3\tb\n2\ta\n1\tc\n")
    assert (run(out.artifact, ["freq", "words", "-i", "--min=2"], b"Don't stop, don't X x y", tmp_path)
            == (0, b"2\tdon't\n2\tx\n"))
    assert (run(out.artifact, ["freq", "chars", "--json", "-n", "1"], "ééa".encode(), tmp_path)
            == (0, '[{"item":"é","count":2}]\n'.encode()))
    assert run(out.artifact, ["freq", "nope"], b"", tmp_path)[0] == 2


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_cargo_crates_from_the_configured_local_registry(make_runtime, tk, tmp_path):
    """No vendor/: crates come from $WB_RUST_CRATES (Debian's /usr/share/cargo/registry layout)."""
    if find().cargo is None:
        pytest.skip("no cargo beside rustc")
    reg = tmp_path / "registry" / "tiny-1.0.0"
    (reg / "src").mkdir(parents=True)
    (reg / "Cargo.toml").write_text('[package]\nname = "tiny"\nversion = "1.0.0"\nedition = "2021"\n')
    (reg / "src" / "lib.rs").write_text("pub fn answer() -> u32 { 7 }\n")
    (reg / ".cargo-checksum.json").write_text('{"files":{},"package":null}')
    src = tk / "src"
    (src / "main.rs").unlink()
    (src / "src").mkdir()
    (src / "Cargo.toml").write_text('[package]\nname = "rstool"\nversion = "0.1.0"\nedition = '
                                    '"2021"\n\n[dependencies]\ntiny = "1"\n')
    (src / "src" / "main.rs").write_text('fn main() { println!("{}", tiny::answer()); }\n')
    rt = make_runtime(env={"WB_RUST_CRATES": str(tmp_path / "registry")})
    out = build(rt.lanes.get("rust").factory(rt), tk, tmp_path / "out")
    assert run(out.artifact, ["rstool"], b"", tmp_path) == (0, b"7\n")
    # a crate that is not there: cargo's own message, offline, no network attempt
    (src / "Cargo.toml").write_text('[package]\nname = "rstool"\nversion = "0.1.0"\nedition = '
                                    '"2021"\n\n[dependencies]\nserde = "1"\n')
    with pytest.raises(BuildFailed) as err:
        build(rt.lanes.get("rust").factory(rt), tk, tmp_path / "out2")
    assert "serde" in err.value.log


# --- untried escapes (issue 11): build.rs and proc-macros read the host at build time ------
# Both run native code on the build machine, inside the build sandbox: what they can read
# is what the sandbox shows. Each probe reads $WB_HOME, ~/.ssh and /etc/shadow and bakes
# what it saw into the program; the build fails, or the program shows it saw nothing.

PROBE_RS = r"""
fn probe() -> String {
    let mut seen = String::new();
    let mut paths: Vec<String> = vec!["/etc/shadow".into(), "/etc/passwd".into(), "/root/.ssh/id_rsa".into()];
    if let Ok(home) = std::env::var("HOME") { paths.push(format!("{home}/.ssh/id_rsa")); }
    match std::env::var("WB_HOME") {
        Ok(h) => { seen += &format!("env WB_HOME={h}\n"); paths.push(format!("{h}/secret.txt")); }
        Err(_) => seen += "env WB_HOME unset\n",
    }
    if let Ok(p) = std::env::var("WB_PROBE_SECRET") { paths.push(p); }
    for p in paths {
        match std::fs::read_to_string(&p) {
            Ok(t) => seen += &format!("READ {p} {}\n", t.chars().take(40).collect::<String>()),
            Err(e) => seen += &format!("no {p} {e}\n"),
        }
    }
    seen
}
"""


@pytest.fixture
def host_secret(tmp_path: Path, monkeypatch) -> Path:
    """A secret in $WB_HOME (of this process), which a build must never see."""
    home = tmp_path / "wbhome-secret"
    home.mkdir()
    (home / "secret.txt").write_text("HOST-SECRET-RUST\n")
    monkeypatch.setenv("WB_HOME", str(home))
    monkeypatch.setenv("WB_PROBE_SECRET", str(home / "secret.txt"))
    return home


def _no_leak(lane, tk: Path, tmp_path: Path) -> None:
    try:
        out = build(lane, tk, tmp_path / "out")
    except BuildFailed as exc:  # failed inside the sandbox: nothing of the host in the log either
        assert "HOST-SECRET-RUST" not in exc.log and "root:" not in exc.log
        return
    code, stdout = run(out.artifact, ["rstool"], b"", tmp_path)
    text = stdout.decode()
    assert code == 0 and "no /etc/shadow" in text, text
    assert "READ" not in text and "HOST-SECRET-RUST" not in text and "env WB_HOME unset" in text, text


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_build_rs_sees_only_the_sandbox(lane, tk, tmp_path, host_secret):
    src = tk / "src"
    (src / "main.rs").unlink()
    (src / "src").mkdir()
    (src / "Cargo.toml").write_text('[package]\nname = "rstool"\nversion = "0.1.0"\nedition = "2021"\nbuild '
                                    '= "build.rs"\n')
    (src / "build.rs").write_text(PROBE_RS + r"""
fn main() {
    let out = std::env::var("OUT_DIR").unwrap();
    std::fs::write(format!("{out}/seen.txt"), probe()).unwrap();
}
""")
    (src / "src" / "main.rs").write_text('fn main() { print!("{}", include_str!(concat!(env!("OUT_DIR"), '
                                         '"/seen.txt"))); }\n')
    _no_leak(lane, tk, tmp_path)


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_proc_macro_sees_only_the_sandbox(lane, tk, tmp_path, host_secret):
    src = tk / "src"
    (src / "main.rs").unlink()
    (src / "src").mkdir()
    (src / "Cargo.toml").write_text('[package]\nname = "rstool"\nversion = "0.1.0"\nedition = "2021"\n\n'
                                    '[dependencies]\nleak = { path = "leak" }\n')
    (src / "src" / "main.rs").write_text('fn main() { print!("{}", leak::seen!()); }\n')
    (src / "leak" / "src").mkdir(parents=True)
    (src / "leak" / "Cargo.toml").write_text('[package]\nname = "leak"\nversion = "0.1.0"\nedition = '
                                             '"2021"\n\n[lib]\nproc-macro = true\n')
    (src / "leak" / "src" / "lib.rs").write_text("extern crate proc_macro;\n" + PROBE_RS + r"""
#[proc_macro]
pub fn seen(_input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    format!("{:?}", probe()).parse().unwrap()
}
""")
    _no_leak(lane, tk, tmp_path)


BUILD_RS = r"""
use std::io::Write;
fn main() {
    // a build script runs on the build machine: try every way out it could take
    let mut found = String::new();
    for p in ["/etc/passwd", "/etc/shadow", "HOSTFILE", "/proc/1/environ", "/root/.cargo/credentials.toml"] {
        if let Ok(s) = std::fs::read_to_string(p) { found.push_str(&s); }
    }
    let wrote = std::fs::write("/src/src/main.rs", "fn main() { println!(\"REWRITTEN\"); }").is_ok();
    let net = std::net::TcpStream::connect("127.0.0.1:1").is_ok() || std::net::TcpStream::connect("1.1.1.1:443").is_ok();
    let out = std::env::var("OUT_DIR").unwrap();
    let mut f = std::fs::File::create(format!("{out}/leak.txt")).unwrap();
    write!(f, "read={} wrote={} net={}", found.len(), wrote, net).unwrap();
    f.write_all(found.as_bytes()).unwrap();
}
"""  # noqa: E501


@pytest.mark.slow
@needs_toolchain
@needs_sandbox
def test_a_build_script_reads_no_host_file_and_writes_no_source(lane, tk, tmp_path):
    """Issue 22's untried case: a Cargo build script (host code at build time) reaches for
    host files, rewrites the source and opens sockets. Here the build sandbox holds no host
    linker, so a build script (or a proc-macro: host code too) cannot even be linked and the
    build fails saying so; where one could be, none of what it tried may land anywhere."""
    if find().cargo is None:
        pytest.skip("no cargo beside rustc")
    host = tmp_path / "host-secret.txt"
    host.write_text("HOSTSECRET-31c7")
    host.chmod(0o644)
    src = tk / "src"
    (src / "main.rs").unlink()
    (src / "src").mkdir()
    (src / "Cargo.toml").write_text('[package]\nname = "rstool"\nversion = "0.1.0"\nedition = "2021"\nbuild '
                                    '= "build.rs"\n')
    (src / "build.rs").write_text(BUILD_RS.replace("HOSTFILE", str(host)))
    main = 'fn main() { print!("{}", include_str!(concat!(env!("OUT_DIR"), "/leak.txt"))); }\n'
    (src / "src" / "main.rs").write_text(main)
    try:
        out = build(lane, tk, tmp_path / "out")
    except BuildFailed as exc:
        assert "linker" in str(exc), str(exc)
        assert "HOSTSECRET-31c7" not in exc.log and "root:" not in exc.log
        assert (src / "src" / "main.rs").read_text() == main
        return
    code, stdout = run(out.artifact, ["rstool"], b"", tmp_path)
    assert code == 0 and stdout.startswith(b"read=") and b"wrote=false net=false" in stdout, stdout[:200]
    art = out.artifact.read_bytes()
    assert b"HOSTSECRET-31c7" not in art and b"root:" not in art
    assert (src / "src" / "main.rs").read_text() == main
