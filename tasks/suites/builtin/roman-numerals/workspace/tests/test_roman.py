from numerals import to_roman


def test_to_roman():
    assert to_roman(1994) == "MCMXCIV"
