"""Parse ``manifest.org`` (seed 000) and the older drawer-only form (seed 001).

Both become one :class:`Manifest`. Org structure (headlines, tags, drawers) comes from
orgparse; file keywords (``#+KEY: value``) are read line by line so every field keeps
the line it came from. Every problem is a :class:`~wbcore_runtime.contract.errors.ManifestError`
naming file, line and field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import ManifestError, NotFound

MAX_MANIFEST_BYTES = 1 << 20
MISSING = "does not exist"

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
KEYWORD_RE = re.compile(r"^[ \t]*#\+([A-Za-z][A-Za-z0-9_-]*):[ \t]*(.*?)[ \t]*$")
PROPERTY_RE = re.compile(r"^[ \t]*:([A-Za-z0-9_+-]+):[ \t]*(.*?)[ \t]*$")
SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
#: Every character Python's ``str.splitlines`` (and so orgparse) ends a line at, LF aside.
#: A manifest or skill may end its lines with LF or CRLF only: anything else would let the
#: parser see a line the signature's canonical form does not (docs/signing.md).
_FOREIGN_BREAK_RE = re.compile("\r(?!\n)|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_BREAK_NAMES = {
    "\r": "a carriage return (CR, U+000D) not followed by LF", "\x0b": "a vertical tab (U+000B)",
    "\x0c": "a form feed (U+000C)", "\x1c": "a file separator (U+001C)", "\x1d": "a group separator (U+001D)",
    "\x1e": "a record separator (U+001E)", "\x85": "a next-line character (NEL, U+0085)",
    "\u2028": "a line separator (U+2028)", "\u2029": "a paragraph separator (U+2029)",
}

STATUSES = ("stable", "experimental", "deprecated")
TRUSTS = ("first-party", "third-party")
ARG_MODES = ("argv", "stdin1")
REQUIRED = ("TITLE", "TOOLKIT", "VERSION", "STATUS", "TAGLINE")
#: Keywords mirrored into the :toolkit: drawer; the drawer value must equal the keyword.
MIRRORED = {"ID": "TOOLKIT", "CLI_BIN": "CLI_BIN", "STATUS": "STATUS"}
#: Keywords that may be given more than once: their values are kept in order, one a line.
REPEATABLE = frozenset({"PREOPEN"})
#: Seed 001's capability words, mapped to today's cap names where one exists.
LEGACY_CAPS = {"network": "net", "read": "vfs", "write": "vfs"}
LEGACY_ARG_MODES = {"positional": "argv", "flags": "argv"}


@dataclass(frozen=True, slots=True)
class Manifest:
    """One toolkit's front door. ``keywords`` keeps every ``#+KEY`` (extras included)."""

    path: Path
    id: str
    title: str
    version: str
    status: str
    tagline: str
    exec: str | None = None
    trust: str = "first-party"
    caps: tuple[str, ...] = ()
    build_lang: str | None = None
    build_src: str | None = None
    cli_bin: str | None = None
    cli_version_range: str | None = None
    requires: str | None = None
    arg_mode: str = "argv"
    sha256: str | None = None
    wasm_path: str | None = None
    preopen: str | None = None
    author_did: str | None = None
    signature: str | None = None
    format: str = "manifest"  # or "legacy-drawer" (seed 001)
    keywords: Mapping[str, str] = field(default_factory=dict)
    drawer: Mapping[str, str] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)
    node_line: int = 0
    node_title: str = ""
    sections: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def dir(self) -> Path:
        return self.path.parent

    def extra(self, key: str, default: str | None = None) -> str | None:
        """A keyword outside the core list (``#+KERNEL_ENTRY``, ``#+URL`` ...)."""
        return self.keywords.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "title": self.title, "version": self.version,
            "status": self.status, "tagline": self.tagline, "exec": self.exec,
            "trust": self.trust, "caps": list(self.caps), "build_lang": self.build_lang,
            "build_src": self.build_src, "cli_bin": self.cli_bin, "arg_mode": self.arg_mode,
            "sha256": self.sha256, "author_did": self.author_did,
            "signature": self.signature, "format": self.format,
            "path": str(self.path), "keywords": dict(self.keywords),
        }


def read_text(path: Path, folder: paths.Root | None = None) -> str:
    """The manifest at ``path``, read through containment (:mod:`wbcore_runtime.guard.paths`) in ``folder``
    (default: the folder ``path`` names); every failure is a :class:`ManifestError`."""
    if folder is None:
        folder = paths.Root.at(path.parent)
    try:
        raw = folder.read(path.name, MAX_MANIFEST_BYTES)
    except paths.Refused as exc:
        raise ManifestError(path, 0, "file", exc.reason) from None
    except NotFound:
        raise ManifestError(path, 0, "file", MISSING) from None
    except OSError as exc:
        raise ManifestError(path, 0, "file", f"cannot read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ManifestError(path, line, "file", "not valid UTF-8") from None


def lines(text: str, path: Path | str = "manifest.org", *, what: str = "file") -> list[str]:
    """The lines of a manifest or skill, each with its line end (LF or CRLF) kept.

    The one definition of "a line" that the keyword scanner, orgparse and the signature's
    canonical form all rely on. Text that another splitter would cut differently is refused:
    any line break but LF and CRLF, and a file that mixes LF and CRLF endings (so that a
    line end cannot be changed without changing the signed bytes).
    """
    bad = _FOREIGN_BREAK_RE.search(text)
    if bad is not None:
        no = text.count("\n", 0, bad.start()) + 1
        raise ManifestError(
            path, no, what,
            f"{_BREAK_NAMES[bad.group()]} at column {bad.start() - text.rfind(chr(10), 0, bad.start())}; "
            "lines must end in LF (or CRLF): remove the character or replace it with a newline",
        )
    out = text.splitlines(keepends=True)
    crlf = sum(1 for ln in out if ln.endswith("\r\n"))
    if crlf and crlf != sum(1 for ln in out if ln.endswith("\n")):
        first = next(i for i, ln in enumerate(out, 1) if ln.endswith("\n") and not ln.endswith("\r\n"))
        raise ManifestError(
            path, first, what,
            "mixes LF and CRLF line endings; convert the file to one of them (e.g. dos2unix)",
        )
    return out


def normalized(text: str, path: Path | str = "manifest.org", *, what: str = "file") -> str:
    """The text with its line ends checked (:func:`lines`) and CRLF turned into LF."""
    return "".join(ln[:-2] + "\n" if ln.endswith("\r\n") else ln for ln in lines(text, path, what=what))


def load(path: Path, folder: paths.Root | None = None) -> Manifest:
    """Read and parse ``path`` (see :func:`read_text`); every failure is a :class:`ManifestError`."""
    return parse(read_text(path, folder), path)


@dataclass(slots=True)
class _Node:
    title: str
    line: int
    level: int
    tags: frozenset[str]
    props: dict[str, str]
    prop_lines: dict[str, int]
    body: str
    children: list[tuple[str, str]]


def _keywords(text: str, path: Path) -> tuple[dict[str, str], dict[str, int]]:
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    in_block = False
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip().lower()
        if stripped.startswith("#+begin_"):
            in_block = True
            continue
        if stripped.startswith("#+end_"):
            in_block = False
            continue
        if in_block:
            continue
        m = KEYWORD_RE.match(line)
        if not m:
            continue
        key = m.group(1).upper()
        if key in values and key in REPEATABLE:
            values[key] += "\n" + m.group(2)
            continue
        if key in values:
            raise ManifestError(path, no, key, f"given twice (first on line {lines[key]})")
        values[key] = m.group(2)
        lines[key] = no
    return values, lines


def _toolkit_node(text: str, path: Path) -> _Node | None:
    import orgparse

    try:
        root = orgparse.loads(text, filename=str(path))
        nodes = list(root[1:])
    except Exception as exc:  # orgparse raising on odd input is a malformed manifest
        raise ManifestError(path, 1, "org", f"cannot parse as Org: {type(exc).__name__}: {exc}") from None
    for i, node in enumerate(nodes):
        if "toolkit" not in node.shallow_tags:
            continue
        props = {str(k).upper(): str(v).strip() for k, v in node.properties.items()}
        prop_lines = _property_lines(text, node.linenumber)
        children: list[tuple[str, str]] = []
        for child in nodes[i + 1 :]:
            if child.level <= node.level:
                break
            if child.level == node.level + 1:
                children.append((child.heading, subtree_text(child)))
        return _Node(
            title=node.heading,
            line=node.linenumber,
            level=node.level,
            tags=frozenset(node.shallow_tags),
            props=props,
            prop_lines=prop_lines,
            body=node.body,
            children=children,
        )
    return None


def subtree_text(node: Any) -> str:
    """An Org node's body with every heading and body below it, as written (a skill section, an
    agent's system prompt)."""
    parts = [node.body]
    for child in node.children:
        parts.append("*" * child.level + " " + child.heading)
        parts.append(subtree_text(child))
    return "\n".join(p for p in parts if p)


def _property_lines(text: str, headline_line: int) -> dict[str, int]:
    lines = text.splitlines()
    found: dict[str, int] = {}
    inside = False
    for no in range(headline_line, min(len(lines), headline_line + 200)):
        raw = lines[no].strip()
        if raw.upper() == ":PROPERTIES:":
            inside = True
            continue
        if raw.upper() == ":END:":
            break
        if inside:
            m = PROPERTY_RE.match(raw)
            if m:
                found.setdefault(m.group(1).upper(), no + 1)
        elif raw and not raw.startswith("#"):
            break
    return found


def parse(text: str, path: Path | str = "manifest.org") -> Manifest:
    """Parse manifest text. ``path`` is used for messages and ``Manifest.dir``."""
    path = Path(path)
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(path, 0, "file", f"over the {MAX_MANIFEST_BYTES}-byte cap")
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise ManifestError(path, line, "file", "contains a NUL byte")
    if text.startswith("\ufeff"):  # else line 1 reads "\ufeff#+TITLE" and is silently no keyword
        raise ManifestError(path, 1, "file",
                            "starts with a byte-order mark (U+FEFF); save it as UTF-8 without a BOM")
    text = normalized(text, path)
    keywords, lines = _keywords(text, path)
    node = _toolkit_node(text, path)
    if node is None:
        raise ManifestError(path, 1, "headline", "no headline tagged :toolkit:")
    if "TOOLKIT" in keywords:
        return _modern(path, keywords, lines, node)
    if "EXEC" in node.props or not keywords.keys() & set(REQUIRED):
        return _legacy(path, keywords, lines, node)
    raise ManifestError(path, 1, "TOOLKIT", "missing (#+TOOLKIT: <slug> is required)")


def _check_name(path: Path, line: int, field_name: str, value: str) -> str:
    if not value or not NAME_RE.match(value):
        raise ManifestError(path, line, field_name, f"{value!r} must match {NAME_RE.pattern}")
    return value


def _choice(path: Path, line: int, field_name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ManifestError(path, line, field_name, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def _caps(path: Path, line: int, value: str) -> tuple[str, ...]:
    caps: list[str] = []
    for word in value.split():
        _check_name(path, line, "CAPS", word)
        if word not in caps:
            caps.append(word)
    return tuple(caps)


def _modern(path: Path, kw: dict[str, str], lines: dict[str, int], node: _Node) -> Manifest:
    for key in REQUIRED:
        if not kw.get(key):
            where = lines.get(key, 1)
            raise ManifestError(path, where, key, "missing (required for every toolkit)")
    line = lines.get
    ident = _check_name(path, line("TOOLKIT", 1), "TOOLKIT", kw["TOOLKIT"])
    if not SEMVER_RE.match(kw["VERSION"]):
        raise ManifestError(path, line("VERSION", 1), "VERSION",
                            f"{kw['VERSION']!r} is not semver (MAJOR.MINOR.PATCH)")
    status = _choice(path, line("STATUS", 1), "STATUS", kw["STATUS"], STATUSES)
    trust = _choice(path, line("TRUST", 1), "TRUST", kw.get("TRUST", "first-party"), TRUSTS)
    arg_mode = _choice(path, line("ARG_MODE", 1), "ARG_MODE", kw.get("ARG_MODE", "argv"), ARG_MODES)
    cli_bin = kw.get("CLI_BIN") or node.props.get("CLI_BIN") or None
    if cli_bin is not None:
        where = line("CLI_BIN") or node.prop_lines.get("CLI_BIN", node.line)
        _check_name(path, where, "CLI_BIN", cli_bin)
    for prop, key in MIRRORED.items():
        if prop in node.props and key in kw and node.props[prop] != kw[key]:
            raise ManifestError(
                path, node.prop_lines.get(prop, node.line), f"drawer {prop}",
                f"drawer says {node.props[prop]!r} but #+{key} says {kw[key]!r}; they must match",
            )
    sha = kw.get("SHA256")
    if sha is not None and not SHA256_RE.match(sha.lower()):
        raise ManifestError(path, line("SHA256", 1), "SHA256", "must be 64 hex digits")
    exec_ = kw.get("EXEC") or None
    if exec_ is not None:
        _check_name(path, line("EXEC", 1), "EXEC", exec_)
    return Manifest(
        path=path,
        id=ident,
        title=kw["TITLE"],
        version=kw["VERSION"],
        status=status,
        tagline=kw["TAGLINE"],
        exec=exec_,
        trust=trust,
        caps=_caps(path, line("CAPS", 1), kw.get("CAPS", "")),
        build_lang=kw.get("BUILD_LANG") or None,
        build_src=kw.get("BUILD_SRC") or None,
        cli_bin=cli_bin,
        cli_version_range=kw.get("CLI_VERSION_RANGE") or None,
        requires=kw.get("REQUIRES") or None,
        arg_mode=arg_mode,
        sha256=sha.lower() if sha else None,
        wasm_path=kw.get("WASM_PATH") or None,
        preopen=kw.get("PREOPEN") or None,
        author_did=kw.get("AUTHOR_DID") or None,
        signature=kw.get("SIGNATURE") or None,
        format="manifest",
        keywords=MappingProxyType(dict(kw)),
        drawer=MappingProxyType(dict(node.props)),
        lines=MappingProxyType(dict(lines)),
        node_line=node.line,
        node_title=node.title,
        sections=tuple(node.children),
    )


def _legacy(path: Path, kw: dict[str, str], lines: dict[str, int], node: _Node) -> Manifest:
    """Seed 001: everything in the :toolkit: drawer, EXEC is a binary name."""
    props, pl = node.props, node.prop_lines
    binary = props.get("EXEC", "")
    if not binary:
        raise ManifestError(path, node.line, "drawer EXEC",
                            "missing (drawer-only manifests name their binary in :EXEC:)")
    _check_name(path, pl.get("EXEC", node.line), "drawer EXEC", binary)
    cli_bin = props.get("CLI_BIN") or binary
    _check_name(path, pl.get("CLI_BIN", node.line), "drawer CLI_BIN", cli_bin)
    ident = props.get("ID") or path.parent.name
    _check_name(path, pl.get("ID", node.line), "drawer ID", ident)
    raw_mode = props.get("ARG_MODE", "positional")
    if raw_mode not in LEGACY_ARG_MODES and raw_mode not in ARG_MODES:
        raise ManifestError(
            path, pl.get("ARG_MODE", node.line), "drawer ARG_MODE",
            f"{raw_mode!r} is not one of positional, flags",
        )
    arg_mode = LEGACY_ARG_MODES.get(raw_mode, raw_mode)
    caps = tuple(dict.fromkeys(LEGACY_CAPS.get(c, c)
                               for c in _caps(path, pl.get("CAPS", node.line), props.get("CAPS", ""))))
    sha = props.get("SHA256")
    if sha is not None and not SHA256_RE.match(sha.lower()):
        raise ManifestError(path, pl.get("SHA256", node.line), "drawer SHA256", "must be 64 hex digits")
    build_src = props.get("BUILD_SRC") or None
    # A built source means a WASM command; a bare binary name is a native PATH CLI.
    shape = "command" if build_src else "posix"
    notes = [
        f"legacy drawer-only manifest (seed 001); modern equivalent: #+TOOLKIT: {ident}, "
        f"#+EXEC: {shape}, #+CLI_BIN: {cli_bin}"
        + (f", #+ARG_MODE: {arg_mode} (was {raw_mode})" if raw_mode != arg_mode else "")
    ]
    mapped = [f"{c}→{LEGACY_CAPS[c]}" for c in props.get("CAPS", "").split() if c in LEGACY_CAPS]
    if mapped:
        notes.append("legacy caps mapped: " + ", ".join(mapped))
    first_line = next((ln.strip() for ln in node.body.splitlines()
                       if ln.strip() and not ln.strip().startswith(":")), "")
    return Manifest(
        path=path,
        id=ident,
        title=kw.get("TITLE") or node.title,
        version=kw.get("VERSION", "0.0.0"),
        status=props.get("STATUS", "experimental"),
        tagline=props.get("TAGLINE") or first_line or node.title,
        exec=shape,
        trust=props.get("TRUST", "first-party") if props.get("TRUST") in TRUSTS else "first-party",
        caps=caps,
        build_lang=props.get("BUILD_LANG") or None,
        build_src=build_src,
        cli_bin=cli_bin,
        arg_mode=arg_mode,
        sha256=sha.lower() if sha else None,
        format="legacy-drawer",
        keywords=MappingProxyType(dict(kw)),
        drawer=MappingProxyType(dict(props)),
        lines=MappingProxyType({k: v for k, v in pl.items()}),
        node_line=node.line,
        node_title=node.title,
        sections=tuple(node.children),
        notes=tuple(notes),
    )
