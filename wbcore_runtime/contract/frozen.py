"""Records written by hand with a dataclass's semantics, for the classes every ``wbx run`` imports.

``@dataclass`` generates its methods with ``exec`` per class (~0.5-1 ms; seventeen on the run path)
and ``dataclasses`` imports ``inspect`` (~8 ms; docs/benchmarks.md). A :class:`Record` or :class:`Frozen`
writes its ``__init__`` and declares ``__slots__ = __match_args__ = (fields in __init__ order)``, plus
``_hidden`` (fields that were ``field(repr=False, compare=False)``) and ``_factories`` (those with a
``default_factory``). ``==``, hash, repr, frozenness and pickling match the dataclass, and
``dataclasses.replace``/``fields``/``asdict``/``is_dataclass`` take it as one (its ``__dataclass_fields__``
are made on first use); ``tests/core/test_frozen_records.py`` compares each record with the dataclass it
replaced. Elsewhere, use a dataclass.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from dataclasses import Field

_set = object.__setattr__


class _DataclassFields:
    """A record's ``__dataclass_fields__``, made on first use from a dataclass with the same
    fields (``dataclasses.make_dataclass``): only a caller that asks imports :mod:`dataclasses`."""

    def __get__(self, obj: object, cls: type[Record]) -> dict[str, Field[Any]]:
        made: dict[str, Field[Any]] | None = cls.__dict__.get("_made_fields")
        if made is None:
            import dataclasses  # only when asked (replace, fields, asdict): keeps wbx start-up light

            code = cls.__init__.__code__
            params = code.co_varnames[1:code.co_argcount]
            defaults = dict(zip(params[len(params) - len(cls.__init__.__defaults__ or ()):],
                                cls.__init__.__defaults__ or (), strict=True))
            spec: list[Any] = []
            for name in cls.__match_args__:
                kind = cls.__annotations__.get(name, Any)
                if name in cls._factories:
                    spec.append((name, kind, dataclasses.field(default_factory=cls._factories[name])))
                elif name in defaults:
                    shown = name not in cls._hidden
                    field = dataclasses.field(default=defaults[name], repr=shown, compare=shown)
                    spec.append((name, kind, field))
                else:
                    spec.append((name, kind))
            made = vars(dataclasses.make_dataclass(cls.__name__, spec))["__dataclass_fields__"]
            type.__setattr__(cls, "_made_fields", made)
        return made


class Record:
    """A mutable record: ``@dataclass``'s ``==`` and repr, unhashable (slots if the subclass
    declares them)."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()
    #: Fields left out of ``==``, the hash and the repr.
    _hidden: ClassVar[frozenset[str]] = frozenset()
    #: Fields whose default is made per instance (a dataclass's ``default_factory``).
    _factories: ClassVar[dict[str, Any]] = {}
    _compared: ClassVar[tuple[str, ...]] = ()
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]] = _DataclassFields()  # type: ignore[assignment]

    #: The compared fields' values as a tuple (what a dataclass's ``__eq__`` and ``__hash__`` build).
    _values: ClassVar[Callable[[Any], tuple[Any, ...]]] = staticmethod(lambda obj: ())

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._compared = compared = tuple(f for f in cls.__match_args__ if f not in cls._hidden)
        if len(compared) > 1:  # attrgetter: a C call, as fast as the generated tuple
            cls._values = staticmethod(attrgetter(*compared))
        else:
            cls._values = staticmethod(lambda obj: tuple(getattr(obj, f) for f in compared))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            get = self.__class__._values
            return get(self) == get(other)
        return NotImplemented

    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._compared)
        return f"{self.__class__.__qualname__}({shown})"


class Frozen(Record):
    """A frozen record: ``@dataclass(frozen=True, slots=True)``'s ``==``, hash, repr and
    frozenness; its ``__init__`` sets the fields with :func:`set_fields`."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self.__class__._values(self))

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError  # only on the error path: keeps wbx start-up light

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError  # only on the error path

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self) -> list[Any]:
        return [getattr(self, f) for f in self.__match_args__]

    def __setstate__(self, state: list[Any]) -> None:
        for f, value in zip(self.__match_args__, state, strict=False):
            _set(self, f, value)


def set_fields(obj: Frozen, **values: Any) -> None:
    """Set a frozen record's fields (its ``__init__``; assignment raises)."""
    for name, value in values.items():
        _set(obj, name, value)
