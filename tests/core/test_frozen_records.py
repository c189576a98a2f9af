"""The run path's hand-written records (``wbcore_runtime.contract.frozen``) behave as the
dataclasses they replaced: each is compared here with that dataclass, rebuilt by
``dataclasses.make_dataclass`` from the same fields, defaults and flags."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from wbcore_runtime.contract.calls import CallRecord, CallResult, CommandRequest, Principal, Usage
from wbcore_runtime.dispatch.resolve import Resolved
from wbcore_runtime.dispatch.tiers import TierChoice
from wbcore_runtime.dispatch.running import Running
from wbcore_runtime.guard.paths import TOOLKIT_ROOT, Node, Root
from wbcore_runtime.store.artifacts import Artifact
from wbcore_runtime.store.home import Home, Project
from wbcore_runtime.store.registry import Entry
from wbcore_runtime.trust.policy import MiB, Cap, Profile

REQUIRED = object()
FACTORY = object()
FACTORIES: dict[str, Any] = {"usage": Usage, "options": dict}
FROZEN = {"frozen": True, "slots": True}

#: class, its dataclass flags, its fields in order (name, default), the fields that were
#: ``field(repr=False, compare=False)``.
CASES: list[tuple[type, dict[str, Any], list[tuple[str, Any]], set[str]]] = [
    (TierChoice, FROZEN, [("name", REQUIRED), ("reason", REQUIRED), ("considered", ())], set()),
    (Resolved, FROZEN, [(f, REQUIRED) for f in ("kind", "name", "entry", "sha256", "artifact",
                                                 "toolkit", "trust", "signer", "profile", "caps",
                                                 "allowed_hosts", "tier")]
     + [("target", None), ("kernel", None), ("home", None)], {"target"}),
    (Usage, {"slots": True}, [("wall_s", 0.0), ("fuel", None), ("peak_memory", 0), ("bytes_out", 0),
                              ("isolation", ""), ("tier", "")], set()),
    (CallResult, FROZEN, [("stdout", REQUIRED), ("stderr", REQUIRED), ("exit_code", REQUIRED),
                          ("usage", FACTORY)], set()),
    (CallRecord, FROZEN, [("name", REQUIRED), ("shape", REQUIRED), ("principal", REQUIRED), ("argv", ()),
                          ("toolkit", None), ("tier", None), ("caps", frozenset())], set()),
    (Profile, FROZEN, [("name", REQUIRED), ("memory_bytes", REQUIRED), ("timeout_s", REQUIRED),
                       ("caps", REQUIRED), ("stdout_bytes", 16 * MiB), ("stderr_bytes", 1 * MiB)], set()),
    (Cap, FROZEN, [("name", REQUIRED), ("meaning", REQUIRED), ("profiles", REQUIRED),
                   ("origin", REQUIRED)], set()),
    (Root, FROZEN, [("shown", REQUIRED), ("real", REQUIRED), ("label", TOOLKIT_ROOT)], set()),
    (Node, FROZEN, [("rel", REQUIRED), ("kind", REQUIRED), ("fd", -1), ("target", ""),
                    ("executable", False)], set()),
    (Project, FROZEN, [("root", REQUIRED), ("marker", REQUIRED), ("home", None), ("toolkits", ())], set()),
    (Home, FROZEN, [("path", REQUIRED), ("source", REQUIRED), ("project", None)], set()),
    (Artifact, FROZEN, [("sha256", REQUIRED), ("path", REQUIRED), ("size", REQUIRED)], set()),
    (Principal, FROZEN, [("tenant", "default"), ("toolkit", ""), ("reach", None)], set()),
    (CommandRequest, FROZEN, [(f, REQUIRED) for f in ("name", "sha256", "artifact", "argv", "stdin",
                                                       "profile", "timeout_s", "principal")]
     + [("caps", frozenset()), ("arg_mode", "argv"), ("fuel", None), ("toolkit", None), ("cancel", None),
        ("allowed_hosts", ()), ("tier", "instance"), ("preopens", ()), ("scratch", None), ("mounts", ())],
     set()),
    (Entry, FROZEN, [("kind", REQUIRED), ("name", REQUIRED), ("sha256", REQUIRED), ("shape", REQUIRED),
                     ("toolkit", None), ("arg_mode", "argv"), ("profile", "compute"), ("builtin", False),
                     ("options", FACTORY)], set()),
    (Running, {"eq": False}, [("kind", REQUIRED), ("name", REQUIRED), ("caps", REQUIRED),
                              ("principal", REQUIRED), ("cancel", REQUIRED), ("cut", None),
                              ("revoked_at_start", False)], set()),
]


def reference(cls: type, flags: dict[str, Any], fields: list[tuple[str, Any]], hidden: set[str]) -> type:
    """The dataclass ``cls`` was before it was written by hand."""
    spec: list[Any] = []
    for name, default in fields:
        if name in hidden:
            spec.append((name, Any, dataclasses.field(default=default, repr=False, compare=False)))
        elif default is REQUIRED:
            spec.append((name, Any))
        elif default is FACTORY:
            spec.append((name, Any, dataclasses.field(default_factory=FACTORIES[name])))
        else:
            spec.append((name, Any, dataclasses.field(default=default)))
    return dataclasses.make_dataclass(cls.__name__, spec, **flags)


def values(fields: list[tuple[str, Any]], tag: int) -> dict[str, Any]:
    return {name: (f"{name}-{tag}", tag, frozenset({f"{name}{tag}"})) for name, _ in fields}


@pytest.mark.parametrize(("cls", "flags", "fields", "hidden"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_hand_written_record_behaves_as_its_dataclass(cls: type, flags: dict[str, Any],
                                                        fields: list[tuple[str, Any]],
                                                        hidden: set[str]) -> None:
    ref = reference(cls, flags, fields, hidden)
    names = [n for n, _ in fields]
    assert list(cls.__match_args__) == list(ref.__match_args__) == names  # type: ignore[attr-defined]
    assert getattr(cls, "__slots__", None) == getattr(ref, "__slots__", None)
    # the same __init__: parameter names, kinds and (plain) defaults
    mine, theirs = inspect.signature(cls).parameters, inspect.signature(ref).parameters
    assert list(mine) == list(theirs)
    for name, default in fields:
        assert mine[name].kind == theirs[name].kind
        if default is REQUIRED:
            assert mine[name].default is inspect.Parameter.empty
        elif default is not FACTORY:
            assert mine[name].default == theirs[name].default == default
    # defaults, as made
    required = {n: values(fields, 1)[n] for n, d in fields if d is REQUIRED}
    a0, r0 = cls(**required), ref(**required)
    assert repr(a0) == repr(r0)
    for name, default in fields:
        if default is FACTORY:
            assert (getattr(a0, name) == FACTORIES[name]()
                    and getattr(a0, name) is not getattr(cls(**required), name))
    # ==, hash and repr over every combination of two instances
    samples = [values(fields, 1), values(fields, 2), {**values(fields, 1), names[-1]: "other"}]
    if hidden:
        samples.append({**values(fields, 1), **{h: "hidden differs" for h in hidden}})
    for x in samples:
        a, r = cls(**x), ref(**x)
        assert repr(a) == repr(r)
        assert (a == r) is False and (a != r) is True  # another class: never equal
        for y in samples:
            assert (a == cls(**y)) == (r == ref(**y))
            assert (a != cls(**y)) == (r != ref(**y))
        if ref.__hash__ is None:
            assert cls.__hash__ is None
            with pytest.raises(TypeError):
                hash(a)
        elif flags.get("eq", True):
            assert hash(a) == hash(r)
        else:  # eq=False: identity, as object's
            assert hash(a) == object.__hash__(a) and a == a and a != cls(**x)
        # frozen-ness: assigning a field raises the same exception with the same message
        try:
            setattr(r, names[0], 1)
            theirs_set: Any = None
        except Exception as exc:  # noqa: BLE001 - compared below
            theirs_set = (type(exc), str(exc))
        try:
            setattr(a, names[0], 1)
            mine_set: Any = None
        except Exception as exc:  # noqa: BLE001
            mine_set = (type(exc), str(exc))
        assert mine_set == theirs_set
        # any other name is refused by both (a frozen slots dataclass's own __setattr__ fails
        # in its super() call with a TypeError on CPython 3.11; a hand-written one says
        # FrozenInstanceError, the AttributeError dataclasses documents)
        for obj in (a, r):
            if flags.get("frozen") or flags.get("slots"):
                with pytest.raises((AttributeError, TypeError)):
                    obj.not_a_field = 1  # type: ignore[attr-defined]
                assert not hasattr(obj, "not_a_field")
            else:  # a plain mutable record takes any attribute, as before
                obj.not_a_field = 1  # type: ignore[attr-defined]
        if flags.get("frozen"):
            with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field"):
                delattr(a, names[0])
        if flags.get("eq", True):  # pickled and copied: an equal record of the same class
            for twin in (pickle.loads(pickle.dumps(a)), copy.copy(a), copy.deepcopy(a)):
                assert type(twin) is cls and twin == a and repr(twin) == repr(a)
        if cls is not Running:  # dataclasses' own functions take it as the dataclass it was
            assert dataclasses.is_dataclass(a) and dataclasses.asdict(a) == dataclasses.asdict(r)
            assert ([(f.name, f.default, f.default_factory, f.repr, f.compare) for f in dataclasses.fields(a)]
                    == [(f.name, f.default, f.default_factory, f.repr, f.compare)
                        for f in dataclasses.fields(r)])
            changed = dataclasses.replace(a, **{names[0]: "changed"})
            assert (type(changed) is cls
                    and repr(changed) == repr(dataclasses.replace(r, **{names[0]: "changed"})))


def test_an_unhashable_field_makes_a_frozen_record_unhashable_as_before() -> None:
    with pytest.raises(TypeError, match="unhashable"):
        hash(TierChoice("instance", "why", [("x", "y")]))  # type: ignore[arg-type]
