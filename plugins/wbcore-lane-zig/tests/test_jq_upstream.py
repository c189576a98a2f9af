"""The built-in jq is upstream jq: its own test suite (``tests/jq.test`` of jq 1.8.2) runs
through ``wbx run jq --run-tests`` (stdin1: the first stdin line is ``--run-tests``, the rest
the test file) and must pass ≥ 95 %.

The suite runs in slices (``--skip``/``--take``, upstream's own options) so that a test that
kills the guest (a trap: the engine's wasm stack is smaller than native jq's 8 MiB stack for
the 10000-deep recursion tests) costs only its own result: a slice without upstream's
summary line is rerun test by test, and each test that still ends without a summary counts
as failed. The pass rate is printed (``-s`` shows it) and recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

# A fresh home compiles the built-in (~10 s on two cores) and the suites run ~5 s: CI's slow stage.
pytestmark = pytest.mark.slow

SUMMARY = re.compile(rb"^(\d+) of (\d+) tests passed \((\d+) malformed, (\d+) skipped\)$", re.MULTILINE)
SLICE = 40


@pytest.fixture(scope="module")
def suite() -> bytes:
    from wbcore_lane_zig.builtins import jqsrc

    tree = jqsrc.sources()
    if tree is None:
        pytest.skip(jqsrc.missing())
    return (tree / "tests" / "jq.test").read_bytes()


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, zig_cache: Path):
    """One home for the module: the built-in is compiled once (~10 s), not per test."""
    from wbcore_runtime.runtime import Runtime

    home = tmp_path_factory.mktemp("wb-home-jq")
    return Runtime.open(home=home, roots=[],
                        env={"WB_ZIG_CACHE": str(zig_cache), "PATH": os.environ.get("PATH", "")})


def count_tests(text: bytes) -> int:
    """How many tests upstream's runner sees: the first line of each blank-line-separated
    block that is not a comment or a ``%%FAIL`` marker."""
    n, in_block = 0, False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            in_block = False
            continue
        if line.startswith(b"#") or in_block:
            continue
        in_block = True
        if not line.startswith(b"%%FAIL"):
            n += 1
        else:
            in_block = False  # the program is the next line
    return n


def run_slice(wbx, rt, suite: bytes, skip: int, take: int) -> tuple[int, int] | None:
    """(passed, run) for tests ``skip+1 .. skip+take``, or None when the guest died first."""
    res = wbx("run", "jq", "--run-tests", "--skip", str(skip), "--take", str(take), runtime=rt, input=suite)
    m = SUMMARY.search(res.stdout_bytes)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2))


def test_jq_upstream_suite_passes_95_percent(wbx, rt, suite: bytes) -> None:
    total = count_tests(suite)
    assert total > 400, total  # the file is upstream's, not a stub
    started = time.monotonic()
    rt.install_builtins(["jq"])
    build_s = time.monotonic() - started
    passed, run, died = 0, 0, []
    for skip in range(0, total, SLICE):
        take = min(SLICE, total - skip)
        got = run_slice(wbx, rt, suite, skip, take)
        if got is None:
            for one in range(skip, skip + take):
                single = run_slice(wbx, rt, suite, one, 1)
                if single is None:
                    died.append(one + 1)
                    run += 1
                else:
                    passed, run = passed + single[0], run + single[1]
        else:
            passed, run = passed + got[0], run + got[1]
    rate = passed / total
    print(f"\njq 1.8.2 tests/jq.test through wbx run jq: {passed}/{total} passed ({rate:.1%}); "
          f"ran {run}; guest died in tests {died}; build {build_s:.1f}s, suite "
          f"{time.monotonic() - started - build_s:.1f}s")
    assert run == total
    assert rate >= 0.95, f"{passed}/{total} passed"


@pytest.mark.parametrize("name", ["onig", "man", "manonig", "base64", "uri", "optional"])
def test_jq_upstream_other_suites(wbx, rt, name: str) -> None:
    """Upstream's other test files (regexes by oniguruma, the manual's examples, formats).
    man.test's two ``$ENV.PAGER`` tests expect upstream's test script's environment,
    which a built-in does not get."""
    from wbcore_lane_zig.builtins import jqsrc

    tree = jqsrc.sources()
    if tree is None:
        pytest.skip(jqsrc.missing())
    res = wbx("run", "jq", "--run-tests", runtime=rt, input=(tree / "tests" / f"{name}.test").read_bytes())
    m = SUMMARY.search(res.stdout_bytes)
    assert m, res.stdout[-2000:]
    passed, total = int(m.group(1)), int(m.group(2))
    print(f"\njq 1.8.2 tests/{name}.test: {passed}/{total}")
    assert total > 0 and passed >= total - (2 if name == "man" else 0), res.stdout[-2000:]
