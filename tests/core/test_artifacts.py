"""The content-addressed artifact store: digests, compiled caches, atomic writes."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
import tracemalloc

import pytest

from wbcore_runtime.store import artifacts
from wbcore_runtime.store.artifacts import ArtifactStore, IntegrityError, atomic_write
from wbcore_runtime.contract.errors import InvalidArgs, NotFound


def test_put_is_content_addressed_and_idempotent(tmp_path):
    store = ArtifactStore(tmp_path / "a")
    a = store.put_bytes(b"\0asm module one")
    assert a.sha256 == hashlib.sha256(b"\0asm module one").hexdigest()
    assert a.path == tmp_path / "a" / a.sha256[:2] / f"{a.sha256}.wasm"
    assert store.put_bytes(b"\0asm module one") == a
    assert store.verify(a.sha256) == a.path
    with pytest.raises(InvalidArgs):
        store.path("not-a-digest")
    with pytest.raises(NotFound):
        store.verify("0" * 64)


def test_tampered_bytes_are_refused_even_after_a_good_check(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.put_bytes(b"original bytes")
    store.verify(a.sha256)
    a.path.write_bytes(b"evil bytes!!!!")  # same length, new content
    with pytest.raises(IntegrityError):
        store.verify(a.sha256)
    with pytest.raises(IntegrityError):
        store.read_verified(a.sha256)
    # putting the right bytes again repairs it
    store.put_bytes(b"original bytes")
    assert store.read_verified(a.sha256) == b"original bytes"


def test_put_file_never_follows_a_link_out_of_its_folder(tmp_path):
    """A build's output named by a link is refused, not read: a compiler run in wasm (c-wasm's
    tcc) can make one in its writable /out pointing anywhere on the host, e.g. at this
    process's environment, and the store would keep that file's bytes as the artifact."""
    host_file = tmp_path / "host" / "secret"
    host_file.parent.mkdir()
    host_file.write_bytes(b"\0asm API_KEY=not-the-builds")
    out = tmp_path / "out"
    out.mkdir()
    (out / "tool.wasm").symlink_to(os.path.relpath(host_file, out))
    store = ArtifactStore(tmp_path / "a")
    with pytest.raises(InvalidArgs, match=r"out/tool\.wasm: symlink to a file outside .*check what wrote it"):
        store.put_file(out / "tool.wasm")
    assert not list((tmp_path / "a").rglob("*.wasm"))


def test_put_file_refuses_a_fifo_at_once(tmp_path):
    """A FIFO where the output should be is refused without waiting for a writer (it hung the build)."""
    fifo = tmp_path / "tool.wasm"
    os.mkfifo(fifo)
    store = ArtifactStore(tmp_path / "a")
    outcome: list[BaseException | object] = []

    def put() -> None:
        try:
            outcome.append(store.put_file(fifo))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    t = threading.Thread(target=put, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # still blocked opening the FIFO: let it go so the test process can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], InvalidArgs), outcome
    assert "a FIFO, not a regular file" in str(outcome[0])


def test_put_file_caps_a_file_that_grows_after_its_size_was_looked_at(tmp_path, monkeypatch):
    """The cap holds while the file is read: a file still growing after its size was checked
    (a writer still at it) is refused having read at most the cap, not read whole first."""
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_BYTES", 1 << 20)
    src = tmp_path / "tool.wasm"
    src.write_bytes(b"\0asm")
    grown = []

    def growing(real):
        def look(path, *args, **kwargs):
            st = real(path, *args, **kwargs)
            if not grown and os.path.basename(os.fspath(path)) == src.name:
                grown.append(True)
                os.truncate(src, 64 << 20)  # the writer goes on after the size was taken
            return st
        return look

    monkeypatch.setattr(os, "stat", growing(os.stat))
    monkeypatch.setattr(os, "lstat", growing(os.lstat))
    store = ArtifactStore(tmp_path / "a")
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgs) as refused:
            store.put_file(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert grown and peak < 8 << 20, f"held {peak} bytes for a 1 MiB cap"
    assert "tool.wasm: " in refused.value.message and "over the 1048576-byte cap" in refused.value.message


def test_compiled_cache_is_built_once_then_loaded(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.put_bytes(b"wasm")
    compiles = []

    def compile_(wasm: bytes) -> bytes:
        compiles.append(wasm)
        return b"compiled:" + wasm

    load = lambda p: p.read_bytes()
    assert store.compiled(a.sha256, "eng-1", compile=compile_, load=load) == (b"compiled:wasm", True)
    assert store.compiled(a.sha256, "eng-1", compile=compile_, load=load) == (b"compiled:wasm", False)
    assert len(compiles) == 1
    # another engine key never opens eng-1's file
    assert store.compiled(a.sha256, "eng-2", compile=compile_, load=load)[1] is True
    assert len(compiles) == 2


def test_corrupt_or_refused_compiled_cache_is_rebuilt(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.put_bytes(b"wasm")
    compile_ = lambda w: b"good"
    store.compiled(a.sha256, "k", compile=compile_, load=lambda p: p.read_bytes())
    cpath = store.compiled_path(a.sha256, "k")
    cpath.write_bytes(b"torn")  # digest no longer matches
    assert store.compiled(a.sha256, "k", compile=compile_, load=lambda p: p.read_bytes()) == (b"good", True)

    def refusing_load(path):
        raise RuntimeError("incompatible with this engine")

    value, built = store.compiled(a.sha256, "k", compile=compile_, load=refusing_load, loads=lambda b: b)
    assert (value, built) == (b"good", True)


def test_tampered_wasm_never_compiles(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.put_bytes(b"wasm")
    a.path.write_bytes(b"WASM")
    with pytest.raises(IntegrityError):
        store.compiled(a.sha256, "k", compile=lambda w: w, load=lambda p: p.read_bytes())


def _writer(path: str, byte: int) -> None:
    from pathlib import Path

    for _ in range(50):
        atomic_write(Path(path), bytes([byte]) * 200_000)


def test_concurrent_writers_never_tear(tmp_path):
    target = tmp_path / "x" / "file.bin"
    procs = [multiprocessing.Process(target=_writer, args=(str(target), b)) for b in (1, 2)]
    threads = [threading.Thread(target=_writer, args=(str(target), b)) for b in (3, 4)]
    for w in (*procs, *threads):
        w.start()
    seen = set()
    while any(p.is_alive() for p in procs) or any(t.is_alive() for t in threads):
        if target.exists():
            data = target.read_bytes()
            assert len(data) == 200_000 and len(set(data)) == 1
            seen.add(data[0])
    for w in (*procs, *threads):
        w.join()
    data = target.read_bytes()
    assert len(data) == 200_000 and len(set(data)) == 1
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]
