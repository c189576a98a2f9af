"""Small output helpers shared by the CLI rooms."""

from __future__ import annotations

import json
import sys
from typing import Any

JSON_HELP = "Print JSON instead of text."


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def warn(message: str) -> None:
    print(f"wbx: warning: {message}", file=sys.stderr)
