"""``#+BUILD_SRC`` parsing: which prefix plugin serves a source spec.

The longest registered prefix that starts the spec wins (``git+`` before ``g``); an
unknown prefix is an error listing the known ones; a refused prefix (``script:``) is
an error carrying its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wbcore_runtime.contract.errors import InvalidArgs, unknown_name

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import Registry
    from wbcore_runtime.contract.records import SourcePrefix


@dataclass(frozen=True, slots=True)
class SourceSpec:
    prefix: SourcePrefix
    rest: str

    @property
    def text(self) -> str:
        return f"{self.prefix.name}{self.rest}"


def parse(spec: str, prefixes: Registry[SourcePrefix]) -> SourceSpec:
    spec = spec.strip()
    match = max((p for p in prefixes if spec.startswith(p.name)), key=lambda p: len(p.name), default=None)
    if match is None:
        head = spec.split(":", 1)[0] + ":" if ":" in spec else spec
        raise InvalidArgs(unknown_name("BUILD_SRC prefix", head, prefixes.names()))
    if match.refused:
        raise InvalidArgs(f"BUILD_SRC {match.name} is refused: {match.refused}")
    rest = spec[len(match.name):]
    if not rest:
        raise InvalidArgs(f"BUILD_SRC {spec!r} names no source after {match.name}")
    return SourceSpec(match, rest)
