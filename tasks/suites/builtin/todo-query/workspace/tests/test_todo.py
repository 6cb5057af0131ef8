from todo import Store


def test_add_keeps_title_and_priority():
    store = Store()
    item = store.add("buy milk !2")
    assert item.title == "buy milk"
    assert item.priority == 2
