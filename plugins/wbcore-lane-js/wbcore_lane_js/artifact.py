"""The js artifact: the QuickJS-NG reactor module with the toolkit's code inside it.

One ``.wasm`` file, so runtime and source are content-addressed together (one
sha256 names both). It is the reactor's bytes, unchanged, followed by two custom
sections (ignored by every wasm engine, so the file stays a valid module)::

    wbcore.runner      b"js"                   which lane's runner executes it
    wbcore.js-bundle   JSON {"format": 1, "entry": "main.js",
                             "files": {"main.js": "...", "__wb_entry.mjs": "..."}}
    wbcore.js-snapshot b"1"                    the module is the reactor pre-initialized
                                               (wbcore_lane_js.snapshot): QuickJS and the entry
                                               set up, ``__wb_main`` defined

A runner (``wbcore_lane_js.runner``) materialises ``files`` read-only at ``/app`` and
asks the reactor to load ``/app/__wb_entry.mjs`` as a module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from wbcore_runtime.contract.errors import InvalidArgs

RUNNER_SECTION = "wbcore.runner"
BUNDLE_SECTION = "wbcore.js-bundle"
#: Present (payload b"1") when the module is a pre-initialized snapshot (wbcore_lane_js.snapshot).
SNAPSHOT_SECTION = "wbcore.js-snapshot"
FORMAT = 1
MAGIC = b"\0asm\x01\0\0\0"
#: Largest bundle a js artifact may carry (source text, not the runtime).
MAX_BUNDLE_BYTES = 16 << 20


def _uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_uleb(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 35:
            raise InvalidArgs("malformed wasm: bad LEB128")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def custom_section(name: str, payload: bytes) -> bytes:
    raw = name.encode()
    body = _uleb(len(raw)) + raw + payload
    return b"\0" + _uleb(len(body)) + body


def custom_sections(data: bytes | memoryview) -> Iterator[tuple[str, memoryview]]:
    """Every custom section of a wasm module, as (name, payload), in order."""
    view = memoryview(data)
    if bytes(view[:8]) != MAGIC:
        raise InvalidArgs("not a wasm module (bad magic or version)")
    pos = 8
    while pos < len(view):
        sid = view[pos]
        size, body = _read_uleb(view, pos + 1)
        end = body + size
        if end > len(view):
            raise InvalidArgs("malformed wasm: section runs past the end")
        if sid == 0:
            nlen, npos = _read_uleb(view, body)
            yield bytes(view[npos:npos + nlen]).decode("utf-8", "replace"), view[npos + nlen:end]
        pos = end


def code_part(data: bytes) -> bytes:
    """The module without its trailing ``wbcore.*`` custom sections: the reactor's own
    bytes, identical for every js artifact, so its compiled form is shared by all."""
    view = memoryview(data)
    if bytes(view[:8]) != MAGIC:
        raise InvalidArgs("not a wasm module (bad magic or version)")
    pos, cut = 8, None
    while pos < len(view):
        sid = view[pos]
        size, body = _read_uleb(view, pos + 1)
        name = None
        if sid == 0:
            nlen, npos = _read_uleb(view, body)
            name = bytes(view[npos:npos + nlen]).decode("utf-8", "replace")
        if name is not None and name.startswith("wbcore."):
            cut = pos if cut is None else cut
        else:
            cut = None
        pos = body + size
    return bytes(view[:cut]) if cut is not None else data


def runner_of(path: Path) -> str | None:
    """The lane named by an artifact's ``wbcore.runner`` section, if any."""
    data = path.read_bytes()
    for name, payload in custom_sections(data):
        if name == RUNNER_SECTION:
            return bytes(payload).decode("utf-8", "replace")
    return None


@dataclass(frozen=True, slots=True)
class Bundle:
    entry: str
    files: Mapping[str, str]

    def encode(self) -> bytes:
        doc = {"format": FORMAT, "entry": self.entry, "files": dict(sorted(self.files.items()))}
        return json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def pack(runtime_wasm: bytes, bundle: Bundle, runner: str = "js", *, snapshot: bool = False) -> bytes:
    payload = bundle.encode()
    if len(payload) > MAX_BUNDLE_BYTES:
        raise InvalidArgs(f"js bundle is {len(payload)} bytes, over the {MAX_BUNDLE_BYTES}-byte cap")
    out = (
        runtime_wasm
        + custom_section(RUNNER_SECTION, runner.encode())
        + custom_section(BUNDLE_SECTION, payload)
    )
    return out + custom_section(SNAPSHOT_SECTION, b"1") if snapshot else out


def unpack(data: bytes) -> Bundle:
    for name, payload in custom_sections(data):
        if name == BUNDLE_SECTION:
            if len(payload) > MAX_BUNDLE_BYTES:
                raise InvalidArgs("js bundle over its size cap")
            doc = json.loads(bytes(payload))
            if doc.get("format") != FORMAT:
                raise InvalidArgs(f"js bundle format {doc.get('format')!r} is not {FORMAT}")
            files = doc["files"]
            if not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in files.items()
            ):
                raise InvalidArgs("js bundle: files must map paths to text")
            return Bundle(entry=str(doc["entry"]), files=MappingProxyType(files))
    raise InvalidArgs(f"not a js artifact: no {BUNDLE_SECTION} custom section")
