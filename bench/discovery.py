"""Discovery and CLI start-up: 1,000 generated toolkits, `wbx --help`, `wbx toolkit list`.

    .venv/bin/python bench/discovery.py [--toolkits 1000] [--runs 10]

Targets (issue 2): discovery of 1,000 toolkits <= 1 s; `wbx --help` and
`wbx toolkit list` <= 0.3 s wall each, with every plugin installed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wbcore_runtime.toolkit import discovery
from wbcore_testing.fixtures import write_toolkit


def _median_ms(samples: list[float]) -> str:
    return (f"{statistics.median(samples) * 1000:8.1f} ms (min {min(samples) * 1000:.1f}, "
            f"max {max(samples) * 1000:.1f})")


def generate(root: Path, n: int) -> None:
    for i in range(n):
        skills = {"overview": f"#+TITLE: tk{i} overview\n#+DESCRIPTION: generated\n"}
        skills.update({f"cmd{j}": f"#+TITLE: cmd{j}\nrecipe {j}\n" for j in range(3)})
        write_toolkit(root, f"tk{i:04d}", skills=skills, exec="command", caps="vfs kv",
                      extra={"CLI_BIN": f"tk{i}", "BUILD_LANG": "c", "BUILD_SRC": "path:src"})


def wall(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--toolkits", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "toolkits"
        generate(root, args.toolkits)
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            found = discovery.discover([root])
            for tk in found.toolkits.values():
                _ = tk.skills  # the index reads every skill's title line too
            times.append(time.perf_counter() - t)
        assert len(found.toolkits) == args.toolkits, len(found.toolkits)
        wbx = str(Path(sys.executable).with_name("wbx"))
        env = dict(os.environ, WB_HOME=str(Path(tmp) / "home"), WB_TOOLKITS_ROOT=str(root))
        small = Path(tmp) / "small"
        generate(small, 10)
        env_small = dict(env, WB_TOOLKITS_ROOT=str(small))
        wall([wbx, "--help"], env, 2)  # warm the entry-point cache and the page cache
        print(f"discover {args.toolkits} toolkits (manifests + skill index): {_median_ms(times)}")
        print("wbx --help:                                 "
              f"{_median_ms(wall([wbx, '--help'], env, args.runs))}")
        print("wbx toolkit list (10 toolkits):             "
              f"{_median_ms(wall([wbx, 'toolkit', 'list'], env_small, args.runs))}")
        print(f"wbx toolkit list ({args.toolkits} toolkits):         "
              f"{_median_ms(wall([wbx, 'toolkit', 'list'], env, args.runs))}")
        base = wall([sys.executable, "-c", "pass"], env, args.runs)
        print(f"python -c pass (interpreter floor):         {_median_ms(base)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
