"""The engine console in a real headless browser: Debian's chromium (/usr/bin/chromium)
driven by Playwright, against a real engine on loopback running the real agent loop with
the scripted test model. Logs in, grants a cap (confirming the change), starts a session
and watches its steps arrive over SSE, approves the review item the agent filed (the agent
reads the decision with its review_decisions tool), and finds the grant's audit line.
Screenshots of every page go to ``$WB_TEST_ARTIFACTS/console`` (else pytest's tmp folder).
Never downloads a browser: without /usr/bin/chromium it is skipped, saying so."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
SEED0 = base64.b64encode(bytes(32)).decode()
#: Where docs/engine.md's screenshots come from (copied when WB_CONSOLE_DOCS_IMG=1).
DOCS_IMG = Path(__file__).resolve().parents[3] / "docs" / "img"


@contextlib.contextmanager
def releasing(event: threading.Event) -> Iterator[None]:
    """Set ``event`` on the way out: a failed step never leaves the scripted model waiting."""
    try:
        yield
    finally:
        event.set()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    base = os.environ.get("WB_TEST_ARTIFACTS")
    out = (Path(base) if base else tmp_path / "artifacts") / "console"
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_console_in_a_real_browser(tmp_path, monkeypatch, make_runtime, serve_engine, wb_home, artifacts):
    for mod in ("wbcore_agent", "wbcore_llm_openai", "wbcore_wasmtime", "wbcore_brokers_state"):
        pytest.importorskip(mod,
                            reason=f"{mod} is not installed (the agent loop, a provider, the wasm engine)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (the test extra)")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (python3 dev.py setup installs it)")
    from wbcore_runtime.trust import identity, signing
    from wbcore_testing.scripted_llm import ScriptedLlm, reply, tool
    from wbcore_testing.fixtures import write_toolkit

    monkeypatch.setenv("WB_SIGNING_KEY", SEED0)
    root = tmp_path / "tks"
    d = write_toolkit(root, "tp", trust="third-party", caps="net kv",
                      files={"bin/tool.wasm": b"\0asm\x01\0\0\0"}, tagline="a signed third-party toolkit")
    signing.sign(d, identity.Identity.from_seed(bytes(32)))
    (wb_home / "agents").mkdir(parents=True, exist_ok=True)
    (wb_home / "agents" / "publisher.org").write_text(
        "* Publisher :agent:\n  :PROPERTIES:\n  :ID: publisher\n  :MODEL: openai:scripted-model\n  :END:\n"
        "** System prompt\nFile the summary for review, wait for the decision, then finish.\n")

    decided = threading.Event()

    def after_review(body: dict[str, Any]) -> Any:
        # the model's second turn comes once a person decided (bounded: the test fails past it)
        decided.wait(90)
        return reply(tool("review_decisions"), text="Checking the reviewer's decision.")

    shots: dict[str, Path] = {}
    with ScriptedLlm("openai") as llm:
        llm.script = [reply(tool("file_issue", title="Publish the weekly summary",
                                 body="3 toolkits changed."),
                            text="Filing the summary for review."),
                      after_review,
                      reply(tool("done", result="published after approval"), text="Approved: publishing.")]
        env = {"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": "sk-console-browser-key"}
        rt = make_runtime(plugins=["engine", "audit-trail", "http-server", "wasmtime", "agent", "act",
                                   "llm-openai", "brokers-state"], roots=[root], env=env)
        eng = serve_engine(rt)
        with releasing(decided), sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(30_000)

            def shot(name: str) -> None:
                shots[name] = artifacts / f"{name}.png"
                page.screenshot(path=str(shots[name]), full_page=True)

            # without the login: the page only says the token is needed
            page.goto(eng.url + "/console/toolkits")
            assert "token is needed" in page.content()
            shot("needed")
            page.click("#login-link")
            page.fill("input[name=token]", eng.token)
            shot("login")
            page.click("#login button[type=submit]")
            page.wait_for_url("**/console/toolkits")
            assert page.locator("#toolkits").inner_text().count("tp") >= 1
            shot("toolkits")

            # grant a cap: the confirmation shows exactly what changes, then it is granted
            page.click("text=tp")
            assert "✓" in page.inner_text("#checks")
            shot("toolkit")
            page.fill("#grant input[name=caps]", "net")
            page.click("#grant button")
            assert page.inner_text("#change").count("net") >= 1 and "+" in page.inner_text("#change")
            shot("grant-confirm")
            page.click("#confirm button")
            page.wait_for_selector("#flash")
            assert page.inner_text("#granted").startswith("net")
            assert "net" in page.inner_text("#effective")

            # start a session with the scripted model and watch its steps arrive live
            page.goto(eng.url + "/console/sessions")
            page.fill("#start input[name=agent]", "publisher")
            page.fill("#start textarea[name=task]", "publish the weekly summary")
            page.click("#start button")
            page.wait_for_url("**/console/sessions/*")
            session_url = page.url
            # the agent filed its item: live, over SSE
            page.wait_for_selector("#steps li.review", timeout=60_000)
            page.wait_for_selector("#steps li.step", timeout=60_000)
            assert "file_issue" in page.inner_text("#steps")
            shot("session-live")

            # approve the review item; the agent reads the decision and finishes
            page.goto(eng.url + "/console/review")
            assert "Publish the weekly summary" in page.inner_text("main")
            shot("review")
            page.fill(".decide input[name=note]", "looks right, ship it")
            page.click(".decide button[value=approved]")
            page.wait_for_selector(".decision")
            assert "approved: looks right, ship it" in page.inner_text(".decision")
            decided.set()

            page.goto(session_url)
            # the page's CSP allows no eval: wait with a selector, not a JS predicate
            page.locator("#status", has_text=re.compile(r"^done$")).wait_for(timeout=60_000)
            steps = page.inner_text("#steps")
            assert "review_decisions" in steps and "approved" in steps and "looks right, ship it" in steps
            assert "sk-console-browser-key" not in page.content()
            shot("session")

            # the audit line of the grant; the chain verifies
            page.goto(eng.url + "/console/audit?cap=consent")
            assert "tp:net" in page.inner_text("#audit")
            page.click("#verify button")
            page.wait_for_selector("#chain .good")
            page.goto(eng.url + "/console/audit")
            # a decision made now arrives live (the page follows the API's audit stream)
            rt.dock.audit.record(principal="dev/tp", cap="net", op="fetch", args_digest="", outcome="denied",
                                 reason="not-granted")
            rt.dock.audit.flush()
            page.wait_for_selector("#audit tr.live.denied", timeout=30_000)
            assert "not-granted" in page.inner_text("#audit tr.live")
            shot("audit")
            # a pipeline run's stages with their timings and results
            from wbcore_fabric_local.pipeline import Pipeline

            run = Pipeline.named("shout", "upper").fan_out(["upper", "upper"]).run(rt, b"hello", timeout=60)
            assert run.success, run.error
            page.goto(eng.url + "/console/pipelines")
            shot("pipelines")
            page.click(f"text={run.run_id}")
            assert page.inner_text("#stages").count("upper") == 3 and "HELLO" in page.inner_text("#output")
            assert page.locator("pre.carried").first.inner_text() == "HELLO"  # stage 0's result
            shot("pipeline")
            browser.close()
    assert llm.requests and len(llm.requests) == 3, "the agent did not reach its last turn"
    for name, path in shots.items():
        assert path.stat().st_size > 1000, name
    if os.environ.get("WB_CONSOLE_DOCS_IMG") == "1":  # refresh docs/engine.md's screenshots
        DOCS_IMG.mkdir(exist_ok=True)
        for name in ("toolkits", "toolkit", "grant-confirm", "session", "review", "audit", "pipeline"):
            shutil.copy(shots[name], DOCS_IMG / f"console-{name}.png")
    print(json.dumps({k: str(v) for k, v in shots.items()}))
