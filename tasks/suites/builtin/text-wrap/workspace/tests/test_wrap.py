from wraptext import wrap


def test_short_text_one_line():
    assert wrap("hello world", 20) == ["hello world"]
