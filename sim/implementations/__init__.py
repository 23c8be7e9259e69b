"""The implementations of the schemes, one module each, under the scheme it implements
(sim.implementations.base: what one step launches, read from the library's code;
docs/implementations.md).

Each subpackage is named for a scheme of sim.schemes and holds one module per library
that implements it, each defining `IMPLEMENTATION`; the registry finds them, as
sim.schemes finds the schemes, so that nothing else names them. `ideal`, the fused kernel
the schemes assume, implements every scheme and is the default: it changes nothing.
A library is named on the command line (`--impl`): its version of the chosen scheme.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from functools import lru_cache

from sim.errors import RingsimError
from sim.implementations.base import IDEAL, Implementation
from sim.reasons import clause, refusal

__all__ = ["DEFAULT", "LIBRARIES", "get", "of_scheme"]

DEFAULT = IDEAL.library
"""The implementation a Scenario takes when it names none: the fused kernel."""
LIBRARIES = {
    "ideal": "the fused kernel the schemes assume",
    "te": "TransformerEngine (Megatron-Core's context parallelism)",
    "rfa": "ring-flash-attention",
    "torch": "torch context_parallel",
    "usp": "long-context-attention (USP, yunchang)",
}
"""Every library `--impl` names, with what it is."""


@lru_cache(maxsize=None)
def _found() -> dict[str, dict[str, Implementation]]:
    """Scheme -> library -> implementation, from the subpackages' modules."""
    out: dict[str, dict[str, Implementation]] = {}
    for pkg in pkgutil.iter_modules(__path__):
        if not pkg.ispkg:
            continue
        sub = importlib.import_module(f"{__name__}.{pkg.name}")
        for mod in pkgutil.iter_modules(sub.__path__):
            impl = importlib.import_module(f"{sub.__name__}.{mod.name}").IMPLEMENTATION
            if impl.library not in LIBRARIES:
                raise RuntimeError(f"{sub.__name__}.{mod.name} names an unknown library {impl.library!r}")
            have = out.setdefault(pkg.name, {})
            if impl.library in have:
                raise RuntimeError(f"two implementations of {pkg.name} by {impl.library}")
            have[impl.library] = replace(impl, scheme=pkg.name)
    return out


def of_scheme(scheme: str) -> tuple[Implementation, ...]:
    """Every implementation of `scheme`: the ideal first, then by library in LIBRARIES' order."""
    have = _found().get(scheme, {})
    return (replace(IDEAL, scheme=scheme),) + tuple(have[name] for name in LIBRARIES if name in have)


def get(scheme: str, library: str) -> Implementation:
    """`library`'s implementation of `scheme`; RingsimError, one line, where the library
    has none."""
    if library not in LIBRARIES:
        raise RingsimError(f"unknown implementation {library!r}; choose one of {', '.join(LIBRARIES)}")
    if library == DEFAULT:
        return replace(IDEAL, scheme=scheme)
    found = _found().get(scheme, {})
    if library not in found:
        raise refusal("refused.impl-scheme", impl=library, scheme=scheme,
                      libraries=[clause("variant.impl", impl=i.library) for i in of_scheme(scheme)])
    return found[library]
