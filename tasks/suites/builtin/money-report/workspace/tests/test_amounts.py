from reportgen import render


def test_render_lists_items():
    text = render([{"item": "coffee", "amount": "3"}])
    assert "coffee" in text
