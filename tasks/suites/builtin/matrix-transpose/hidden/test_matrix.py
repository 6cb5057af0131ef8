import importlib

import pytest
from rlguard_checks import same


def _m():
    return importlib.import_module("matrixlib")


def test_transpose_wide():
    assert same(_m().transpose([[1, 2, 3], [4, 5, 6]]), [[1, 4], [2, 5], [3, 6]])


def test_transpose_tall():
    assert same(_m().transpose([[1], [2], [3]]), [[1, 2, 3]])


def test_transpose_empty():
    assert same(_m().transpose([]), [])


def test_multiply_rectangular():
    assert same(_m().multiply([[1, 2, 3]], [[1], [2], [3]]), [[14]])


def test_multiply_mismatch_raises():
    with pytest.raises(ValueError):
        _m().multiply([[1, 2]], [[1, 2]])


def test_transpose_twice_is_identity():
    matrix = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert same(_m().transpose(_m().transpose(matrix)), matrix)
