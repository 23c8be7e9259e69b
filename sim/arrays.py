"""Array operations the model's rooms share, where numpy's own is slow at a million ops.

`unique_columns` is numpy's `np.unique(key, axis=1, return_inverse=True)` (the distinct
columns in lexicographic order, the first row most significant, and each column's index
among them), by one lexsort: numpy sorts columns as opaque records, twenty times slower
on the million transfers of a 1,024-GPU ring.
"""

from __future__ import annotations

import numpy as np


def unique_columns(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct columns of the 2-D `key`, sorted; each column's index into them).
    Columns compare by value (-0.0 equals 0.0), not by their bytes as np.unique's do."""
    n = key.shape[1]
    if n == 0:
        return key[:, :0], np.zeros(0, dtype=np.int64)
    order = np.lexsort(key[::-1])
    ordered = key[:, order]
    new = np.ones(n, dtype=bool)
    new[1:] = (ordered[:, 1:] != ordered[:, :-1]).any(axis=0)
    back = np.empty(n, dtype=np.int64)
    back[order] = np.cumsum(new) - 1
    return ordered[:, new], back
