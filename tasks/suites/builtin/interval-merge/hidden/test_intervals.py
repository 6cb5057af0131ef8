import importlib

import pytest
from rlguard_checks import same


def _iv():
    return importlib.import_module("intervals")


def test_unsorted_input():
    assert same(_iv().merge([(7, 8), (2, 5), (1, 3)]), [(1, 5), (7, 8)])


def test_touching_intervals_merge():
    assert same(_iv().merge([(1, 2), (2, 3)]), [(1, 3)])


def test_nested_interval():
    assert same(_iv().merge([(1, 10), (2, 3)]), [(1, 10)])


def test_empty():
    assert same(_iv().merge([]), [])


def test_reversed_interval_raises():
    with pytest.raises(ValueError):
        _iv().merge([(3, 1)])


def test_total_length_counts_overlap_once():
    assert same(_iv().total_length([(5, 8), (1, 4), (3, 6)]), 7)
