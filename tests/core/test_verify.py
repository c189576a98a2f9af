from __future__ import annotations

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Check, ExecShape


def lines(report):
    return [c.render() for c in report.checks]


def test_discovery_only_toolkit_passes(make_toolkit, make_runtime):
    make_toolkit("docs")
    r = make_runtime().verify("docs")
    assert r.ok
    assert lines(r) == [
        "✓ manifest: manifest.org present (manifest)",
        "✓ skills: skills/overview.org present (1 skill(s))",
        "✓ exec: none declared (discovery-only toolkit)",
        "✓ caps: none declared (pure compute + stdio)",
        "✓ trust: first-party (runs under its profile's default caps)",
    ]




def test_missing_overview_and_unknown_caps(make_toolkit, make_runtime):
    make_toolkit("nocaps", caps="net warp", skills={"other": "x"})
    r = make_runtime().verify("nocaps")
    assert "✗ skills: skills/overview.org missing" in lines(r)
    assert any(line.startswith("✗ caps: unknown cap(s): warp") for line in lines(r))
    assert not r.ok


def test_third_party_requires_author_did_and_signature(make_toolkit, make_runtime):
    make_toolkit("tp", trust="third-party")
    r = make_runtime().verify("tp")
    trust = [c for c in r.checks if c.area == "trust"]
    assert not trust[0].ok and "AUTHOR_DID" in trust[0].message and "SIGNATURE" in trust[0].message






def test_role_pre_blocks_reported_disabled(make_toolkit, make_runtime, toolkit_root):
    from wbcore_testing.fixtures import manifest_text

    text = manifest_text("pre") + "#+begin_src sh :role pre\nrm -rf /\n#+end_src\n"
    make_toolkit("pre", manifest=text)
    r = make_runtime().verify("pre")
    assert r.ok
    assert "⚠ pre: 1 :role pre block(s) DISABLED, never run (native exec is banned)" in lines(r)


def test_legacy_manifest_verify_warns_with_modern_equivalent(make_toolkit, make_runtime):
    legacy = "* Legacy :toolkit:\n  :PROPERTIES:\n  :EXEC: sh\n  :END:\nRuns sh.\n"
    make_toolkit("legacy", manifest=legacy)
    r = make_runtime().verify("legacy")
    warn = [c for c in r.checks if c.warning]
    assert warn and "modern equivalent: #+TOOLKIT: legacy, #+EXEC: posix, #+CLI_BIN: sh" in warn[0].message


def test_broken_manifest_verify_names_the_error(make_toolkit, make_runtime):
    from wbcore_testing.fixtures import manifest_text

    make_toolkit("broken", manifest=manifest_text("broken").replace("#+STATUS: stable", "#+STATUS: meh"))
    r = make_runtime().verify("broken")
    assert not r.ok
    assert lines(r)[0].startswith("✗ manifest: ") and "manifest.org:4: STATUS:" in lines(r)[0]


class ExtraChecks:
    @hookimpl
    def wbcore_verify_checks(self, toolkit, runtime):
        return [Check(toolkit.id != "flagged", "license", f"{toolkit.id}: SPDX checked")]


def test_plugins_contribute_verify_lines(make_toolkit, make_runtime):
    make_toolkit("flagged")
    r = make_runtime(plugins=[ExtraChecks()]).verify("flagged")
    assert "✗ license: flagged: SPDX checked" in lines(r)
    assert not r.ok


class WasiHttpShape:
    @hookimpl
    def wbcore_exec_shapes(self):
        yield ExecShape(name="wasi-http", summary="proxy",
                        verify=lambda ctx: [Check(True, "exec", "wasi-http ok")])


def test_shape_from_in_process_plugin(make_toolkit, make_runtime):
    make_toolkit("web", exec="wasi-http")
    assert "✓ exec: wasi-http ok" in lines(make_runtime(plugins=[WasiHttpShape()]).verify("web"))


def test_a_shipped_artifact_outside_the_toolkit_is_unavailable(make_toolkit, make_runtime, tmp_path):
    """#+SHA256 is checked on the file inside the toolkit, through wbcore_runtime.guard.paths: a pinned
    file that is a link out (even to the right bytes) or a hard link makes it unavailable."""
    import hashlib
    import os

    from wbcore_runtime.trust import verdict as trust

    data = b"\0asm\1\0\0\0"
    outside = tmp_path / "tool.wasm"
    outside.write_bytes(data)
    pin = {"BUILD_SRC": "wasm:bin/tool.wasm", "SHA256": hashlib.sha256(data).hexdigest()}
    linked = make_toolkit("linked", extra=pin)
    (linked / "bin").mkdir()
    os.symlink(outside, linked / "bin" / "tool.wasm")
    hard = make_toolkit("hard", extra=pin)
    (hard / "bin").mkdir()
    os.link(outside, hard / "bin" / "tool.wasm")
    good = make_toolkit("good", extra=pin)
    (good / "bin").mkdir()
    (good / "bin" / "tool.wasm").write_bytes(data)
    rt = make_runtime()
    why = trust.unavailable_reason(rt.toolkit("linked"), rt)
    assert why == f"integrity: {linked / 'bin' / 'tool.wasm'}: symlink to a file outside the toolkit root"
    assert "has 2 hard links" in (trust.unavailable_reason(rt.toolkit("hard"), rt) or "")
    assert trust.unavailable_reason(rt.toolkit("good"), rt) is None
    report = rt.verify("linked")
    assert not report.ok and "✗ integrity: unavailable: " in report.render()
    assert "#+SHA256" in rt.verify("good").render() and "matches bin/tool.wasm" in rt.verify("good").render()
