"""Markdown ↔ Org for skills: the subset skill documents use (headings, code, lists, links, quotes).

Not a general converter: it keeps text the agent reads intact and never loses a line.
Code blocks are copied verbatim (Org-escaped where a line would read as a headline).
"""

from __future__ import annotations

import re

_FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([A-Za-z0-9_+.#-]*)[^\n]*$")
_MD_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ORG_HEADING_RE = re.compile(r"^(\*+)\s+(.*?)\s*$")
_INLINE_CODE_RE = re.compile(r"`([^`\n]+)`")
_MD_LINK_RE = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_MD_BOLD_RE = re.compile(r"\*\*([^*\n]+)\*\*|__([^_\n]+)__")
_TABLE_SEP_RE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_ORG_SRC_BEGIN_RE = re.compile(r"^\s*#\+begin_(src|example)\b\s*([^\s]*)", re.IGNORECASE)
_ORG_BLOCK_END_RE = re.compile(r"^\s*#\+end_(src|example)\b", re.IGNORECASE)
_ORG_LINK_RE = re.compile(r"\[\[([^\]\n]+)\](?:\[([^\]\n]+)\])?\]")
# ~code~ and =verbatim=: the closing mark must be the opening one (=x~ is not code).
_ORG_CODE_RE = re.compile(r"(?<![\w~=])(?:~([^\s~](?:[^~\n]*[^\s~])?)~"
                          r"|=([^\s=](?:[^=\n]*[^\s=])?)=)(?![\w~=])")
_ORG_BOLD_RE = re.compile(r"(?<![\w*])\*([^\s*](?:[^*\n]*[^\s*])?)\*(?![\w*])")


def _escape_block_line(line: str) -> str:
    """Org reads ``*`` and ``#+`` at a line start as structure, even inside blocks: escape with ``,``."""
    stripped = line.lstrip()
    if stripped.startswith(("*", "#+", ",*", ",#+")):
        indent = line[: len(line) - len(stripped)]
        return f"{indent},{stripped}"
    return line


def _unescape_block_line(line: str) -> str:
    stripped = line.lstrip()
    if stripped.startswith((",*", ",#+")):
        indent = line[: len(line) - len(stripped)]
        return indent + stripped[1:]
    return line


def _md_inline(text: str) -> str:
    codes: list[str] = []

    def keep(m: re.Match[str]) -> str:
        codes.append(m.group(1) if m.group(1) is not None else m.group(2))
        return f"\x00{len(codes) - 1}\x00"

    text = _INLINE_CODE_RE.sub(keep, text)
    text = _MD_LINK_RE.sub(lambda m: f"[[{m.group(3)}]]" if m.group(1) else f"[[{m.group(3)}][{m.group(2)}]]",
                           text)
    text = _MD_BOLD_RE.sub(lambda m: f"*{m.group(1) or m.group(2)}*", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: f"~{codes[int(m.group(1))]}~", text)


def md_to_org(text: str, *, shift: int = 0) -> str:
    """Markdown → Org. ``shift`` moves every heading up (negative) or down a level (min 1)."""
    out: list[str] = []
    fence: str | None = None
    end = "#+end_example"
    quote = False
    for line in text.splitlines():
        if fence is not None:
            if line.strip().startswith(fence):
                out.append(end)
                fence = None
            else:
                out.append(_escape_block_line(line))
            continue
        m = _FENCE_RE.match(line)
        if m:
            if quote:
                out.append("#+end_quote")
                quote = False
            fence = m.group(2)[0] * 3
            lang = m.group(3)
            end = "#+end_src" if lang else "#+end_example"
            out.append(f"#+begin_src {lang}" if lang else "#+begin_example")
            continue
        if line.startswith(">"):
            if not quote:
                out.append("#+begin_quote")
                quote = True
            out.append(_md_inline(line[1:].lstrip()))
            continue
        if quote:
            out.append("#+end_quote")
            quote = False
        h = _MD_HEADING_RE.match(line)
        if h:
            level = max(1, len(h.group(1)) + shift)
            out.append("*" * level + " " + _md_inline(h.group(2)))
            continue
        if _TABLE_SEP_RE.match(line) and "|" in line:
            cells = line.strip().strip("|").split("|")
            out.append("|" + "+".join("-" * max(3, len(c.strip())) for c in cells) + "|")
            continue
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith(("* ", "+ ")):
            stripped = "- " + stripped[2:]
        elif stripped.startswith("#+"):
            stripped = "," + stripped
        out.append(indent + _md_inline(stripped))
    if fence is not None:
        out.append(end)
    if quote:
        out.append("#+end_quote")
    return "\n".join(out).strip("\n") + "\n"


def _org_inline(text: str) -> str:
    codes: list[str] = []

    def keep(m: re.Match[str]) -> str:
        codes.append(m.group(1) if m.group(1) is not None else m.group(2))
        return f"\x00{len(codes) - 1}\x00"

    text = _ORG_CODE_RE.sub(keep, text)
    text = _ORG_LINK_RE.sub(lambda m: f"[{m.group(2)}]({m.group(1)})" if m.group(2) else f"<{m.group(1)}>",
                            text)
    text = _ORG_BOLD_RE.sub(lambda m: f"**{m.group(1)}**", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: f"`{codes[int(m.group(1))]}`", text)


def org_to_md(text: str, *, shift: int = 0) -> str:
    """Org → Markdown. Keywords and property drawers are dropped (titles are handled by callers)."""
    out: list[str] = []
    in_block = False
    in_drawer = False
    in_quote = False
    for line in text.splitlines():
        if in_block:
            if _ORG_BLOCK_END_RE.match(line):
                out.append("```")
                in_block = False
            else:
                out.append(_unescape_block_line(line))
            continue
        b = _ORG_SRC_BEGIN_RE.match(line)
        if b:
            lang = b.group(2) if b.group(1).lower() == "src" else ""
            out.append(f"```{lang}")
            in_block = True
            continue
        s = line.strip()
        if s.upper() == ":PROPERTIES:":
            in_drawer = True
            continue
        if in_drawer:
            if s.upper() == ":END:":
                in_drawer = False
            continue
        low = s.lower()
        if low.startswith("#+begin_quote"):
            in_quote = True
            continue
        if low.startswith("#+end_quote"):
            in_quote = False
            continue
        if in_quote:
            out.append("> " + _org_inline(line.strip()))
            continue
        if re.fullmatch(r"\|[-+]+\|", s):
            out.append(s.replace("+", "|"))
            continue
        if s.startswith("#+"):
            continue
        h = _ORG_HEADING_RE.match(line)
        if h:
            title = re.sub(r"\s+:[\w@#%:]+:\s*$", "", h.group(2))
            out.append("#" * min(6, max(1, len(h.group(1)) + shift)) + " " + _org_inline(title))
            continue
        d = re.match(r"^(\s*)[-+] (.+?) :: (.*)$", line)
        if d:
            out.append(f"{d.group(1)}- **{_org_inline(d.group(2))}**: {_org_inline(d.group(3))}")
            continue
        out.append(_org_inline(line))
    if in_block:
        out.append("```")
    return "\n".join(out).strip("\n") + "\n"
