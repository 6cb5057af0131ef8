"""Unified diffs read per file: what a ``patch``/``git apply`` in a command, or a patch the agent
submits for review (``guard.review``), removes from and adds to each file."""

from __future__ import annotations

from guard.paths import absolute


def patch_hunks(diff: str, cwd: str) -> list[tuple[str, str, str, bool]]:
    """(absolute target, removed text, added text, created) per file of a unified diff; a file
    whose old side is /dev/null is created, not edited."""
    out: list[tuple[str, str, str, bool]] = []
    target: str | None = None
    created = False
    old: list[str] = []
    new: list[str] = []
    for line in diff.splitlines():
        if line.startswith("--- "):
            if target is not None:
                out.append((target, "\n".join(old), "\n".join(new), created))
            target, old, new = None, [], []
            created = line[4:].split("\t", 1)[0].strip() == "/dev/null"
        elif line.startswith("+++ "):
            name = line[4:].split("\t", 1)[0].strip()
            name = name[2:] if name.startswith(("a/", "b/")) else name
            target = absolute(name, cwd) if name != "/dev/null" else None
        elif line.startswith("@@"):
            continue
        elif target is not None and line.startswith("-"):
            old.append(line[1:])
        elif target is not None and line.startswith("+"):
            new.append(line[1:])
    if target is not None:
        out.append((target, "\n".join(old), "\n".join(new), created))
    return out
