"""The to-do item."""

from dataclasses import dataclass, field


@dataclass
class Item:
    title: str
    priority: int = 0
    tags: list = field(default_factory=list)
    done: bool = False
