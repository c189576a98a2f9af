"""``python -m wbcore_runtime`` is ``wbx``."""

from wbcore_runtime.cli.app import run

run()
