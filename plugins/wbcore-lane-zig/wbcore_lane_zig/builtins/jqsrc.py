"""The real jq for the reserved built-in ``jq``: upstream jq 1.8.2 (with its vendored
oniguruma and decNumber) built to WASI by the c lane.

The sources are not part of the repository. They come from the PyPI sdist ``jq==1.13.0``
(the Python binding), which carries upstream's release tarball ``deps/jq-1.8.2.tar.gz``
unmodified (pre-generated lexer/parser, ``src/builtin.jq``, ``tests/jq.test``). Both
tarballs are pinned by sha256; the nested one is unpacked with the core's unpacker and the
files the build and the tests need are kept in ``$WB_JQ_CACHE/jq-1.8.2`` (default
``~/.cache/wbcore/jq``), pinned again by their tree digest. ``python -m wbcore_lane_zig fetch-jq``
(``dev.py setup`` runs it) fetches them once, so builds and tests need no network.

:func:`stage` lays out the c lane's source folder (the lane compiles every ``.c`` under it,
``-I`` its root and ``include/``, and skips folders whose name starts with a dot):

* ``src/``: jq's sources minus ``inject_errors.c`` (a fault-injection preload), plus the two
  files upstream's Makefile generates: ``builtin.inc`` (``builtin.jq`` as a byte list, as
  its ``od | sed`` rule writes it) and ``config_opts.inc``;
* ``decNumber/``: vendored decNumber (``#include "decNumber/decNumber.h"`` resolves from the root);
* ``.oniguruma/``: vendored oniguruma's ``src/`` and its ``config.h`` (ours), out of the
  lane's walk because ``unicode.c`` ``#include``s four data ``.c`` files;
  ``oniguruma/<name>.c`` are one-line ``#include``s of the library's own sources (what its
  ``Makefile.am`` builds, minus the other encodings and the POSIX/GNU APIs jq does not use);
* ``include/``: ``oniguruma.h``, a single-threaded ``pthread.h`` (Debian's wasi-libc has none)
  and a ``stdlib.h`` that declares ``realpath`` (wasi-libc hides it; ``wb_main.c`` defines it);
* ``wb_main.c``: the stdin1 front, which calls upstream's ``main`` (renamed by ``-Dmain=``).

jq's configure results for wasm32-wasi are the ``-D`` flags of :data:`FLAGS` (upstream
passes them on the command line too; it has no config header).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs

JQ_VERSION = "1.8.2"
SDIST_VERSION = "1.13.0"
#: The sdist's file name on the Python package index the user configured for pip.
SDIST_NAME = f"jq-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "e62bdddeab3b8a0a404581a7bb6f1e8c4cc6082280870031f746074f4cac52c0"
#: ``deps/jq-1.8.2.tar.gz`` inside the sdist: upstream's release tarball.
TARBALL_MEMBER = f"jq-{SDIST_VERSION}/deps/jq-{JQ_VERSION}.tar.gz"
TARBALL_SHA256 = "71b8d6e8f5fe81f6c6d0d110e3892251f6ce76ed095abd315e26e6e1193af3af"
#: What is kept of upstream's tree (folders kept whole).
KEEP = ("COPYING", "AUTHORS", "src", "vendor/decNumber", "vendor/oniguruma/COPYING", "vendor/oniguruma/src",
        "tests/jq.test", "tests/man.test", "tests/onig.test", "tests/base64.test", "tests/uri.test",
        "tests/optional.test", "tests/manonig.test")
#: ``wbcore_runtime.build.tree_digest`` of the kept tree.
TREE_SHA256 = "ef6b978d65bcecfcfded1920ea3c963d03a19d8aadaea85e914f8da1a69b73a1"
#: jq's ``src/*.c`` left out of the build.
JQ_SKIP = {"inject_errors.c"}
#: oniguruma's library sources (its ``src/Makefile.am``), minus the encodings other than
#: ASCII/UTF-8 and the POSIX/GNU front ends: jq compiles every regex as UTF-8.
ONIG_SOURCES = ("regparse.c", "regcomp.c", "regexec.c", "regenc.c", "regerror.c", "regext.c", "regsyntax.c",
                "regtrav.c", "regversion.c", "st.c", "unicode.c", "unicode_unfold_key.c",
                "unicode_fold1_key.c",
                "unicode_fold2_key.c", "unicode_fold3_key.c", "ascii.c", "utf8.c", "onig_init.c")
#: What upstream's configure finds on wasm32-wasi (Debian's wasi-libc): math functions
#: (``src/libm.h`` turns each into a builtin), time functions, and the rest.
MATH = ("acos acosh asin asinh atan2 atan atanh cbrt ceil copysign cos cosh drem erf erfc exp10 exp2 exp "
        "expm1 fabs fdim floor fma fmax fmin fmod frexp hypot j0 j1 jn ldexp lgamma log10 log1p log2 log "
        "logb modf lgamma_r nearbyint nextafter nexttoward pow remainder rint round scalb scalbln "
        "significand scalbn ilogb sin sinh sqrt tan tanh tgamma trunc y0 y1 yn").split()
LIBC = ("memmem isatty strptime strftime setenv timegm gmtime_r gmtime localtime_r localtime gettimeofday "
        "setlocale arc4random getentropy pthread_key_create pthread_once atexit alloca alloca_h").split()
FLAGS = (
    "-Dmain=jq_upstream_main", "-D_WASI_EMULATED_SIGNAL", "-lwasi-emulated-signal", "-DIEEE_8087=1",
    "-DUSE_DECNUM=1", "-DHAVE_LIBONIG=1", "-DHAVE_TM_TM_GMT_OFF=1",
    *(f"-DHAVE_{name.upper()}=1" for name in (*MATH, *LIBC)),
    "-D_GNU_SOURCE=1", "-Wno-unused-parameter", "-Wno-unused-function",
)


def cache_dir(env: Any = None) -> Path:
    """Where the kept sources live: ``$WB_JQ_CACHE/jq-<version>``."""
    env = os.environ if env is None else env
    base = env.get("WB_JQ_CACHE") or str(Path.home() / ".cache" / "wbcore" / "jq")
    return Path(base) / f"jq-{JQ_VERSION}"


_checked: set[tuple[str, int, int]] = set()


def sources(env: Any = None) -> Path | None:
    """The kept upstream tree if present and intact (its digest checked once per state)."""
    from wbcore_runtime.build import tree_digest

    root = cache_dir(env)
    try:
        st = (root / ".pinned").stat()
    except OSError:
        return None
    stamp = (str(root), st.st_ino, st.st_mtime_ns)
    if stamp not in _checked:
        if (root / ".pinned").read_text().strip() != TREE_SHA256 or tree_digest(root / "tree") != TREE_SHA256:
            return None
        _checked.add(stamp)
    return root / "tree"


def fetched(env: Any = None) -> bool:
    """Whether a fetch completed here (its stamp names the pinned digest); cheap: the
    files themselves are checked by :func:`sources` when a build uses them."""
    try:
        return (cache_dir(env) / ".pinned").read_text().strip() == TREE_SHA256
    except OSError:
        return False


def recipe_digest() -> str:
    """A digest of everything the staged tree is made of: the pinned upstream tree, our
    files, this module (the layout) and the flags. The same digest means the same staged
    tree, so the built-in's version needs no staging (which copies ~6 MB)."""
    h = hashlib.sha256(f"{TREE_SHA256}\0{chr(0).join(FLAGS)}\0".encode())
    h.update(Path(__file__).read_bytes())
    ours = Path(str(files(__package__))) / "jq"
    for f in sorted(ours.iterdir()):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def missing(env: Any = None) -> str:
    """'' when the sources are here and intact, else why not and what to run."""
    if sources(env) is not None:
        return ""
    return (f"the jq {JQ_VERSION} sources are not fetched yet ({cache_dir(env)}): run `python -m "
            f"wbcore_lane_zig fetch-jq` (downloads the sdist jq=={SDIST_VERSION} from your pip index, "
            f"sha256-pinned), or `pip download --no-deps --no-binary :all: jq=={SDIST_VERSION}` then `python "
            f"-m wbcore_lane_zig fetch-jq --from jq-{SDIST_VERSION}.tar.gz`")


def fetch(env: Any = None, progress: Any = None, *, sdist: Path | None = None) -> Path:
    """Download the pinned sdist through the core fetcher (or take ``sdist``), check both
    tarballs, keep upstream's files. Raises the fetcher's errors or ``InvalidArgs`` for a
    file that is not the pinned one; nothing is kept then."""
    from wbcore_runtime.guard import fetch as _fetch
    from wbcore_runtime.guard import registries, unpack
    from wbcore_runtime.build import tree_digest
    from wbcore_runtime.guard.netguard import NetGuard
    from wbcore_runtime.store.artifacts import sha256_file

    have = sources(env)
    if have is not None:
        return have
    where = cache_dir(env)
    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".jq-", dir=where.parent) as tmp:
        work = Path(tmp)
        tgz = work / "sdist.tar.gz"
        seen = env if env is not None else os.environ
        source: str | Path = Path(sdist) if sdist is not None else ""
        if sdist is None:
            # The index the user configured for pip; the deployer's allowances apply to the
            # index and the host it serves files from (a mirror, or a resolver that answers
            # with a private address: WB_ALLOW_PRIVATE_HOSTS=<host>), as for installs.
            source = registries.pypi_file("jq", SDIST_NAME, SDIST_SHA256, guard=NetGuard.from_env(seen),
                                          env=seen)
            if progress:
                progress(f"jq {JQ_VERSION}: fetching {source}")
        origin = _fetch.pinned(source, tgz, SDIST_SHA256, what=f"jq=={SDIST_VERSION} sdist",
                               max_bytes=16 << 20, env=seen)
        unpack.unpack_tar(tgz, work / "sdist", unpack.Caps(max_files=200, max_bytes=16 << 20))
        inner = work / "sdist" / TARBALL_MEMBER
        if not inner.is_file() or inner.is_symlink() or sha256_file(inner) != TARBALL_SHA256:
            raise InvalidArgs(f"{origin}: {TARBALL_MEMBER} is missing or not the pinned jq {JQ_VERSION} "
                              "tarball; nothing was kept")
        # Upstream's tarball holds one hard link (a docs file), which the core unpacker rightly
        # refuses: re-pack only the kept members (regular files and folders) and unpack that.
        kept = work / "kept.tar"
        _select(inner, kept, [f"jq-{JQ_VERSION}/{rel}" for rel in KEEP])
        unpack.unpack_tar(kept, work / "upstream", unpack.Caps(max_files=2000, max_bytes=64 << 20))
        top = work / "upstream" / f"jq-{JQ_VERSION}"
        keep = work / "keep"
        for rel in KEEP:
            src = top / rel
            if src.is_symlink() or not src.exists():
                raise InvalidArgs(f"{origin}: jq-{JQ_VERSION}/{rel} is missing from the tarball")
            (keep / "tree" / rel).parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, keep / "tree" / rel, symlinks=True)
            else:
                shutil.copyfile(src, keep / "tree" / rel)
        digest = tree_digest(keep / "tree")
        if digest != TREE_SHA256:
            raise InvalidArgs(f"{origin}: the kept jq tree's digest {digest} is not the pinned "
                              f"{TREE_SHA256}; nothing was kept")
        (keep / ".pinned").write_text(digest + "\n")
        if where.exists():
            shutil.rmtree(where)
        os.replace(keep, where)
    path = sources(env)
    assert path is not None
    return path


def _select(archive: Path, out: Path, keep: list[str]) -> None:
    """Copy the members of ``archive`` under the ``keep`` paths (regular files and folders
    only) into the plain tar ``out``. ``archive`` is sha256-pinned already; the core
    unpacker still checks every name and size of ``out``."""
    import tarfile

    with tarfile.open(archive, mode="r:gz") as src, tarfile.open(out, mode="w") as dst:
        for member in src:
            if not any(member.name == k or member.name.startswith(k + "/") for k in keep):
                continue
            if member.isdir():
                dst.addfile(member)
            elif member.isreg():
                dst.addfile(member, src.extractfile(member))


def builtin_inc(builtin_jq: bytes) -> str:
    """``src/builtin.inc`` as upstream's Makefile writes it: the bytes of ``builtin.jq`` as C octal
    literals."""
    lines = []
    for i in range(0, len(builtin_jq), 16):
        lines.append(" " + ", ".join(f"0{b:o}" if b else "0" for b in builtin_jq[i:i + 16]) + ",")
    return "\n".join(lines) + "\n"


def stage(into: Path, env: Any = None) -> None:
    """Lay out the c lane's source folder for the jq built-in in ``into`` (see the module doc),
    from a private copy of the kept tree held to the pin: :func:`sources` checked the kept
    tree, which may change after any check, so what is staged is the copy that hashed right."""
    from wbcore_runtime.build import snapshot

    kept = sources(env)
    if kept is None:
        raise InvalidArgs(f"built-in jq: {missing(env)}")
    work = Path(tempfile.mkdtemp(prefix="wb-jq-"))
    try:
        copy = snapshot.take(kept, work / "tree", label="the kept jq sources")
        if copy.digest != TREE_SHA256:
            raise InvalidArgs(f"built-in jq: the kept sources at {kept} changed after they were checked "
                              f"(their digest is {copy.digest}, not the pinned {TREE_SHA256}); "
                              f"delete {cache_dir(env)} and run `python -m wbcore_lane_zig fetch-jq`")
        _lay_out(copy.dir, into)
    finally:
        snapshot.discard(work)


def _lay_out(tree: Path, into: Path) -> None:
    ours = Path(str(files(__package__))) / "jq"
    into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ours / "wb_main.c", into / "wb_main.c")
    (into / "include").mkdir()
    for header in ("pthread.h", "stdlib.h"):
        shutil.copyfile(ours / header, into / "include" / header)
    shutil.copyfile(tree / "vendor/oniguruma/src/oniguruma.h", into / "include" / "oniguruma.h")
    (into / "src").mkdir()
    for f in sorted((tree / "src").iterdir()):
        if f.suffix in (".c", ".h") and f.name not in JQ_SKIP:
            shutil.copyfile(f, into / "src" / f.name)
    (into / "src" / "builtin.inc").write_text(builtin_inc((tree / "src" / "builtin.jq").read_bytes()))
    (into / "src" / "config_opts.inc").write_text(
        '#define JQ_CONFIG "wb built-in: wasm32-wasip1, clang, c lane; oniguruma and decNumber vendored"\n')
    shutil.copytree(tree / "vendor" / "decNumber", into / "decNumber")
    shutil.copytree(tree / "vendor" / "oniguruma" / "src", into / ".oniguruma")
    shutil.copyfile(ours / "onig_config.h", into / ".oniguruma" / "config.h")
    (into / "oniguruma").mkdir()
    for name in ONIG_SOURCES:
        (into / "oniguruma" / name).write_text(f'#include "../.oniguruma/{name}"\n')
    for lic, name in (("COPYING", "COPYING.jq"), ("vendor/oniguruma/COPYING", "COPYING.oniguruma")):
        shutil.copyfile(tree / lic, into / name)
