"""sim.arrays against numpy's own np.unique, on keys with long runs (a schedule's), short
ones and none, numbers and strings."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.arrays import distinct_ints, unique_columns, unique_values


@st.composite
def runs_of(draw, elements, rows=1):
    """`rows` rows of drawn values, each column repeated a drawn 1 to 6 times."""
    n = draw(st.integers(1, 40))
    values = [draw(st.lists(elements, min_size=n, max_size=n)) for _ in range(rows)]
    lengths = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    return np.stack([np.repeat(np.array(v), lengths) for v in values])


@settings(max_examples=150, deadline=None)
@given(key=runs_of(st.integers(-3, 3), rows=3))
def test_unique_columns_is_numpys_on_integers(key):
    distinct, back = unique_columns(key)
    want, want_back = np.unique(key, axis=1, return_inverse=True)
    assert np.array_equal(distinct, want)
    assert np.array_equal(back, want_back.ravel())
    assert np.array_equal(distinct[:, back], key)


@settings(max_examples=150, deadline=None)
@given(key=runs_of(st.sampled_from([0.0, -0.0, 0.5, 1e-300, 2.0, 7.25]), rows=2))
def test_unique_columns_compares_floats_by_value(key):
    distinct, back = unique_columns(key)
    assert np.array_equal(distinct[:, back], key)                 # -0.0 == 0.0 here
    as_value = key + 0.0                                          # -0.0 + 0.0 is 0.0
    want, want_back = np.unique(as_value, axis=1, return_inverse=True)
    assert np.array_equal(distinct, want)
    assert np.array_equal(back, want_back.ravel())


@settings(max_examples=150, deadline=None)
@given(key=runs_of(st.integers(0, 50)), strings=st.booleans())
def test_unique_values_is_numpys(key, strings):
    values = key[0].astype(str) if strings else key[0]
    distinct, back = unique_values(values)
    want, want_back = np.unique(values, return_inverse=True)
    assert np.array_equal(distinct, want)
    assert np.array_equal(back, want_back)
    assert back.dtype == np.int64


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.integers(0, 300), max_size=200), dtype=st.sampled_from([np.int8, np.int64]),
       below=st.sampled_from([301, 10**7]))
def test_distinct_ints_is_numpys(values, dtype, below):
    """By marking (a table of 301 flags) and by sorting (a table too large to pay)."""
    values = np.array(values, dtype=np.int64)
    values = values[values < np.iinfo(dtype).max].astype(dtype)
    got = distinct_ints(values, below)
    assert np.array_equal(got, np.unique(values))
    assert got.dtype == values.dtype


def test_long_runs_take_the_path_of_run_heads_and_agree():
    """A 1,024-GPU ring's shape of key: one value for ten thousand ops, then another."""
    key = np.repeat(np.array([[3, 1, 3], [0, 0, 1]]), 10_000, axis=1)
    distinct, back = unique_columns(key)
    assert distinct.tolist() == [[1, 3, 3], [0, 0, 1]]
    assert np.bincount(back).tolist() == [10_000] * 3
    assert np.array_equal(distinct[:, back], key)


def test_empty():
    assert unique_columns(np.zeros((2, 0)))[0].shape == (2, 0)
    assert len(unique_values(np.zeros(0))[0]) == 0
    assert len(distinct_ints(np.zeros(0, dtype=np.int64), 5)) == 0
