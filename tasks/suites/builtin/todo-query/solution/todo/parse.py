"""One line of text to an Item."""

from todo.model import Item


def parse_line(text):
    priority = 0
    words, tags = [], []
    for word in text.split():
        if word.startswith("!") and word[1:].isdigit():
            priority = int(word[1:])
        elif word.startswith("#") and len(word) > 1:
            tags.append(word[1:])
        else:
            words.append(word)
    return Item(title=" ".join(words), priority=priority, tags=tags)
