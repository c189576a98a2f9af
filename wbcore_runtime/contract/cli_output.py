"""How a ``wbx`` command prints: the ``--json`` option's help, JSON on stdout, a warning on stderr.

The CLI is its own distribution (wbcore-cli); the commands plugins add through
``wbcore_cli_commands`` print with these, and a plugin imports only the core, so they are here.
"""

from __future__ import annotations

import json
import sys
from typing import Any

JSON_HELP = "Print JSON instead of text."


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def warn(message: str) -> None:
    print(f"wbx: warning: {message}", file=sys.stderr)
