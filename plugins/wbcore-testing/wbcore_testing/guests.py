"""The WASI guest runner for lane tests that build or run without a runtime of their own: the
one the installed ``wbcore-wasmtime`` serves, picked as a lane's runtime picks it
(``wbcore_runtime.contract.guest.runner``), never imported from the plugin."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile

from wbcore_runtime.contract import guest


@functools.cache
def guest_runner() -> guest.GuestRunner:
    """The runner served to a runtime that loads only ``wasmtime`` (made once per process)."""
    from wbcore_runtime.runtime import Runtime

    home = tempfile.mkdtemp(prefix="wb-test-guests-")
    atexit.register(shutil.rmtree, home, True)
    return guest.runner(Runtime.open(plugins=["wasmtime"], home=home))
