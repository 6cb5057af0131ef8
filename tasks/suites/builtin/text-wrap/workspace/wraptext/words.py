"""Splitting text into words."""


def words(text):
    return text.split()
