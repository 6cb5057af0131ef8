import importlib

import pytest
from rlguard_checks import same


def _t():
    return importlib.import_module("todo")


def _fields(item):
    return (item.title, item.priority, list(item.tags), item.done)


def _store(*lines):
    store = _t().Store()
    for line in lines:
        store.add(line)
    return store


def test_parse_tags_and_priority():
    item = _t().parse_line("call  mum !3 #family #phone")
    assert same(_fields(item), ("call mum", 3, ["family", "phone"], False))


def test_parse_defaults():
    assert same(_fields(_t().parse_line("read book")), ("read book", 0, [], False))


def test_complete_exact_title_only():
    store = _store("pay rent", "pay rent late fee")
    store.complete("pay rent")
    assert same([item.done for item in store.items], [True, False])


def test_complete_unknown_raises():
    with pytest.raises(KeyError):
        _store("a").complete("b")


def test_select_done_false_and_tag():
    store = _store("a #x", "b #x", "c #y")
    store.complete("a")
    assert same([i.title for i in _t().select(store.items, done=False)], ["b", "c"])
    assert same([i.title for i in _t().select(store.items, tag="x", done=False)], ["b"])
    assert same([i.title for i in _t().select(store.items, done=True)], ["a"])
    assert same([i.title for i in _t().select(store.items)], ["a", "b", "c"])


def test_by_priority_highest_first_then_title():
    store = _store("zeta !1", "alpha !1", "mid !5", "low")
    assert same([i.title for i in _t().by_priority(store.items)], ["mid", "alpha", "zeta", "low"])
