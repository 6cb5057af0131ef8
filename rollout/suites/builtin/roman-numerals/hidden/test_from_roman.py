import importlib

import pytest
from rlguard_checks import same


def _n():
    return importlib.import_module("numerals")


def test_known_values():
    got = [_n().from_roman(t) for t in ("I", "IV", "IX", "XLII", "MCMXCIV", "MMMCMXCIX")]
    assert same(got, [1, 4, 9, 42, 1994, 3999])


def test_round_trip():
    for number in range(1, 4000, 7):
        assert same(_n().from_roman(_n().to_roman(number)), number)


def test_non_canonical_rejected():
    for text in ("IIII", "IC", "VX", "MMMM", "XIIII"):
        with pytest.raises(ValueError):
            _n().from_roman(text)


def test_garbage_rejected():
    for text in ("", "abc", "mcm", "X I"):
        with pytest.raises(ValueError):
            _n().from_roman(text)
