"""Where a ``module:attr.attr`` target names an object: :func:`load_target`.

Entry points, ``lazy`` record factories (``plugins.manager.lazy``) and the LLM providers'
SDK drivers (``contract.records.sdk_provider``) name code this way so that it is imported only
when first used. It lives in the contract, below both, so the contract does not import the
plugin manager.
"""

from __future__ import annotations

import importlib
from typing import Any


def load_target(target: str) -> Any:
    """The object an entry point names: ``module`` or ``module:attr.attr`` (as
    ``importlib.metadata.EntryPoint.load``, without importing importlib.metadata)."""
    module, _, attrs = target.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for attr in filter(None, attrs.strip().split(".")):
        obj = getattr(obj, attr)
    return obj
