"""Reading task trees on the host without following a symbolic link, within size limits.

A task directory is data that may come from anywhere: an imported row's ``test_patch`` can create
``tests/fixture.txt -> /proc/self/environ`` or ``tests/blob.bin -> /dev/zero``, and an authored suite
can hold the same. Whatever in ``tasks/`` reads ``hidden/``, ``solution/``, a branch overlay or a
patched tree goes through here, so a link is never read through (not even stat'ed through), a
device or FIFO is never opened, and a file or tree over its limit is refused before it is read:

* every path component below the tree's root is opened relative to its parent's descriptor with
  ``O_NOFOLLOW`` (a link swapped in between a check and a read is refused, not followed);
* a file is opened ``O_NONBLOCK`` (a FIFO cannot hang the open) and must be a regular file by
  ``fstat`` of the descriptor that is then read;
* anything else (a link, device, FIFO, socket) is refused with one line naming the path.

The tree's root itself is opened with ``O_NOFOLLOW`` too: a suite may live behind a link chosen by
its operator, but ``hidden`` inside a task may not be one.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tasks.errors import TaskError

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_TREE_BYTES = 256 * 1024 * 1024
MAX_TREE_FILES = 100_000
MAX_DEPTH = 64
SKIPPED_DIRS = frozenset({"__pycache__"})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class TreeLimits:
    """How much of a tree may be read: per file, in all, and how many files."""

    file_bytes: int = MAX_FILE_BYTES
    total_bytes: int = MAX_TREE_BYTES
    files: int = MAX_TREE_FILES


DEFAULT_LIMITS = TreeLimits()


def kind_of(mode: int) -> str:
    """A file type in words, for refusals."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _parts(name: str) -> list[str]:
    """The components of a tree-relative name; refuses absolute names and ``..``."""
    path = PurePosixPath(name)
    parts = [p for p in path.parts if p not in ("", ".")]
    if path.is_absolute() or ".." in parts or not parts:
        raise TaskError(f"{name!r}: not a path inside the tree")
    return parts


def _refusal(root: Path, name: str, exc: OSError) -> TaskError:
    where = root / name if name else root
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        try:  # say what is there (lstat: the link itself, not its target)
            mode = os.lstat(where).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):
            return TaskError(f"{where}: a symbolic link; only regular files inside the tree are read")
        return TaskError(f"{where}: a symbolic link; only regular files inside the tree are read")
    if exc.errno == errno.ENOTDIR:
        return TaskError(f"{where}: a path component is not a directory (a link or a file)")
    if exc.errno == errno.ENOENT:
        return TaskError(f"{where}: no such file")
    return TaskError(f"{where}: cannot read: {exc.strerror}")


@contextmanager
def _dir_fd(root: Path, parts: list[str]) -> Iterator[int]:
    """A descriptor of ``root/parts...``, every component opened without following a link."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _refusal(root, "", exc) from None
    try:
        for i, part in enumerate(parts):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refusal(root, "/".join(parts[: i + 1]), exc) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def lstat_in(root: Path, name: str) -> os.stat_result | None:
    """``lstat`` of ``root/name`` without following a link on the way; None when absent."""
    parts = _parts(name)
    try:
        with _dir_fd(root, parts[:-1]) as fd:
            return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except TaskError:
        return None  # a parent is missing, a link or a file: there is no such regular path
    except OSError:
        return None


def is_regular_file(root: Path, name: str) -> bool:
    """Whether ``root/name`` is a regular file reached through real directories only."""
    st = lstat_in(root, name)
    return st is not None and stat.S_ISREG(st.st_mode)


def is_real_dir(root: Path, name: str) -> bool:
    """Whether ``root/name`` is a directory reached through real directories only (not a link)."""
    st = lstat_in(root, name)
    return st is not None and stat.S_ISDIR(st.st_mode)


def read_file(root: Path, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``root/name``; a TaskError for anything else or over ``max_bytes``."""
    parts = _parts(name)
    with _dir_fd(root, parts[:-1]) as dir_fd:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(root, name, exc) from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TaskError(f"{root / name}: {kind_of(st.st_mode)}; only regular files are read")
        if st.st_size > max_bytes:
            raise TaskError(f"{root / name}: {st.st_size} bytes, over the {max_bytes}-byte limit")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TaskError(f"{root / name}: over the {max_bytes}-byte limit")
    return data


@dataclass(frozen=True)
class Entry:
    """One member of a checked tree: its relative name, type (``file``/``dir``/``link``) and size."""

    name: str
    kind: str
    size: int
    target: str = ""


LinkPolicy = Callable[[str, str], bool]


def refuse_links(_name: str, _target: str) -> bool:
    """The default: a tree holds no links at all."""
    return False


def links_inside(name: str, target: str) -> bool:
    """A relative link whose target, resolved lexically from its directory, stays in the tree."""
    if not target or target.startswith("/"):
        return False
    parts: list[str] = []
    for part in [*PurePosixPath(name).parent.parts, *PurePosixPath(target).parts]:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return False
            parts.pop()
        else:
            parts.append(part)
    return bool(parts)


def walk(
    root: Path,
    *,
    links: LinkPolicy = refuse_links,
    limits: TreeLimits = DEFAULT_LIMITS,
    skip: frozenset[str] = SKIPPED_DIRS,
) -> list[Entry]:
    """Every member of the tree under ``root`` (sorted, directories before their contents).

    Only directories, regular files and the links ``links(name, target)`` accepts are allowed;
    anything else is a TaskError naming it. Sizes are checked against ``limits`` from ``lstat``
    (nothing is read here). Directories named in ``skip`` are left out with their contents.
    """
    entries: list[Entry] = []
    total = 0

    def visit(fd: int, prefix: str, depth: int) -> None:
        nonlocal total
        if depth > MAX_DEPTH:
            raise TaskError(f"{root / prefix}: nested deeper than {MAX_DEPTH} directories")
        with os.scandir(fd) as scan:
            names = sorted(entry.name for entry in scan)
        for base in names:
            name = f"{prefix}{base}"
            try:
                st = os.stat(base, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                raise _refusal(root, name, exc) from None
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                if base in skip:
                    continue
                entries.append(Entry(name, "dir", 0))
                try:
                    child = os.open(base, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(root, name, exc) from None
                try:
                    visit(child, name + "/", depth + 1)
                finally:
                    os.close(child)
            elif stat.S_ISREG(mode):
                if st.st_size > limits.file_bytes:
                    raise TaskError(
                        f"{root / name}: {st.st_size} bytes, over the {limits.file_bytes}-byte limit"
                    )
                total += st.st_size
                if total > limits.total_bytes:
                    raise TaskError(f"{root}: over the {limits.total_bytes}-byte limit in all")
                entries.append(Entry(name, "file", st.st_size))
            elif stat.S_ISLNK(mode):
                target = os.readlink(base, dir_fd=fd)
                if not links(name, target):
                    raise TaskError(
                        f"{root / name}: a symbolic link to {target!r}; "
                        "only regular files inside the tree are allowed"
                    )
                entries.append(Entry(name, "link", 0, target))
            else:
                raise TaskError(
                    f"{root / name}: {kind_of(mode)}; only regular files and directories are allowed"
                )
            if len(entries) > limits.files:
                raise TaskError(f"{root}: more than {limits.files} files")

    with _dir_fd(root, []) as fd:
        visit(fd, "", 0)
    return entries


def regular_files(root: Path, *, limits: TreeLimits = DEFAULT_LIMITS) -> list[str]:
    """Names of the regular files under ``root`` (links, devices, FIFOs refused), sorted."""
    return [e.name for e in walk(root, limits=limits) if e.kind == "file"]


def read_tree(root: Path, *, limits: TreeLimits = DEFAULT_LIMITS) -> dict[str, bytes]:
    """``{relative name: bytes}`` of every regular file under ``root``, within ``limits``."""
    out: dict[str, bytes] = {}
    total = 0
    for name in regular_files(root, limits=limits):
        data = read_file(root, name, limits.file_bytes)
        total += len(data)
        if total > limits.total_bytes:  # a file grown since the walk
            raise TaskError(f"{root}: over the {limits.total_bytes}-byte limit in all")
        out[name] = data
    return out


def present(root: Path) -> bool:
    """Whether anything is at ``root`` (a link counts, so that reading it is refused, not skipped)."""
    return os.path.lexists(root)
