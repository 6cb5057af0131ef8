"""The final patch: a unified diff of the agent's final workspace against the task's base.

Stored with the grading result so the top layer can have the guard review it (``guard.review``)
and so a reviewer sees in one place what the agent changed. ``.git``, bytecode and pytest's cache
are left out; binary files are named, not shown; the text is capped.
"""

from __future__ import annotations

import difflib
import io
import tarfile

from tasks.testfiles import clean_name, is_dropped

MAX_PATCH_CHARS = 2 * 1024 * 1024
MAX_FILE_BYTES = 1024 * 1024


def _files(archive: bytes) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            name = clean_name(member.name)
            if name is None or name.split("/")[0] == ".git" or is_dropped(name):
                continue
            if member.isfile():
                files[name] = tar.extractfile(member).read(MAX_FILE_BYTES + 1)  # type: ignore[union-attr]
            elif member.issym():
                files[name] = f"symlink -> {member.linkname}\n".encode()
    return files


def _text(data: bytes) -> list[str] | None:
    if len(data) > MAX_FILE_BYTES or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def workspace_patch(base_tar: bytes, final_tar: bytes) -> tuple[str, bool]:
    """``(patch, truncated)``: ``git apply``-style diff (``a/``, ``b/``, ``/dev/null``) of final vs base."""
    base, final = _files(base_tar), _files(final_tar)
    chunks: list[str] = []
    size = 0
    for name in sorted(set(base) | set(final)):
        old, new = base.get(name), final.get(name)
        if old == new:
            continue
        old_lines, new_lines = _text(old or b""), _text(new or b"")
        if old_lines is None or new_lines is None:
            chunk = f"diff --git a/{name} b/{name}\nBinary files a/{name} and b/{name} differ\n"
        else:
            fromfile = f"a/{name}" if old is not None else "/dev/null"
            tofile = f"b/{name}" if new is not None else "/dev/null"
            body = "".join(
                line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                for line in difflib.unified_diff(old_lines, new_lines, fromfile, tofile)
            )
            chunk = f"diff --git a/{name} b/{name}\n{body}"
        size += len(chunk)
        if size > MAX_PATCH_CHARS:
            return "".join(chunks), True
        chunks.append(chunk)
    return "".join(chunks), False
