import pytest
from numerals import from_roman, to_roman
from rlguard_checks import same


def test_known_values():
    got = [from_roman(t) for t in ("I", "IV", "IX", "XLII", "MCMXCIV", "MMMCMXCIX")]
    assert same(got, [1, 4, 9, 42, 1994, 3999])


def test_round_trip():
    for number in range(1, 4000, 7):
        assert from_roman(to_roman(number)) == number


def test_non_canonical_rejected():
    for text in ("IIII", "IC", "VX", "MMMM", "XIIII"):
        with pytest.raises(ValueError):
            from_roman(text)


def test_garbage_rejected():
    for text in ("", "abc", "mcm", "X I"):
        with pytest.raises(ValueError):
            from_roman(text)
