"""A third-party WASI program that expects a root preopen runs as shipped: svg-flatten (from
the ``svg-flatten-wasi`` wheel) needs ``/`` preopened, a writable ``/tmp`` (it spools stdin to
a temporary file) and ``/dev/urandom`` (that file's name). Its toolkit says so with two
``#+PREOPEN`` lines (``/`` among them) and ``#+SCRATCH: /tmp``; every call gets a fresh,
bounded scratch folder that is gone afterwards."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("wbcore_wasmtime")

import wasi_tools  # noqa: E402  (tests/integration/wasi_tools.py)

from wbcore_runtime.build import builder
from wbcore_runtime.guard import preopen  # noqa: E402
from wbcore_runtime.contract.calls import LimitExceeded  # noqa: E402
from wbcore_runtime.contract.errors import InvalidArgs  # noqa: E402
from wbcore_testing.fixtures import manifest_text, write_toolkit  # noqa: E402

SQUARE = (b'<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100" viewBox="0 0 100 100"><defs/>'
          b'<path d="M 10 10 L 90 10 L 90 90 L 10 90 Z" fill="#000000"/></svg>')


@pytest.fixture(scope="module")
def svg_flatten() -> Path:
    """The pinned program: kept on this machine by ``dev.py setup``, else fetched now from the
    configured index (the deployer's allowance applies, see wasi_tools); skipped, saying how
    to get it, when neither works."""
    try:
        return wasi_tools.fetch(wasi_tools.SVG_FLATTEN)
    except Exception as exc:  # noqa: BLE001 - the reason is shown
        pytest.skip(f"svg-flatten {wasi_tools.SVG_FLATTEN.version} is not on this machine and could not be "
                    f"fetched ({type(exc).__name__}: {exc}); run: python3 dev.py setup")


def svg_toolkit(root: Path, program: Path, extra: dict[str, str] | None = None, *,
                preopens: tuple[str, ...] = ("root /", "fonts /usr/share/fonts")) -> Path:
    sha = hashlib.sha256(program.read_bytes()).hexdigest()
    fields = {"BUILD_SRC": "wasm:bin/svg-flatten.wasm", "SHA256": sha, "CLI_BIN": "svg-flatten",
              **(extra or {})}
    text = manifest_text("svgflat", exec="command", extra=fields)
    text = text.replace("#+CLI_BIN:", "".join(f"#+PREOPEN: {p}\n" for p in preopens) + "#+CLI_BIN:", 1)
    tk = write_toolkit(root, "svgflat", text, files={"root/etc/svgflat.txt": "a read-only file under /\n",
                                                     "fonts/README": "no fonts\n"})
    (tk / "bin").mkdir()
    shutil.copyfile(program, tk / "bin" / "svg-flatten.wasm")
    return tk


@pytest.fixture
def rt(make_runtime, toolkit_root, svg_flatten):
    svg_toolkit(toolkit_root, svg_flatten, {"SCRATCH": "/tmp 8M"})
    runtime = make_runtime()
    runtime.discover(refresh=True)
    builder.build(runtime, "svgflat")
    return runtime


def test_svg_flatten_runs_with_a_root_preopen_a_scratch_tmp_and_dev_urandom(rt) -> None:
    entry = rt.registry.lookup("command", "svgflat") or rt.registry.lookup("command", "svg-flatten")
    assert entry is not None
    assert [p["guest"] for p in entry.options["preopen"]] == ["/", "/usr/share/fonts"]
    assert entry.options["scratch"] == {"guest": "/tmp", "bytes": 8 << 20}
    before = set(os.listdir(tempfile.gettempdir()))
    out = rt.call(entry.name, ["--force-svg", "--no-usvg", "-o", "gerber", "-", "-"], SQUARE)
    assert out.exit_code == 0, out.stderr.decode()
    gerber = out.stdout.decode()
    assert gerber.startswith("%FSLAX46Y46*%") and "G36*" in gerber and gerber.rstrip().endswith("M02*")
    # the square's corners, in Gerber's fixed-point millimetres (100 px = 26.4583 mm)
    assert "X0002645833Y0002645833D01*" in gerber and "X0023812500Y0023812500D01*" in gerber
    # the per-call folders (scratch /tmp and /dev) are gone after the call
    assert {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("wb-call-")} == set()


def test_without_a_scratch_tmp_it_cannot_spool_its_input(make_runtime, toolkit_root, svg_flatten) -> None:
    svg_toolkit(toolkit_root, svg_flatten)
    runtime = make_runtime()
    runtime.discover(refresh=True)
    name = builder.build(runtime, "svgflat").name
    out = runtime.call(name, ["--force-svg", "--no-usvg", "-o", "gerber", "-", "-"], SQUARE)
    assert out.exit_code != 0 and b"Cannot parse input file" in out.stderr


def test_the_root_preopen_is_read_only_and_from_the_store(rt, toolkit_root) -> None:
    entry = rt.registry.lookup("command", "svg-flatten") or rt.registry.lookup("command", "svgflat")
    stored = preopen.resolve_all(entry.options, rt.home)
    assert stored[0][1] == "/" and Path(stored[0][0]).is_relative_to(rt.home)
    assert (Path(stored[0][0]) / "etc" / "svgflat.txt").read_text() == "a read-only file under /\n"
    # an output file under / is refused (read-only); under the scratch /tmp it is allowed
    out = rt.call(entry.name, ["--force-svg", "--no-usvg", "-o", "gerber", "-", "/out.gbr"], SQUARE)
    assert out.exit_code != 0
    out = rt.call(entry.name, ["--force-svg", "--no-usvg", "-o", "gerber", "-", "/tmp/out.gbr"], SQUARE)
    assert out.exit_code == 0, out.stderr.decode()


def test_the_scratch_folder_is_bounded_while_the_guest_runs(make_runtime, toolkit_root, svg_flatten) -> None:
    svg_toolkit(toolkit_root, svg_flatten, {"SCRATCH": "/tmp 4K"})
    runtime = make_runtime()
    runtime.discover(refresh=True)
    name = builder.build(runtime, "svgflat").name
    big = SQUARE.replace(b"<defs/>", b"<defs/><!--" + b"x" * (8 << 20) + b"-->")
    with pytest.raises(LimitExceeded, match="#\\+SCRATCH folder /tmp passed its 4096-byte cap"):
        runtime.call(name, ["--force-svg", "--no-usvg", "-o", "gerber", "-", "-"], big)


@pytest.mark.parametrize(("lines", "why"), [
    (("root /", "data /"), "guest path / is given twice"),
    (("root /dev",), "/dev is the runner's own"),
    (tuple(f"d{i} /d{i}" for i in range(9)), "at most 8"),
])
def test_preopen_lines_are_checked_together(lines, why) -> None:
    with pytest.raises(InvalidArgs, match=why):
        preopen.parse_all("\n".join(lines))


@pytest.mark.parametrize(("value", "why"),
                         [("/ 1M", "cannot be the guest's root"), ("/tmp 2T", "not a byte count"),
                                            ("/tmp 2G", "within 1 byte"), ("tmp", "absolute")])
def test_scratch_values_are_checked(value, why) -> None:
    with pytest.raises(InvalidArgs, match=why):
        preopen.parse_scratch(value)
