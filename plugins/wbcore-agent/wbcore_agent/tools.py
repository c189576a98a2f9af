"""The agent's tool surface (seed 004 "Tool surface"): what the model may call, and nothing else.

Base tools: ``shell`` (the in-WASM ``wbox`` shell over the command registry when the
built-in is served; else a pipeline of registered commands, each through
``Runtime.call`` — never an OS shell), ``wb`` (toolkits: list / show / search / skill,
and ``build`` of a toolkit written into the run's VFS), ``search``, ``fetch`` (the
``browse`` broker: NetGuard, capped body), ``web_search`` (only when a ``web_search``
broker is installed), ``vfs_read`` / ``vfs_write`` (the run's VFS through the ``vfs``
broker), ``file_issue`` (the review queue), ``done`` and ``review_decisions`` (what people
decided on the issues it filed). Exec-only tools (``publish``: a
constrained copy of a VFS file to the deployer's folder; ``git``: a fixed commit, and push
to the deployer's remote, of the workdir) exist only under the ``exec`` grant. Every granted
toolkit's tools are typed tools with the schemas MCP serves
(the runtime's tool provider, ``wbcore_runtime.contract.tools``), named ``<toolkit>__<tool>``; toolkits the
run built are ``local__<toolkit>__<tool>`` (:func:`tool_name`: one model-facing name per tool; a run
that would offer two tools under one name stops naming both, ``Run.tool_specs``).

A handler returns text for the model or raises ``WbError`` (a tool error the model sees).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, WbError, unknown_name
from wbcore_runtime.contract.llm import ToolSpec
from wbcore_runtime.dispatch.audit import redact_target

if TYPE_CHECKING:
    from wbcore_agent.loop import Run

MAX_TOOL_TEXT = 16 << 10  # what one tool result may put into the conversation
MAX_VFS_WRITE = 4 << 20
MAX_PIPELINE = 8
BASE_TOOLS = ("shell", "wb", "search", "fetch", "web_search", "vfs_read", "vfs_write", "file_issue", "done",
              "review_decisions")
EXEC_TOOLS = ("git", "publish")
GIT_TIMEOUT_S = 60.0
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")


_AMBIGUOUS = re.compile(r"__|_\.|\._|[^A-Za-z0-9_.-]")
MAX_TOOL_NAME = 64
_DIGEST = 12  # hex digits of the name's SHA-256 that end a name that cannot be shown as it is


def tool_name(name: str) -> str:
    """A tool's name as both vendors accept it (``^[A-Za-z0-9_-]{1,64}$``), one per name:
    ``.`` becomes ``__`` (``notes.add`` → ``notes__add``). A name that mapping would make
    ambiguous (``__``, a ``_`` beside a ``.``, a character outside ``[A-Za-z0-9_.-]``) or
    longer than 64 keeps a readable head and ends in ``___`` and 12 hex digits of its
    SHA-256: a run of three ``_`` no plain name maps to, so no two names meet."""
    shown = name.replace(".", "__")
    if not _AMBIGUOUS.search(name) and 0 < len(shown) <= MAX_TOOL_NAME:
        return shown
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST]
    head = _NAME_OK.sub("_", shown)[: MAX_TOOL_NAME - 3 - _DIGEST].rstrip("_")
    return f"{head}___{digest}"


def clip(text: str, cap: int = MAX_TOOL_TEXT) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f"\n… [{len(text) - cap} more characters cut]"


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


_S = {"type": "string"}
SPECS: dict[str, ToolSpec] = {
    "shell": ToolSpec(
        "shell",
        "Run a shell script in the sandbox: registered commands (toolkit commands, grep, jq, "
        "upper…) with pipes. No OS shell exists; only registered WebAssembly commands run.",
        _obj({"script": _S, "stdin": _S}, ("script",)),
    ),
    "wb": ToolSpec(
        "wb",
        "Toolkits: op=list | show (toolkit) | search (query) | skill (toolkit, skill: read a skill "
        "on demand) | build (path: a toolkit folder you wrote into the VFS; registered for this session).",
        _obj(
            {
                "op": {"type": "string", "enum": ["list", "show", "search", "skill", "build"]}, "toolkit": _S,
                "skill": _S, "query": _S, "path": _S,
            },
            ("op",),
        ),
    ),
    "search": ToolSpec(
        "search", "Search toolkit manifests and skills, and the paths of files in your VFS.",
        _obj({"query": _S}, ("query",)),
    ),
    "fetch": ToolSpec(
        "fetch", "Fetch a public http(s) URL as text (private and loopback addresses are refused).",
        _obj({"url": _S}, ("url",)),
    ),
    "web_search": ToolSpec("web_search", "Search the web.", _obj({"query": _S}, ("query",))),
    "vfs_read": ToolSpec(
        "vfs_read", "Read a file from your VFS (workspace volume).", _obj({"path": _S}, ("path",))
    ),
    "vfs_write": ToolSpec(
        "vfs_write", "Write a text file into your VFS (workspace volume).",
        _obj({"path": _S, "content": _S}, ("path", "content")),
    ),
    "file_issue": ToolSpec(
        "file_issue", "File an issue for a human to review (the session's review queue).",
        _obj({"title": _S, "body": _S}, ("title",)),
    ),
    "done": ToolSpec("done", "Finish the task with its result.", _obj({"result": _S}, ("result",))),
    "review_decisions": ToolSpec(
        "review_decisions",
        "The decisions people made on the issues you filed "
        "(approved or rejected, with their note); undecided ones are pending.",
        _obj({}, ()),
    ),
    "git": ToolSpec(
        "git",
        "Commit the run's workdir with a message (and push it when the deployer configured a "
        "remote). Exec grant only: a fixed host command, never a command line you choose.",
        _obj({"message": _S}, ("message",)),
    ),
    "publish": ToolSpec(
        "publish", "Copy a VFS file to the deployer's publish folder (exec grant only).",
        _obj({"path": _S}, ("path",)),
    ),
}


@dataclass(frozen=True, slots=True)
class HostTool:
    """An embedder's own tool (a host function): its spec and handler ``(run, args) -> text``."""

    spec: ToolSpec
    handler: Callable[[Run, Mapping[str, Any]], str]


def base_names(run: Run) -> list[str]:
    """The base tools this run offers, in order (a test asserts there is no OS shell)."""
    names = [n for n in BASE_TOOLS if n != "web_search" or "web_search" in run.runtime.brokers]
    if run.exec_grant:
        names += list(EXEC_TOOLS)
    return names


# --- handlers ------------------------------------------------------------------------


def _str(args: Mapping[str, Any], key: str, tool: str, default: str | None = None) -> str:
    v = args.get(key, default)
    if not isinstance(v, str):
        raise InvalidArgs(f"{tool}: argument {key!r} must be a string")
    return v


def shell(run: Run, args: Mapping[str, Any]) -> str:
    script = _str(args, "script", "shell")
    stdin = _str(args, "stdin", "shell", "").encode()
    rt = run.runtime
    if "wbox" in rt.builtins:
        res = rt.call("wbox", ["-c", script], stdin, principal=run.principal, timeout=run.call_timeout(),
                      cancel=run.tool_cancel)
        return _result_text(res)
    # No in-WASM shell served: a plain pipeline, each stage a registered command.
    stages = _pipeline(script)
    data = stdin
    res = None
    for argv in stages:
        res = run.call_command(argv[0], argv[1:], data)
        if res.exit_code != 0:
            return _result_text(res)
        data = res.stdout
    return _result_text(res)


def _pipeline(script: str) -> list[list[str]]:
    lex = shlex.shlex(script, posix=True, punctuation_chars="|;&<>()")
    lex.whitespace_split = True
    stages: list[list[str]] = [[]]
    for tok in lex:
        if tok == "|":
            stages.append([])
        elif set(tok) <= set("|;&<>()"):
            raise InvalidArgs(f"shell: {tok!r} needs the wbox shell, which is not installed here; "
                              "use a pipeline of commands joined by |")
        else:
            stages[-1].append(tok)
    if any(not s for s in stages) or len(stages) > MAX_PIPELINE:
        raise InvalidArgs(f"shell: expected 1..{MAX_PIPELINE} commands joined by |")
    return stages


def _result_text(res: Any) -> str:
    out = res.stdout.decode("utf-8", "replace")
    err = res.stderr.decode("utf-8", "replace")
    text = out + (f"\n[stderr]\n{err}" if err.strip() else "")
    if res.exit_code != 0:
        raise WbError(f"exit code {res.exit_code}\n{clip(text, 4000)}")
    return text


def unavailable(run: Run, tk: Any) -> str | None:
    """Why ``tk`` may not be used (``wbcore_runtime.trust.verdict``: tampered, unsigned, pin mismatch), or
    ``None``: such a toolkit's text never reaches the model, as in the injected index. A look (a
    listing, ``show``, a search hit) is offline; a skill's text goes through ``verdict.skill_text``."""
    from wbcore_runtime.trust import verdict as trust

    return trust.unavailable_reason(tk, run.runtime)


def available_toolkit(run: Run, ident: str) -> Any:
    tk = run.runtime.toolkit(ident)
    why = unavailable(run, tk)
    if why:
        raise CapabilityDenied(f"toolkit {ident} is unavailable: {why}")
    return tk


def _verified(run: Run, hits: list[Any]) -> list[Any]:
    found = run.runtime.discover()
    ok: dict[str, bool] = {}
    for h in hits:
        if h.toolkit not in ok:
            ok[h.toolkit] = h.toolkit in found.toolkits and not unavailable(run, found.toolkits[h.toolkit])
    return [h for h in hits if ok[h.toolkit]]


def wb(run: Run, args: Mapping[str, Any]) -> str:
    op = _str(args, "op", "wb")
    rt = run.runtime
    if op == "list":
        rows: list[dict[str, Any]] = []
        for tk in rt.discover().toolkits.values():
            why = unavailable(run, tk)
            if why:  # a toolkit that does not verify: its id and why, none of its text
                rows.append({"id": tk.id, "unavailable": why})
            else:
                rows.append({"id": tk.id, "tagline": tk.manifest.tagline, "granted": tk.id in run.toolkits})
        rows += [
            {"id": t.id, "tagline": t.tagline, "session_local": True, "granted": True}
            for t in run.made.list()
        ]
        return json.dumps(rows, indent=1)
    if op == "show":
        ident = _str(args, "toolkit", "wb")
        local = run.made.get(ident)
        if local is not None:
            return json.dumps(local.as_dict(), indent=1)
        tk = available_toolkit(run, ident)
        return json.dumps({"id": tk.id, "title": tk.manifest.title, "tagline": tk.manifest.tagline,
                           "exec": tk.manifest.exec, "caps": sorted(tk.manifest.caps),
                           "skills": [{"slug": s.slug, "summary": s.summary} for s in tk.skills]}, indent=1)
    if op == "skill":
        ident, slug = _str(args, "toolkit", "wb"), _str(args, "skill", "wb", "overview")
        from wbcore_runtime.trust import verdict as trust

        # One verdict, then the bytes read to the model hashed against it (never check, then read).
        return trust.skill_text(rt.toolkit(ident), rt, slug)
    if op == "search":
        from wbcore_runtime.toolkit import search as _search

        hits = _search.search(rt.discover(), _str(args, "query", "wb"))
        return json.dumps([h.as_dict() for h in _verified(run, hits)[:30]], indent=1)
    if op == "build":
        made = run.made.build(run, _str(args, "path", "wb"))
        return json.dumps({"built": made.id, "tools": [tool_name(f"local.{n}") for n in made.tool_names()],
                           "session_local": True}, indent=1)
    raise InvalidArgs(unknown_name("wb op", op, ["build", "list", "search", "show", "skill"]))


def search(run: Run, args: Mapping[str, Any]) -> str:
    from wbcore_runtime.toolkit import search as _search

    query = _str(args, "query", "search")
    hits = [h.as_dict() for h in _verified(run, _search.search(run.runtime.discover(), query))[:20]]
    files = [e["path"] for e in run.vfs_list() if query.lower() in e["path"].lower()][:20]
    return json.dumps({"toolkits": hits, "vfs": files}, indent=1)


def fetch(run: Run, args: Mapping[str, Any]) -> str:
    url = _str(args, "url", "fetch")
    got = run.dock("browse", "fetch", {"url": url})
    return f"HTTP {got.get('status')} {got.get('url', url)}\n\n{clip(str(got.get('text', '')))}"


def web_search(run: Run, args: Mapping[str, Any]) -> str:
    got = run.dock("web_search", "search", {"query": _str(args, "query", "web_search")})
    return json.dumps(got, indent=1, default=str)


def vfs_read(run: Run, args: Mapping[str, Any]) -> str:
    data = run.vfs_read(_str(args, "path", "vfs_read"))
    return data.decode("utf-8", "replace")


def vfs_write(run: Run, args: Mapping[str, Any]) -> str:
    path, content = _str(args, "path", "vfs_write"), _str(args, "content", "vfs_write")
    data = content.encode()
    if len(data) > MAX_VFS_WRITE:
        raise InvalidArgs(f"vfs_write: {len(data)} bytes is over the {MAX_VFS_WRITE}-byte cap")
    run.vfs_write(path, data)
    return f"wrote {len(data)} bytes to {path}"


def file_issue(run: Run, args: Mapping[str, Any]) -> str:
    item = {"title": _str(args, "title", "file_issue"), "body": _str(args, "body", "file_issue", "")}
    run.review.put(item)
    return "filed for review"


def review_decisions(run: Run, args: Mapping[str, Any]) -> str:
    decided = run.review.decisions()
    rows = [{"position": i, "title": item.get("title", ""), **({"decision": decided[i]["decision"],
             "note": decided[i]["note"]} if i in decided else {"decision": "pending"})}
            for i, item in enumerate(run.review.items())]
    return json.dumps(rows, ensure_ascii=False)


def done(run: Run, args: Mapping[str, Any]) -> str:
    return _str(args, "result", "done")


def publish(run: Run, args: Mapping[str, Any]) -> str:
    import os
    from pathlib import Path, PurePosixPath

    target_root = run.runtime.env.get("WB_AGENT_PUBLISH_DIR")
    if not target_root:
        raise NotFound("publish: the deployer has not set WB_AGENT_PUBLISH_DIR")
    rel = _str(args, "path", "publish")
    data = run.vfs_read(rel)
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        raise InvalidArgs(f"publish: {rel!r} must be a relative path without '..'")
    from wbcore_runtime.guard import paths

    root = Path(target_root)
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    # Each folder on the way is checked by the core's one containment function before it is
    # used or made: a symlink (existing, or planted between two steps) cannot lead out.
    folder = root
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        try:
            folder = paths.inside(root, prefix, expect="dir", label="the publish folder")
        except paths.Refused as exc:
            raise InvalidArgs(f"publish: {rel!r} leaves the publish folder ({exc.reason})") from None
        except NotFound:
            os.mkdir(folder / parts[i - 1], 0o755)
            folder = paths.inside(root, prefix, expect="dir", label="the publish folder")
    dest = folder / parts[-1]
    # The core's atomic write: a fresh temporary name, created exclusively and never through a
    # link; the rename replaces whatever ``dest`` was (a link included) with the file itself.
    from wbcore_runtime.store.artifacts import atomic_write

    atomic_write(dest, data)
    return f"published {rel} ({len(data)} bytes)"


def git(run: Run, args: Mapping[str, Any]) -> str:
    """``git add -A && git commit -m <message>`` in the workdir, then ``git push <remote>
    HEAD`` when ``WB_AGENT_GIT_REMOTE`` is set: a fixed argv run by the host (no shell, no
    agent-chosen arguments beyond the message), with a clean environment and a deadline."""
    import subprocess

    message = _str(args, "message", "git").strip()
    if not message or len(message) > 2000 or "\0" in message:
        raise InvalidArgs("git: 'message' must be 1..2000 characters")
    env = {
        "PATH": run.runtime.env.get("PATH", "/usr/bin:/bin"), "HOME": str(run.workdir),
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": f"agent {run.agent.id}",
        "GIT_AUTHOR_EMAIL": "agent@wbcore.invalid", "GIT_COMMITTER_NAME": f"agent {run.agent.id}",
        "GIT_COMMITTER_EMAIL": "agent@wbcore.invalid",
    }
    wait = min(run.call_timeout(), GIT_TIMEOUT_S)

    def git_run(*argv: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(run.workdir), *argv], env=env, capture_output=True, text=True, timeout=wait,
                check=False,
            )
        except FileNotFoundError:
            raise NotFound("git: the git program is not installed on the host") from None
        except subprocess.TimeoutExpired:
            raise WbError(f"git {argv[0]}: did not finish within {wait:g} s") from None
        if done.returncode != 0:
            raise WbError(f"git {argv[0]} failed: {clip(done.stderr.strip(), 2000)}")
        return done.stdout

    if not (run.workdir / ".git").is_dir():
        git_run("init", "-q")
    git_run("add", "-A")
    git_run("commit", "-q", "--allow-empty", "-m", message)
    head = git_run("rev-parse", "HEAD").strip()
    remote = run.runtime.env.get("WB_AGENT_GIT_REMOTE")
    if remote:
        git_run("push", "-q", remote, "HEAD")
    # the remote as the audit shows a URL: a token in its user-info never reaches the model
    return f"committed {head[:12]}" + (f" and pushed to {redact_target(remote)}" if remote else "")


HANDLERS: dict[str, Callable[[Run, Mapping[str, Any]], str]] = {
    "shell": shell, "wb": wb, "search": search, "fetch": fetch, "web_search": web_search,
    "vfs_read": vfs_read, "vfs_write": vfs_write, "file_issue": file_issue, "done": done,
    "review_decisions": review_decisions, "git": git, "publish": publish,
}
