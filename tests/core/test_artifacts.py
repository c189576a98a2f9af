"""The content-addressed artifact store: digests, compiled caches, atomic writes."""

from __future__ import annotations

import hashlib
import multiprocessing
import threading

import pytest

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
