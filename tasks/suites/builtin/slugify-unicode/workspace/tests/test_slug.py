from slugkit import slugify


def test_simple_words():
    assert slugify("hello world") == "hello-world"


def test_custom_separator():
    assert slugify("hello world", sep="_") == "hello_world"
