from confparse import parse


def test_sections_and_types():
    text = "name = demo\n[server]\nport = 8080\ndebug = true\n"
    assert parse(text) == {"default": {"name": "demo"}, "server": {"port": 8080, "debug": True}}
