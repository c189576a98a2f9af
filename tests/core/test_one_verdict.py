"""One verdict per question (issue 22 item 4): the trust verdict, path containment and the
reading of untrusted archives each have one home, and no other product file decides them.

Grep-level, like the one-fetcher and the token-comparison tests: a second copy written later
fails here, naming the file and the home to call instead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _product_files() -> list[Path]:
    files = [*ROOT.joinpath("wbcore_runtime").rglob("*.py"),
             *ROOT.joinpath("plugins").glob("*/wbcore_*/**/*.py")]
    assert len(files) > 100, "the product tree was not found"
    return files


def _hits(pattern: str, allowed: dict[str, str]) -> list[str]:
    rx = re.compile(pattern)
    out = []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if rx.search(line):
                out.append(f"{rel}:{n}: {line.strip()}")
    return out


def test_one_trust_verdict() -> None:
    """Only trust.py asks for a signature verdict and judges it (trust.refusal: one rule for an
    unresolved did:web); everything else calls trust.signature_verdict/folder_verdict/refusal."""
    home = {"wbcore_runtime/trust/verdict.py": "the verdict",
            "wbcore_runtime/trust/signing.py": "the signature itself"}
    calls = _hits(r"\bsigning\.verify\(", home)
    assert not calls, (
        "call wbcore_runtime.trust.verdict (folder_verdict + refusal) instead:\n" + "\n".join(calls))
    unresolved = _hits(r"\bUNRESOLVED\b", home)
    assert not unresolved, "an unresolved did:web is judged by trust.refusal only:\n" + "\n".join(unresolved)
    judged = _hits(r"verdict\.ok\b", home)
    assert not judged, "judge a verdict with trust.refusal (one rule), not verdict.ok:\n" + "\n".join(judged)


def test_one_containment_function() -> None:
    """No walker decides containment itself: wbcore_runtime.guard.paths (paths.inside / Root) does, and
    the unpacker (which writes, and checks what it wrote) is its one sibling."""
    home = {
        "wbcore_runtime/guard/paths.py": "the containment function",
        "wbcore_runtime/guard/unpack.py": "the unpacker checks the tree it writes",
        # not containment of a walked tree: the interpreter the os_process workers run must
        # live under this Python's base prefix (a bind of that folder serves it)
        "plugins/wbcore-process/wbcore_process/pool.py": "interpreter location, not a walk",
        # a demo picks the wbx executable next to the current folder: no untrusted tree
        "plugins/wbcore-demo/wbcore_demo/demo.py": "the demo's own executable",
    }
    copies = _hits(r"is_relative_to\(|commonpath\(|startswith\((str\()?(base|root)\b.*os\.sep"
                   r"|followlinks=True|realpath\(.*\)\.startswith\(", home)
    assert not copies, "call wbcore_runtime.guard.paths.inside (or Root) instead:\n" + "\n".join(copies)


def test_one_unpacker() -> None:
    """Every reader of an untrusted archive goes through wbcore_runtime/guard/unpack.py (unpack,
    read_files); writers of archives (export, oci push, the bundle's own zip) may use the modules."""
    home = {
        "wbcore_runtime/guard/unpack.py": "the unpacker",
        "wbcore_runtime/store/archive.py": "writes a tar (mode='w')",
        "plugins/wbcore-oci/wbcore_oci/client.py": "writes a toolkit layer tar (mode='w')",
        "plugins/wbcore-demo/wbcore_demo/demosite.py": "writes the demo's wheel (a zip, mode 'w')",
        # re-packs the pinned, digest-checked jq source tarball the project ships (build input)
        "plugins/wbcore-lane-zig/wbcore_lane_zig/builtins/jqsrc.py": "pinned source, digest-checked",
        # ship writes the bundle's zip (mode 'w'); inspect and restore read it with
        # unpack.read_files(strict=True), which test_bundle_reads_through_the_unpacker checks
        "plugins/wbcore-publish/wbcore_publish/bundle.py": "writes the bundle's zip (mode 'w')",
        # test support: builds the hostile tars the unpacker's tests feed it (mode 'w:gz')
        "plugins/wbcore-testing/wbcore_testing/toolkit_sources.py": "writes test archives (mode 'w:gz')",
        # test support: the OCI image layers its registry tests push (mode 'w')
        "plugins/wbcore-testing/wbcore_testing/oci_images.py": "writes test image layers (mode 'w')",
    }
    readers = _hits(r"tarfile\.open\(|zipfile\.ZipFile\(|\.extractall\(|\.extractfile\(", home)
    assert not readers, (
        "read untrusted archives with wbcore_runtime.guard.unpack (unpack / read_files):\n"
        + "\n".join(readers))


def test_bundle_reads_through_the_unpacker() -> None:
    """The bundle file is allowed above as a writer: its only zip opening is the writer's, and
    its reading goes through unpack.read_files in strict (files-only) mode."""
    src = ROOT.joinpath("plugins/wbcore-publish/wbcore_publish/bundle.py").read_text(encoding="utf-8")
    openings = re.findall(r"zipfile\.ZipFile\(([^)]*)\)", src)
    assert openings and all('"w"' in o for o in openings), openings
    assert "unpack.read_files(" in src and "strict=True" in src


def test_one_tree_walker() -> None:
    """Walking a tree a toolkit (or a fetched source, or a build) controls goes through
    wbcore_runtime.guard.paths.walk (openat + O_NOFOLLOW; links yielded as text, FIFOs and devices
    refused). pathlib's rglob / recursive glob yields links and a consumer that reads by path
    follows them out, so a new one outside the home fails here unless the tree is ours."""
    home = {
        "wbcore_runtime/guard/paths.py": "the containment walk",
        # the kernel module tree of the microvm image this host built itself (not a toolkit's)
        "plugins/wbcore-microvm/wbcore_microvm/image.py": "our own kernel build tree",
        # test support: the history_repo fixture opens up the repository it has just made
        "plugins/wbcore-testing/wbcore_testing/fixtures.py": "a test repository of its own",
    }
    walkers = _hits(r"\.rglob\(|\.glob\(\s*[\"']\*\*", home)
    assert not walkers, (
        "walk toolkit-controlled trees with wbcore_runtime.guard.paths.walk:\n" + "\n".join(walkers))


def test_one_service_chooser() -> None:
    """Which of several interchangeable services serves (build sandbox, guest runner, tool
    provider) is chosen in contract.host.chosen alone: by name, else the variable, else the
    only one. The LLM settings choose a provider from a model's ``provider:`` prefix first, a
    rule of their own."""
    home = {"wbcore_runtime/contract/host.py": "the chooser",
            "wbcore_runtime/contract/llm.py": "provider:model"}
    copies = _hits(r"len\(names\) == 1|several .* are installed", home)
    assert not copies, "call wbcore_runtime.contract.host.chosen instead:\n" + "\n".join(copies)


def test_one_url_redaction() -> None:
    """A URL shown in an audit line, an error or a repr loses its user-info, query and fragment
    in one place, dispatch.audit.redact_target (which also keeps a label and brackets an IPv6
    host); a copy that rebuilds a URL without its query is a second home."""
    home = {"wbcore_runtime/dispatch/audit.py": "the one redaction"}
    copies = _hits(r'urlunsplit\(\(.*"", ""\)\)', home)
    assert not copies, "call wbcore_runtime.dispatch.audit.redact_target instead:\n" + "\n".join(copies)
