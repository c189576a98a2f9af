"""A discovered toolkit: its manifest, where it lives, and its skills."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from wbcore_runtime.guard import paths
from wbcore_runtime.toolkit import skills as _skills
from wbcore_runtime.contract.errors import NotFound, WbError
from wbcore_runtime.toolkit.manifest import Manifest


@dataclass(frozen=True)
class Toolkit:
    manifest: Manifest
    root: Path
    shadows: tuple[Path, ...] = field(default=())

    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def dir(self) -> Path:
        return self.manifest.dir

    def folder(self) -> paths.Root:
        """The toolkit's folder as a containment root, checked again from its search root on
        every call: a folder swapped for a link out after discovery is refused, not followed."""
        if self.dir.parent == self.root:
            return paths.Root.at(self.root, paths.SEARCH_ROOT).folder(self.dir.name, paths.TOOLKIT_ROOT)
        return paths.Root.at(self.dir)

    @cached_property
    def skill_index(self) -> _skills.Index:
        try:
            return _skills.scan(self.folder())
        except paths.Refused as exc:
            return _skills.Index(problems=(exc,))
        except NotFound:
            return _skills.Index()

    @property
    def skills(self) -> list[_skills.Skill]:
        return list(self.skill_index.skills)

    @property
    def skill_problems(self) -> tuple[WbError, ...]:
        """Skill files (or the ``skills/`` folder) refused by containment: ``file: reason`` each."""
        return self.skill_index.problems

    def skill_text(self, slug: str) -> str:
        return _skills.read_skill(self.folder(), slug)

    def as_dict(self) -> dict[str, Any]:
        data = self.manifest.as_dict()
        data["root"] = str(self.root)
        data["skills"] = [s.as_dict() for s in self.skills]
        data["skill_problems"] = [str(p) for p in self.skill_problems]
        return data
