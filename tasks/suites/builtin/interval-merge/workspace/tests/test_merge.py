from intervals import merge


def test_overlapping_sorted():
    assert merge([(1, 3), (2, 5), (7, 8)]) == [(1, 5), (7, 8)]
