"""One line of text to an Item."""

from todo.model import Item


def parse_line(text):
    priority = 0
    words = []
    for word in text.split():
        if word.startswith("!"):
            priority = int(word[1:])
        else:
            words.append(word)
    return Item(title=" ".join(words), priority=priority)
