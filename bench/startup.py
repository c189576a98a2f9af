"""Start-up budget (issue 12 item 6): ``wbx`` against floors measured in the same run.

    .venv/bin/python bench/startup.py [--rounds 15] [--cmd b64,upper,jq] [--toolkits 1000]

Floors, each a fresh process like the ``wbx`` command it bounds:
  (a) ``python -c "import typer"``
  (b) a one-command Typer app's ``--help``
  (c) a bare wasmtime-py process that deserializes, instantiates and runs the same module
      ``wbx run <cmd>`` runs (compiled once for it, as ``wbx`` caches its compiled form),
      with the same stdin and argv the guest gets (a ``stdin1`` built-in such as ``jq`` reads
      its filter from the first stdin line: the floor gets the same bytes); one floor per
      command when ``--cmd`` names several (each ``wbx run`` is compared with its own)

Budgets: ``wbx --help`` <= 1.0x (b); ``wbx toolkit list`` <= 1.3x (a); ``wbx run <cmd>``
<= 1.5x (c); discovering 1,000 toolkits <= 300 ms CPU with the index warm (a fresh
process, the parsed manifests cached in the home by the last run); the skill index of the
same toolkits (every skill's title line, read from the files) is printed beside it.

Every case runs once per round, in the same order, so a load change hits every case
alike (interleaved). Each figure is the child's own wall time and its CPU time (user +
system, from ``wait4``): CPU is what the budgets compare, wall is shown beside it. The
load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
WBX = str(Path(PY).with_name("wbx"))
STDIN = b"hello from the start-up bench\n"
#: What ``wbx run <cmd>`` reads, where the default is not valid input (the first line of a
#: ``stdin1`` command is its argument: jq's filter).
STDIN_FOR = {"jq": b'.a\n{"a": "hello from the start-up bench"}\n'}

TYPER_APP = textwrap.dedent('''
    import typer

    app = typer.Typer()

    @app.command()
    def hello(name: str = "world") -> None:
        """Say hello."""
        typer.echo(f"hello {name}")

    app()
''')

# The floor for `wbx run`: what any Python host of this module must do (import wasmtime,
# load the compiled module, link WASI, instantiate, run _start with the same stdin).
BARE_WASMTIME = textwrap.dedent('''
    import sys, wasmtime
    engine = wasmtime.Engine()
    module = wasmtime.Module.deserialize_file(engine, sys.argv[1])
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    wasi.argv = [sys.argv[3]]
    wasi.stdin_file = sys.argv[2]
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    store.set_wasi(wasi)
    instance = linker.instantiate(store, module)
    try:
        instance.exports(store)["_start"](store)
    except wasmtime.ExitTrap as exc:
        sys.exit(exc.code)
''')

DISCOVER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from wbcore_runtime.runtime import Runtime
    rt = Runtime.open(plugins=[], home=sys.argv[1], roots=[Path(sys.argv[2])])
    t = time.process_time()
    found = rt.discover()
    t1 = time.process_time()
    for tk in found.toolkits.values():
        tk.skills  # the skill index (search, show, MCP resources): read from the files, not cached
    print(len(found.toolkits), (t1 - t) * 1e3, (time.process_time() - t1) * 1e3)
''')


def run_measured(cmd: list[str], env: dict[str, str],
                 stdin: Path | None = None) -> tuple[float, float, bytes]:
    """One fresh process: (wall s, user+system CPU s from wait4, stdout)."""
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL  # noqa: SIM115
    r, w = os.pipe()
    try:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdin=fin, stdout=w, stderr=subprocess.DEVNULL)
        os.close(w)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        os.close(r)
        if stdin:
            fin.close()
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {proc.returncode} (run it by hand to see why)")
    return wall, usage.ru_utime + usage.ru_stime, b"".join(chunks)


def generate(root: Path, n: int) -> None:
    from wbcore_testing.fixtures import write_toolkit

    for i in range(n):
        skills = {"overview": f"#+TITLE: tk{i} overview\n#+DESCRIPTION: generated\n"}
        skills.update({f"cmd{j}": f"#+TITLE: cmd{j}\nrecipe {j}\n" for j in range(3)})
        write_toolkit(root, f"tk{i:04d}", skills=skills, exec="command", caps="vfs kv",
                      extra={"CLI_BIN": f"tk{i}", "BUILD_LANG": "c", "BUILD_SRC": "path:src"})


def prepare(tmp: Path, cmds: list[str]) -> tuple[dict[str, str], dict[str, tuple[Path, Path]]]:
    """A home with every command of ``cmds`` built or installed and, for each, the bare
    floor's precompiled module and the stdin both read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WB_")}
    env.update(WB_HOME=str(tmp / "home"), WB_TOOLKITS_ROOT=str(ROOT / "toolkits"), PYTHONDONTWRITEBYTECODE="")
    from wbcore_runtime.build import builder
    from wbcore_runtime.runtime import Runtime

    from wbcore_runtime.store.registry import RESERVED

    rt = Runtime.open(home=tmp / "home", roots=[ROOT / "toolkits"], env=env)
    import wasmtime

    out: dict[str, tuple[Path, Path]] = {}
    for cmd in cmds:
        if cmd in RESERVED:  # a built-in (upper, jq): installed, as its first `wbx run` would
            rt.install_builtins([cmd])
            entry = rt.registry.lookup("command", cmd)
        else:
            builder.build(rt, cmd)
            entry = rt.registry.lookup("command", cmd)
        cwasm = tmp / f"{cmd}.cwasm"
        cwasm.write_bytes(wasmtime.Module(wasmtime.Engine(),
                                          rt.artifacts.path(entry.sha256).read_bytes()).serialize())
        data = STDIN_FOR.get(cmd, STDIN)
        # `wbx run cmd` with no arguments: the guest's argv is the program alone and its stdin
        # is what wbx read (a stdin1 guest's filter included), as the floor runs it
        stdin = tmp / f"{cmd}.stdin"
        stdin.write_bytes(data)
        out[cmd] = (cwasm, stdin)
    (tmp / "typer_app.py").write_text(TYPER_APP)
    (tmp / "bare_wasmtime.py").write_text(BARE_WASMTIME)
    (tmp / "discover.py").write_text(DISCOVER)
    return env, out


def stats(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:7.1f} ({min(xs) * 1e3:6.1f}–{max(xs) * 1e3:6.1f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cmd", default="b64",
                    help="what `wbx run` runs: a shipped toolkit's command (default b64) or a built-in "
                         "(upper, jq); several, comma-separated, each against its own floor")
    ap.add_argument("--toolkits", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wb-startup-"))
    try:
        cmds = [c for c in args.cmd.split(",") if c]
        env, prepared = prepare(tmp, cmds)
        many = tmp / "many"
        generate(many, args.toolkits)
        cases: list[tuple[str, list[str], Path | None]] = [
            ("(a) python -c 'import typer'", [PY, "-c", "import typer"], None),
            ("(b) typer app --help", [PY, str(tmp / "typer_app.py"), "--help"], None),
        ]
        for cmd, (cwasm, stdin) in prepared.items():
            cases += [
                (f"(c) bare wasmtime-py run {cmd}",
                 [PY, str(tmp / "bare_wasmtime.py"), str(cwasm), str(stdin), cmd], stdin),
                (f"wbx run {cmd}", [WBX, "run", cmd], stdin),
            ]
        cases += [
            ("wbx --help", [WBX, "--help"], None),
            ("wbx toolkit list", [WBX, "toolkit", "list"], None),
            (f"discover {args.toolkits} (whole process)",
             [PY, str(tmp / "discover.py"), str(tmp / "home"), str(many)], None),
        ]
        # Warm: page cache, byte-code, the entry-point and discovery caches, the compiled module.
        outputs: dict[str, bytes] = {}
        for _ in range(2):
            for name, cmd, sin in cases:
                outputs[name] = run_measured(cmd, env, sin)[2]
        for cmd in prepared:  # the floor did the same work: the same output
            if outputs[f"wbx run {cmd}"] != outputs[f"(c) bare wasmtime-py run {cmd}"]:
                raise SystemExit(f"bench: wbx run {cmd} and its floor printed different output")
        walls: dict[str, list[float]] = {c[0]: [] for c in cases}
        cpus: dict[str, list[float]] = {c[0]: [] for c in cases}
        disc: list[float] = []
        skills: list[float] = []
        load0 = os.getloadavg()
        for _ in range(args.rounds):
            for name, cmd, sin in cases:
                wall, cpu, out = run_measured(cmd, env, sin)
                walls[name].append(wall)
                cpus[name].append(cpu)
                if name.startswith("discover"):
                    count, ms, ms_skills = out.split()
                    assert int(count) == args.toolkits, count
                    disc.append(float(ms) / 1e3)
                    skills.append(float(ms_skills) / 1e3)
        load1 = os.getloadavg()
        print(f"start-up, {args.rounds} interleaved rounds, {os.cpu_count()} cpus, "
              f"load {load0[0]:.2f} → {load1[0]:.2f} (1-min avg before → after)")
        print(f"{'case':<40} {'wall ms median (min–max)':>26}  {'CPU ms median (min–max)':>26}")
        for name, *_ in cases:
            print(f"{name:<40} {stats(walls[name]):>26}  {stats(cpus[name]):>26}")
        print(f"{'  of which discovery (index warm)':<40} {'':>26}  {stats(disc):>26}")
        print(f"{'  then the skill index of all':<40} {'':>26}  {stats(skills):>26}")
        cpu = {k: statistics.median(v) for k, v in cpus.items()}
        checks = [
            ("wbx --help", "(b) typer app --help", 1.0),
            ("wbx toolkit list", "(a) python -c 'import typer'", 1.3),
            *((f"wbx run {cmd}", f"(c) bare wasmtime-py run {cmd}", 1.5) for cmd in prepared),
        ]
        print()
        ok = True
        for name, floor, budget in checks:
            ratio = cpu[name] / cpu[floor]
            good = ratio <= budget
            ok &= good
            print(f"{name:<20} {ratio:5.2f}x {floor:<32} (budget {budget:.1f}x, CPU medians) "
                  f"{'ok' if good else 'OVER'}")
        d = statistics.median(disc) * 1e3
        ok &= d <= 300
        print(f"discover {args.toolkits:<11} {d:6.1f} ms CPU, index warm (budget 300 ms) "
              f"{'ok' if d <= 300 else 'OVER'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
