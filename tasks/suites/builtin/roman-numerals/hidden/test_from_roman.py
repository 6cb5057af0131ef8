import pytest
from rlguard_checks import same


def test_known_values():
    from numerals import from_roman

    got = [from_roman(t) for t in ("I", "IV", "IX", "XLII", "MCMXCIV", "MMMCMXCIX")]
    assert same(got, [1, 4, 9, 42, 1994, 3999])


def test_round_trip():
    from numerals import from_roman, to_roman

    for number in range(1, 4000, 7):
        assert from_roman(to_roman(number)) == number


def test_non_canonical_rejected():
    from numerals import from_roman

    for text in ("IIII", "IC", "VX", "MMMM", "XIIII"):
        with pytest.raises(ValueError):
            from_roman(text)


def test_garbage_rejected():
    from numerals import from_roman

    for text in ("", "abc", "mcm", "X I"):
        with pytest.raises(ValueError):
            from_roman(text)
