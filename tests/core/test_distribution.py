"""The OCI distribution contract (``contract/distribution.py``): the core parses and pins
``oci://`` references itself, and reaches a registry only through the client a plugin serves
(``wbcore_distributions``).

The client itself (wbcore-oci) is tested in ``plugins/wbcore-oci/tests`` against a real
registry; what an install does with what any client returns (an in-process plugin serving a
client over a local folder) in ``plugins/wbcore-install/tests/test_install_oci.py``."""

from __future__ import annotations

import pytest

from wbcore_runtime.contract.distribution import Reference
from wbcore_runtime.contract.errors import InvalidArgs


def test_references_parse_and_refuse_nonsense() -> None:
    r = Reference.parse("oci://127.0.0.1:5000/wb/tools/hello:1.0")
    assert (r.registry, r.repository, r.tag, r.digest) == ("127.0.0.1:5000", "wb/tools/hello", "1.0", None)
    d = "sha256:" + "a" * 64
    p = Reference.parse(f"registry.example/hello@{d}")
    assert p.ref == d and p.text() == f"oci://registry.example/hello@{d}"
    assert r.pinned(d).text() == f"oci://127.0.0.1:5000/wb/tools/hello@{d}"
    for bad, why in [("oci://host", "write it as"), ("oci://host/Hello:1", "repository name"),
                     ("oci://host/hello", "name a tag"), ("oci://host/hello@sha256:12", "digest"),
                     ("oci://ho st/x:1", "registry host"), ("oci://host/x:-bad", "valid tag"),
                     ("oci://host/../x:1", "repository name")]:
        with pytest.raises(InvalidArgs, match=why):
            Reference.parse(bad)


@pytest.mark.parametrize("text", [
    "oci://registry.example\n/wb/x:1",  # each part may end in a line feed that a `$` let through
    "oci://registry.example/wb/x\n:1",
    "oci://registry.example/wb/x:1\n@sha256:" + "a" * 64,
])
def test_a_line_feed_inside_a_reference_is_refused(text: str) -> None:
    # the request's URL drops a line feed, so ``wb/x\n`` would fetch ``wb/x`` while the lock,
    # the image cache's refs and every message recorded (and printed) another name
    with pytest.raises(InvalidArgs, match="not a"):
        Reference.parse(text)
