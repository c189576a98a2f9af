"""Whole-toolkit signatures: sign, verify, and the cached check a call pays.

    .venv/bin/python bench/signing.py [--files 50] [--artifact-mib 8] [--rounds 20]

Builds a third-party toolkit with N skills and one artifact of M MiB, then reports the
median time to sign, to verify from scratch (hash everything), and the per-call cost of
``Runtime.effective_caps`` once the verdict is cached (a folder fingerprint, no hashing).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--artifact-mib", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()

    from wbcore_runtime.trust import consent, identity, signing
    from wbcore_runtime.runtime import Runtime
    from wbcore_testing.fixtures import write_toolkit

    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-sign-"))
    root = tmp / "toolkits"
    skills = {"overview": "#+TITLE: o\n\nOverview.\n"}
    skills.update({f"s{i:03d}": f"#+TITLE: s{i}\n\n" + "text line\n" * 200 for i in range(args.files)})
    d = write_toolkit(root, "bench", trust="third-party", caps="net", skills=skills,
                      files={"bin/tool.wasm": b"\0asm\x01\0\0\0" + bytes(args.artifact_mib << 20)})
    key = identity.Identity.from_seed(bytes(32))

    def med(fn, n: int) -> float:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    sign_s = med(lambda: signing.sign(d, key), args.rounds)
    verify_s = med(lambda: signing.verify(d), args.rounds)
    rt = Runtime.open(plugins=[], home=tmp / "home", roots=[root])
    tk = rt.toolkit("bench")
    consent.ConsentStore(rt.home).grant("bench", ["net"], key.did)
    assert rt.effective_caps(tk) == frozenset({"net"})
    cached_s = med(lambda: rt.effective_caps(tk), args.rounds * 50)
    print(f"toolkit: {args.files + 1} skills + {args.artifact_mib} MiB artifact")
    print(f"sign:                     {sign_s * 1e3:8.2f} ms")
    print(f"verify (hash everything): {verify_s * 1e3:8.2f} ms")
    print(f"effective_caps (cached):  {cached_s * 1e6:8.1f} µs")


if __name__ == "__main__":
    main()
