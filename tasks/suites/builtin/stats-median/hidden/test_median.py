import pytest
from rlguard_checks import same


def test_median_odd_unsorted():
    import statskit

    assert same(statskit.median([5, 1, 9, 3, 7]), 5)


def test_median_even_is_mean_of_middle_pair():
    import statskit

    assert statskit.median([4, 1, 3, 2]) == 2.5


def test_median_even_pair_gives_float():
    import statskit

    assert same(statskit.median([1, 3]), 2.0)


def test_median_empty_raises():
    import statskit

    with pytest.raises(ValueError):
        statskit.median([])


def test_describe_even_sample():
    import statskit

    summary = statskit.describe([10, 2, 8, 4])
    assert summary == {"count": 4, "mean": 6.0, "median": 6.0, "min": 2, "max": 10}


def test_mode_unchanged():
    import statskit

    assert same(statskit.mode([4, 4, 2, 2, 9]), 2)
