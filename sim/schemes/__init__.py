"""The sequence-parallel schemes, one module each (see sim.schemes.base).

Every module of this package other than `base` is a scheme; its name is the module's
name. Adding a scheme is adding a module (and its tests): nothing else names them.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from sim.errors import RingsimError
from sim.schemes.base import BlockMap, OpKind, Scheme

__all__ = ["BlockMap", "OpKind", "Scheme", "get", "names"]


@lru_cache(maxsize=None)
def names() -> tuple[str, ...]:
    """Every scheme's name, the ring first, then alphabetically."""
    found = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base")
    return tuple(sorted(found, key=lambda n: n != "ring"))


@lru_cache(maxsize=None)
def get(name: str) -> Scheme:
    """The scheme called `name`; RingsimError naming the choices otherwise."""
    if not isinstance(name, str) or name not in names():
        raise RingsimError(f"unknown scheme {name!r}; choose one of {', '.join(names())}")
    scheme = importlib.import_module(f"{__name__}.{name}").SCHEME
    if scheme.name != name:
        raise RuntimeError(f"module sim.schemes.{name} defines the scheme {scheme.name!r}")
    return scheme
