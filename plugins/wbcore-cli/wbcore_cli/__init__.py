"""The ``wbx`` command line (``wb`` is an alias)."""

from wbcore_cli.app import build_app, main

__all__ = ["build_app", "main"]
