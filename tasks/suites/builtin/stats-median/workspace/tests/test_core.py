import pytest

from statskit import mean, median, mode


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_mode_tie_goes_to_smallest():
    assert mode([2, 2, 1, 1, 3]) == 1


def test_median_empty():
    with pytest.raises(ValueError):
        median([])
