"""``python -m wbcore`` is ``wbx``."""

from wbcore.cli.app import run

run()
