"""Items kept in insertion order."""

from todo.parse import parse_line


class Store:
    def __init__(self):
        self.items = []

    def add(self, line):
        item = parse_line(line)
        self.items.append(item)
        return item

    def complete(self, title):
        matches = [item for item in self.items if item.title == title]
        if not matches:
            raise KeyError(title)
        for item in matches:
            item.done = True
