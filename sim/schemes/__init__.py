"""The sequence-parallel schemes, one module each (see sim.schemes.base).

Every module of this package other than `base` is a scheme; its name is the module's
name. Adding a scheme is adding a module (and its tests): nothing else names them. The
ring is the default: the scheme of a Scenario that names none, and of a trace header
written before headers named their scheme.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import fields
from functools import lru_cache
from typing import Any

from sim.errors import RingsimError
from sim.schemes.base import Scheme

__all__ = ["DEFAULT", "get", "names", "run_words"]

DEFAULT = "ring"
"""The scheme a Scenario takes when it names none."""


@lru_cache(maxsize=None)
def names() -> tuple[str, ...]:
    """Every scheme's name, the default (the ring) first, then alphabetically."""
    found = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base")
    return tuple(sorted(found, key=lambda n: n != DEFAULT))


@lru_cache(maxsize=None)
def get(name: str) -> Scheme:
    """The scheme called `name`; RingsimError naming the choices otherwise."""
    if not isinstance(name, str) or name not in names():
        raise RingsimError(f"unknown scheme {name!r}; choose one of {', '.join(names())}")
    scheme = importlib.import_module(f"{__name__}.{name}").SCHEME
    if scheme.name != name:
        raise RuntimeError(f"module sim.schemes.{name} defines the scheme {scheme.name!r}")
    return scheme


def run_words(config: dict[str, Any]) -> str:
    """A run's scheme and what sets it apart, in a few words, from its configuration
    (Scenario.describe(), a trace's header): its scheme's own words (Scheme.run_words), or
    the scheme's name and settings."""
    scheme = get(config.get("scheme", DEFAULT))
    words = scheme.run_words(config) or scheme.name + "".join(
        f", {f.name} {config[f.name]}" for f in fields(scheme.settings_type))
    # a library's implementation (sim.implementations); the ideal one is left unsaid
    return words + (f", as {config['impl']} runs it" if config.get("impl") else "")
