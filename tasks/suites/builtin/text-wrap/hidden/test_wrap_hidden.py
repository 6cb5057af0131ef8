import importlib

import pytest
from rlguard_checks import same


def _w():
    return importlib.import_module("wraptext")


def test_lines_never_exceed_width():
    assert same(_w().wrap("aaa bbb ccc", 7), ["aaa bbb", "ccc"])


def test_exact_fit():
    assert same(_w().wrap("ab cd", 5), ["ab cd"])


def test_long_word_is_split():
    assert same(_w().wrap("tiny abcdefghij z", 4), ["tiny", "abcd", "efgh", "ij z"])


def test_whitespace_runs_and_newlines():
    assert same(_w().wrap("  one\ttwo\n three  ", 9), ["one two", "three"])


def test_fill_and_empty():
    assert same(_w().fill("a b c", 3), "a b\nc")
    assert same(_w().wrap("", 5), [])


def test_bad_width():
    with pytest.raises(ValueError):
        _w().wrap("x", 0)
