"""Array operations the model's rooms share, where numpy's own is slow at a million ops.

`unique_columns` is numpy's `np.unique(key, axis=1, return_inverse=True)` (the distinct
columns in lexicographic order, the first row most significant, and each column's index
among them), by one lexsort: numpy sorts columns as opaque records, twenty times slower
on the million transfers of a 1,024-GPU ring. `unique_values` is
`np.unique(values, return_inverse=True)` on one row. `distinct_ints` is `np.unique` of
small non-negative integers, by marking them.

Each looks at runs first: a schedule lists its ops rank by rank and step by step, so
that consecutive ops mostly share their keys (a ring's hops one communicator, its steps
one or two block shapes); where runs of equal keys are at least two long on average, only
each run's first key is sorted, and the others take its index.
"""

from __future__ import annotations

import numpy as np


def unique_columns(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct columns of the 2-D `key`, sorted; each column's index into them).
    Columns compare by value (-0.0 equals 0.0), not by their bytes as np.unique's do."""
    n = key.shape[1]
    if n == 0:
        return key[:, :0], np.zeros(0, dtype=np.int64)
    heads = _run_heads(key)
    if heads is None:
        return _sorted_columns(key)
    distinct, back = _sorted_columns(key[:, heads])
    return distinct, back[np.cumsum(heads) - 1]


def unique_values(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values of the 1-D `values`, sorted; each value's index into them), as
    np.unique(values, return_inverse=True) gives them, for numbers or strings."""
    distinct, back = unique_columns(np.asarray(values)[None, :])
    return distinct[0], back


def distinct_ints(values: np.ndarray, below: int) -> np.ndarray:
    """np.unique(values) of integers in [0, below), ascending: by marking each value in a
    table of `below` flags where that table is no larger than a few times the values (a
    sort otherwise)."""
    values = np.asarray(values)
    if below > 4 * len(values) + 1024:
        return np.unique(values)
    seen = np.zeros(below, dtype=bool)
    seen[values] = True
    return np.flatnonzero(seen).astype(values.dtype, copy=False)


def _run_heads(key: np.ndarray) -> np.ndarray | None:
    """Where each run of equal consecutive columns of `key` starts (a mask), or None where
    runs are too short for sorting their first columns alone to pay."""
    n = key.shape[1]
    heads = np.empty(n, dtype=bool)
    heads[0] = True
    if n > 1:
        np.any(key[:, 1:] != key[:, :-1], axis=0, out=heads[1:])
    return heads if 2 * np.count_nonzero(heads) <= n else None


def _sorted_columns(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """unique_columns by one lexsort of all the columns."""
    n = key.shape[1]
    order = np.lexsort(key[::-1])
    ordered = key[:, order]
    new = np.ones(n, dtype=bool)
    new[1:] = (ordered[:, 1:] != ordered[:, :-1]).any(axis=0)
    back = np.empty(n, dtype=np.int64)
    back[order] = np.cumsum(new) - 1
    return ordered[:, new], back
