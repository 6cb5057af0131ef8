import importlib

from rlguard_checks import same


def _slugify(*args, **kwargs):
    return importlib.import_module("slugkit").slugify(*args, **kwargs)


def test_accents_are_transliterated():
    assert same(_slugify("Crème Brûlée"), "creme-brulee")


def test_runs_collapse_to_one_separator():
    assert same(_slugify("a  --  b!!c"), "a-b-c")


def test_ends_are_stripped():
    assert same(_slugify("  --Hello, World!--  "), "hello-world")


def test_custom_separator_collapses():
    assert same(_slugify("Ünïcode   ROCKS", sep="_"), "unicode_rocks")


def test_no_letters_gives_empty():
    assert same(_slugify("!!! ???"), "")


def test_to_ascii_drops_non_latin():
    translit = importlib.import_module("slugkit.translit")
    assert same(translit.to_ascii("naïve 東京"), "naive ")
