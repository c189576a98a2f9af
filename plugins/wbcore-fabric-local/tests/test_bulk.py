"""fabric.map_chunks on the local and threads engines: the same outputs as map, per-input
errors by index in a chunk, cancellation, the deadline (the window that bounds what is read
and the parent's memory: test_local_engine, for both APIs)."""

from __future__ import annotations

import threading
import time

import pytest
from fabric_guests import ECHO, K_UPPER, SPIN

from wbcore_runtime.dispatch import fabric
from wbcore_runtime.contract.errors import ErrorKind, Timeout


def _flat(chunks):
    """(index, value, error) per input, from chunks checked to be consecutive and in order."""
    out, nxt = [], 0
    for c in chunks:
        assert isinstance(c, fabric.ResultChunk) and c.start == nxt and len(c) >= 1
        assert set(c.errors) <= set(range(c.start, c.stop))
        out += [(c.start + k, v, c.errors.get(c.start + k)) for k, v in enumerate(c.values)]
        nxt = c.stop
    return out


@pytest.mark.parametrize("engine", ["local", "threads"])
def test_bulk_kernel_outputs_are_map_outputs_in_order(rt, register, engine):
    register("kup", K_UPPER, kind="kernel")
    words = [f"word {i} " * (i % 5) for i in range(20_000)]  # lengths 0..~40: not one fixed size
    chunks = list(fabric.map_chunks(rt, "kup", words, kind="kernel", width=2, engine=engine))
    flat = _flat(chunks)
    assert [i for i, _, _ in flat] == list(range(len(words)))
    mapped = [r.value for r in fabric.map(rt, "kup", words, kind="kernel", width=2, engine=engine)]
    assert [v for _, v, _ in flat] == mapped == [w.upper().encode() for w in words]
    assert all(c.ok for c in chunks)
    if engine == "local":  # outputs come joined: one buffer and an array of lengths per chunk
        big = max(chunks, key=len)
        assert len(chunks) < len(words) // 100 and isinstance(big.values, fabric.Outputs)
        assert (big.values.data == b"".join(big.values)
                and list(big.values.lengths) == [len(v) for v in big.values])
        # and map itself goes through the same chunks: one Result per input, the same values
        assert [r.index for r in fabric.map(rt, "kup", words[:50], kind="kernel", width=2)] == list(range(50))


@pytest.mark.parametrize("engine", ["local", "threads"])
def test_bulk_per_input_errors_are_in_their_chunk_by_index(rt, register, engine):
    register("kup", K_UPPER, kind="kernel")
    big = b"z" * 70_000  # over the kernel's input arena: that input's InvalidArgs, in the worker
    inputs = [b"a", big, b"b", 3, b"c", {"input": "d"}, b"e"]  # 3: not an input (the parent says so)
    chunks = list(fabric.map_chunks(rt, "kup", inputs, kind="kernel", width=1, batch=7, engine=engine))
    errors = {i: e for c in chunks for i, e in c.errors.items()}
    assert sorted(errors) == [1, 3]
    assert all(e.kind is ErrorKind.INVALID_ARGS for e in errors.values())
    assert "bytes or text" in errors[3].message
    values = [v for c in chunks for v in c.values]
    assert values == [b"A", b"", b"B", b"", b"C", b"D", b"E"]  # b"": a failed kernel input's placeholder
    results = [r for c in chunks for r in c.results()]  # the same chunks as map's results
    assert [(r.index, r.value, r.error) for r in results] == [
        (i, None if i in errors else values[i], errors.get(i)) for i in range(7)]


def test_bulk_commands_with_errors_match_map(rt, register):
    register("echo", ECHO)
    inputs = [{"stdin": f"item-{i}" if i % 7 else f"!boom-{i}"} for i in range(30)]
    inputs[5] = {"argv": "not a list"}
    flat = _flat(fabric.map_chunks(rt, "echo", inputs, width=2))
    mapped = list(fabric.map(rt, "echo", inputs, width=2))
    assert [(i, v and v.stdout, e and e.kind) for i, v, e in flat] == \
           [(r.index, r.value and r.value.stdout, r.error and r.error.kind) for r in mapped]
    assert {i for i, _, e in flat if e} == {0, 5, 7, 14, 21, 28}


@pytest.mark.parametrize("engine", ["local", "threads"])
def test_bulk_cancel_stops_the_batch(rt, register, engine):
    register("kup", K_UPPER, kind="kernel")
    cancel = threading.Event()
    n = 0
    for c in fabric.map_chunks(rt, "kup", (b"a" for _ in range(10**9)), kind="kernel", width=2, cancel=cancel,
                               engine=engine):
        n += len(c)
        if n >= 50:
            cancel.set()
    assert 50 <= n < 10**6


@pytest.mark.parametrize("engine", ["local", "threads"])
def test_bulk_deadline_ends_spinning_calls(rt, register, engine):
    register("spin", SPIN)
    t0 = time.monotonic()
    with pytest.raises(Timeout):
        list(fabric.map_chunks(rt, "spin", [{}] * 4, width=2, deadline=2.0, engine=engine))
    assert time.monotonic() - t0 < 15


#: kernel: 64 KiB of output for any input (the arena's whole output side)
K_FLOOD = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32) (i32.const 65536)))"""


def test_chunks_of_a_kernel_with_large_outputs_hold_about_a_mebibyte(rt, register):
    """Tiny inputs, 64 KiB out each: a chunk is sized by what comes back too, or one answer
    holds thousands of outputs (hundreds of MiB) and the window several of them."""
    from wbcore_fabric_local.processes import CHUNK_BYTES

    register("kflood", K_FLOOD, kind="kernel")
    sizes = []
    for c in fabric.map_chunks(rt, "kflood", (b"x" for _ in range(3000)), kind="kernel", width=2):
        assert c.ok and len(c.values.data) == 65536 * len(c)
        sizes.append(len(c))
    assert sum(sizes) == 3000 and max(sizes) <= 2 * CHUNK_BYTES // 65536, max(sizes)
