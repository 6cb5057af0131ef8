import importlib

from rlguard_checks import same


def _parse(text):
    return importlib.import_module("confparse").parse(text)


def test_blank_lines_are_ignored():
    assert same(_parse("\n\na = 1\n\n"), {"default": {"a": 1}})


def test_comments_are_ignored():
    text = "# top\n; also\n[s]\n   # indented\nb = off\n"
    assert same(_parse(text), {"default": {}, "s": {"b": False}})


def test_only_first_equals_splits():
    assert same(_parse("url = http://x/?a=1&b=2\n"), {"default": {"url": "http://x/?a=1&b=2"}})


def test_whitespace_is_stripped():
    assert same(_parse("[ web ]\n  host   =   example  \n"), {"default": {}, "web": {"host": "example"}})


def test_sections_repeat_and_merge():
    text = "[a]\nx = 1\n[b]\ny = 2\n[a]\nz = yes\n"
    assert same(_parse(text), {"default": {}, "a": {"x": 1, "z": True}, "b": {"y": 2}})
