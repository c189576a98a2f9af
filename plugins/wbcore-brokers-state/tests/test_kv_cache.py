"""The kv read cache: a value read before is served from memory, and never after a write.

Writers in other processes are real processes (spawned interpreters) writing the same
``kv.db``; the cache must see their writes on the very next ``get``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, NotFound


@pytest.fixture
def rt(make_runtime):
    return make_runtime(plugins=["brokers-state"])


def ctx(rt, tenant="acme", **kw):
    return rt.dock.context(principal=Principal(tenant, "notes"), caps={"kv"}, **kw)


def other_process_put(home, tenant, key, value):
    """A put from a different interpreter on the same home (its own cache and counter map)."""
    code = textwrap.dedent(f"""
        from wbcore_runtime.contract.calls import Principal
        from wbcore_runtime.runtime import Runtime
        rt = Runtime.open(plugins=["brokers-state"], home={str(home)!r})
        c = rt.dock.context(principal=Principal({tenant!r}, "writer"), caps={{"kv"}})
        rt.dock.call(c, "kv", "put", {{"key": {key!r}, "value": {value!r}}})
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_get_is_served_from_the_cache_until_any_process_writes(rt):
    d, c = rt.dock, ctx(rt)
    drv = d.driver("kv")
    d.call(c, "kv", "put", {"key": "k", "value": b"v1"})
    assert d.call(c, "kv", "get", {"key": "k"}) == {"value": b"v1"}
    # the second read is a cache hit: the database is not asked (its connection is taken away)
    conn, drv.db.conn = drv.db.conn, None
    try:
        assert d.call(c, "kv", "get", {"key": "k"}) == {"value": b"v1"}
    finally:
        drv.db.conn = conn
    other_process_put(rt.home, "acme", "k", b"v2")
    assert d.call(c, "kv", "get", {"key": "k"}) == {"value": b"v2"}  # the very next read
    other_process_put(rt.home, "acme", "gone", b"x")
    d.call(c, "kv", "delete", {"key": "k"})
    with pytest.raises(NotFound):
        d.call(c, "kv", "get", {"key": "k"})


def test_cache_keeps_tenants_apart(rt):
    d, a, b = rt.dock, ctx(rt, "acme"), ctx(rt, "other")
    d.call(a, "kv", "put", {"key": "k", "value": b"acme's"})
    assert d.call(a, "kv", "get", {"key": "k"})["value"] == b"acme's"
    with pytest.raises(NotFound):
        d.call(b, "kv", "get", {"key": "k"})


def test_cached_value_still_counts_against_the_response_budget(rt):
    d = rt.dock
    big = ctx(rt)
    d.call(big, "kv", "put", {"key": "k", "value": b"x" * 1000})
    assert d.call(big, "kv", "get", {"key": "k"})["value"] == b"x" * 1000  # now cached
    small = ctx(rt, max_response=100)
    with pytest.raises(InvalidArgs) as exc:
        d.call(small, "kv", "get", {"key": "k"})
    assert exc.value.reason == "too-large"


def test_a_read_that_raced_a_write_is_not_cached(rt):
    """The writer commits and bumps between the reader's counter check and its store."""
    d, c = rt.dock, ctx(rt)
    drv = d.driver("kv")
    d.call(c, "kv", "put", {"key": "k", "value": b"old"})
    gen = drv.db.changes.value()
    drv._cached("acme", "k")  # the reader looked at the counter (gen) ...
    d.call(c, "kv", "put", {"key": "k", "value": b"new"})  # ... a write lands ...
    drv._remember("acme", "k", b"old", gen)  # ... and the reader tries to keep what it read
    assert d.call(c, "kv", "get", {"key": "k"})["value"] == b"new"
    # an entry planted under an old counter value is never served either
    drv._cache[("acme", "k")] = (gen, b"old")
    assert d.call(c, "kv", "get", {"key": "k"})["value"] == b"new"


def test_without_a_counter_nothing_is_cached(rt):
    d, c = rt.dock, ctx(rt)
    drv = d.driver("kv")
    drv.db.changes = None  # e.g. a read-only folder where the counter could not be made
    d.call(c, "kv", "put", {"key": "k", "value": b"v"})
    assert d.call(c, "kv", "get", {"key": "k"})["value"] == b"v"
    assert drv._cache == {}


def test_large_values_are_read_but_not_cached(rt):
    from wbcore_brokers_state.kv import CACHE_ITEM

    d, c = rt.dock, ctx(rt)
    drv = d.driver("kv")
    d.call(c, "kv", "put", {"key": "big", "value": b"b" * (CACHE_ITEM + 1)})
    assert len(d.call(c, "kv", "get", {"key": "big"})["value"]) == CACHE_ITEM + 1
    assert ("acme", "big") not in drv._cache
