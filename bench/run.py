"""Run the benchmarks: every ``bench/*.py`` script (or the ones named), each printing a table.

    python3 dev.py bench                    # all of them, in name order
    python3 dev.py bench command kernel     # just these (file stems)
    python3 dev.py bench --list

Scripts are plain programs (``python bench/<name>.py``) so each can also be run alone;
the figures and how to reproduce them are in docs/benchmarks.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def scripts() -> list[Path]:
    return sorted(p for p in HERE.glob("*.py") if p.name != "run.py" and not p.name.startswith("_"))


def main(argv: list[str]) -> int:
    found = {p.stem: p for p in scripts()}
    if "--list" in argv:
        print("\n".join(found))
        return 0
    wanted = [a for a in argv if not a.startswith("-")] or list(found)
    unknown = [w for w in wanted if w not in found]
    if unknown:
        print(f"unknown bench {', '.join(unknown)}; known: {', '.join(found)}", file=sys.stderr)
        return 2
    worst = 0
    for name in wanted:
        print(f"\n=== bench/{name}.py", flush=True)
        code = subprocess.call([sys.executable, str(found[name])])
        worst = worst or code
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
