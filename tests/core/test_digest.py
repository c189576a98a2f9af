"""``wbcore_runtime.store.digest``: CPython's own sha256 for short inputs, OpenSSL's for big ones;
every path gives hashlib's digest, so no check depends on which implementation ran."""

from __future__ import annotations

import hashlib
from pathlib import Path

from wbcore_runtime.store import digest
from wbcore_runtime.store.artifacts import sha256_file
from wbcore_runtime.trust import verdict


def test_every_size_gives_hashlibs_digest(tmp_path: Path) -> None:
    for size in (0, 1, 4096, digest.LARGE - 1, digest.LARGE, digest.LARGE + 1, (1 << 20) + 3):
        data = bytes(i % 251 for i in range(size))
        want = hashlib.sha256(data).hexdigest()
        assert digest.sha256(data).hexdigest() == want, size
        h = digest.sha256(size=size)
        h.update(data[: size // 2])
        h.update(data[size // 2:])
        assert h.hexdigest() == want, size
        f = tmp_path / f"f{size}"
        f.write_bytes(data)
        assert sha256_file(f) == want, size
        assert verdict.sha256_file(f) == want, size


def test_big_inputs_use_openssl_and_small_ones_do_not() -> None:
    openssl = type(digest._openssl()(b""))
    assert type(digest.sha256(size=digest.LARGE)) is openssl
    assert type(digest.sha256(bytes(digest.LARGE))) is openssl
    assert type(digest.sha256(b"x", size=digest.LARGE - 1)) is not openssl
