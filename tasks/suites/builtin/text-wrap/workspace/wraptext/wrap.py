"""Packing words into lines."""

from wraptext.words import words


def wrap(text, width):
    lines, current = [], ""
    for word in words(text):
        if len(word) > width:
            continue
        candidate = f"{current} {word}" if current else word
        if len(candidate) <= width + 1:
            current = candidate
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width):
    return "\n".join(wrap(text, width))
