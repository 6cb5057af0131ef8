"""The final patch, two ways: a readable unified diff of the agent's final workspace against the task's
base (stored with the grading result and shown in the audit), and the changed files themselves
(``guard.review.ChangedFile``: what the guard's review reads, never stored).

The diff leaves out ``.git``, bytecode and pytest's cache, names binary files, lists code files first
(padding cannot push a module out of view) and is capped. The changed files keep what the diff
cannot: every changed path whatever its encoding or size (content cut at the review's per-file cap,
the full size kept), symlinks with where they resolve in the final tree, and importable files and
links under ``.git/``.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import tarfile
from dataclasses import dataclass

from guard.review import CODE_SUFFIXES, COMPILED_SUFFIXES, MAX_FILE_BYTES, STARTUP_SUFFIXES, ChangedFile
from tasks.testfiles import clean_name, is_dropped

MAX_PATCH_CHARS = 2 * 1024 * 1024
MAX_DIFF_FILE_BYTES = 1024 * 1024
MAX_SYMLINK_HOPS = 40
_CHUNK = 1 << 20


@dataclass(frozen=True)
class _Entry:
    kind: str  # file | dir | symlink | other
    head: bytes = b""  # the first MAX_FILE_BYTES + 1 bytes of a file
    digest: str = ""
    size: int = 0
    target: str = ""


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> _Entry:
    handle = tar.extractfile(member)
    digest = hashlib.sha256()
    head = bytearray()
    if handle is not None:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            if len(head) <= MAX_FILE_BYTES:
                head += chunk[: MAX_FILE_BYTES + 1 - len(head)]
    return _Entry("file", bytes(head), digest.hexdigest(), member.size)


def _sourceless(name: str) -> bool:
    """Bytecode outside ``__pycache__``: a module Python imports without a source (grading drops it,
    the review names it); what ``__pycache__`` holds is the interpreter's own cache of a source."""
    return name.endswith((".pyc", ".pyo")) and "__pycache__" not in name.split("/")


def _git_kept(name: str, member: tarfile.TarInfo) -> bool:
    """Under .git/ only what could run: links and importable files (git's own data cannot)."""
    return member.issym() or name.endswith(CODE_SUFFIXES + COMPILED_SUFFIXES + STARTUP_SUFFIXES)


def _tree(archive: bytes) -> dict[str, _Entry]:
    entries: dict[str, _Entry] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            name = clean_name(member.name)
            if name is None or (is_dropped(name) and not _sourceless(name)):
                continue
            if name.split("/")[0] == ".git" and not _git_kept(name, member):
                continue
            if member.isfile():
                entries[name] = _read(tar, member)
            elif member.issym():
                entries[name] = _Entry("symlink", target=member.linkname)
            elif member.isdir():
                entries[name] = _Entry("dir")
            else:
                entries[name] = _Entry("other")
    return entries


def _resolve(tree: dict[str, _Entry], name: str) -> tuple[str | None, bool]:
    """Where the symlink ``name`` leads in the final tree: ``(workspace-relative path or None,
    escapes)``. Links met on the way (in any component) are followed, ``MAX_SYMLINK_HOPS`` at most."""
    parts = name.split("/")
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return None, True
            done.pop()
            continue
        done.append(part)
        entry = tree.get("/".join(done))
        if entry is not None and entry.kind == "symlink":
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                return None, False
            target = entry.target
            if target.startswith("/"):
                if target != "/workspace" and not target.startswith("/workspace/"):
                    return None, True
                done = []
                target = target[len("/workspace") :].lstrip("/")
            else:
                done.pop()
            parts = [p for p in target.split("/") if p] + parts
    resolved = "/".join(done)
    return (resolved if resolved and resolved in tree else None), False


def workspace_changes(base_tar: bytes, final_tar: bytes) -> tuple[ChangedFile, ...]:
    """Every path whose final state differs from the base (files, links, removals), for the review."""
    base, final = _tree(base_tar), _tree(final_tar)
    changes: list[ChangedFile] = []
    for name in sorted(set(base) | set(final)):
        old, new = base.get(name), final.get(name)
        if old == new or (new is not None and new.kind in ("dir", "other")):
            continue
        old_data = old.head if old is not None and old.kind == "file" else None
        if new is None:
            changes.append(ChangedFile(name, "removed", base=old_data))
        elif new.kind == "file":
            changes.append(ChangedFile(name, "file", new.head, old_data, new.size))
        else:
            resolved, escapes = _resolve(final, name)
            data, size = None, 0
            if resolved is not None and final[resolved].kind == "file":
                data, size = final[resolved].head, final[resolved].size
            changes.append(ChangedFile(name, "symlink", data, old_data, size, new.target, resolved, escapes))
    return tuple(changes)


def _text(data: bytes | None, size: int) -> list[str] | None:
    if data is None:
        return []
    if size > MAX_DIFF_FILE_BYTES or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _code_first(name: str) -> tuple[int, str]:
    return (0 if name.endswith(CODE_SUFFIXES) else 1, name)


def workspace_patch(base_tar: bytes, final_tar: bytes) -> tuple[str, bool]:
    """``(patch, truncated)``: ``git apply``-style diff (``a/``, ``b/``, ``/dev/null``) of final vs base,
    code files first."""
    base, final = _tree(base_tar), _tree(final_tar)
    chunks: list[str] = []
    size = 0
    names = [n for n in set(base) | set(final) if n.split("/")[0] != ".git"]
    for name in sorted(names, key=_code_first):
        old, new = base.get(name), final.get(name)
        if old == new:
            continue
        chunk = _file_diff(name, old, new)
        if chunk is None:
            continue
        size += len(chunk)
        if size > MAX_PATCH_CHARS:
            return "".join(chunks), True
        chunks.append(chunk)
    return "".join(chunks), False


def _as_text(entry: _Entry | None) -> tuple[bytes | None, int]:
    if entry is None:
        return None, 0
    if entry.kind == "symlink":
        text = f"symlink -> {entry.target}\n".encode()
        return text, len(text)
    if entry.kind == "file":
        return entry.head, entry.size
    return None, 0


def _file_diff(name: str, old: _Entry | None, new: _Entry | None) -> str | None:
    if (old is not None and old.kind in ("dir", "other")) or (
        new is not None and new.kind in ("dir", "other")
    ):
        return None
    old_data, old_size = _as_text(old)
    new_data, new_size = _as_text(new)
    old_lines, new_lines = _text(old_data, old_size), _text(new_data, new_size)
    if old_lines is None or new_lines is None:
        return f"diff --git a/{name} b/{name}\nBinary files a/{name} and b/{name} differ\n"
    fromfile = f"a/{name}" if old is not None else "/dev/null"
    tofile = f"b/{name}" if new is not None else "/dev/null"
    body = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(old_lines, new_lines, fromfile, tofile)
    )
    return f"diff --git a/{name} b/{name}\n{body}"
