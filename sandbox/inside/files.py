"""The file tools: read, write and list inside /workspace, checked on the object opened, not a name.

Only the spelling of a path is checked before opening (``lexical``); where the name really leads
(symlinks, renames racing the call) is checked on the opened descriptor itself (``inside``): the
object must be on the workspace's own file system and the kernel's name for it must lie below
/workspace. Every use then goes through that descriptor, so no racer can lead a file operation out
of /workspace. Standard library only.
"""

import errno
import os
import stat

from sandbox.inside.processes import READ_CHUNK
from sandbox.inside.protocol import Refused, decode, encode

WORKSPACE = "/workspace"
MAX_LIST_ENTRIES = 10000


def lexical(path: str) -> str:
    """``path`` made absolute and normalised; refused unless it names /workspace or lies below it.

    Only the spelling is checked here; where the name really leads (symlinks, renames racing the
    call) is checked on the opened object itself (:func:`inside`).
    """
    path = str(path)
    if "\0" in path:
        raise Refused("invalid", "path contains a NUL byte")
    full = os.path.normpath(path if path.startswith("/") else os.path.join(WORKSPACE, path))
    full = "/" + full.lstrip("/")
    if full != WORKSPACE and not full.startswith(WORKSPACE + "/"):
        raise Refused("path_escape", f"path {path!r} leaves /workspace")
    return full


def inside(fd: int, shown: str) -> os.stat_result:
    """``fd``'s status, if the object it names is in /workspace (else it is closed and refused).

    Checked on the open object, not on a name, so no rename or symlink swap can slip in between
    the check and the use: the object must be on the workspace's own file system (a tmpfs mounted
    at /workspace, nothing else of it is mounted anywhere) and the kernel's name for it must lie
    below /workspace.
    """
    info = os.fstat(fd)
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        where = ""
    if info.st_dev != os.stat(WORKSPACE).st_dev or not (
        where == WORKSPACE or where.startswith(WORKSPACE + "/")
    ):
        os.close(fd)
        raise Refused("path_escape", f"path {shown!r} leaves /workspace")
    return info


def open_inside(full: str, shown: str, directory: bool = False) -> int:
    """An ``O_PATH`` descriptor of what ``full`` leads to (symlinks followed), refused outside, and
    refused unless it is a directory (``directory``) or a regular file."""
    try:
        fd = os.open(full, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise Refused("not_found", f"no such {'directory' if directory else 'file'}: {shown}") from None
    except OSError as exc:
        raise Refused("invalid", f"cannot open {shown}: {exc.strerror}") from None
    info = inside(fd, shown)
    if directory and not stat.S_ISDIR(info.st_mode):
        os.close(fd)
        raise Refused("invalid", f"not a directory: {shown}")
    if not directory and not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Refused(
            "invalid", f"{'is a directory' if stat.S_ISDIR(info.st_mode) else 'not a regular file'}: {shown}"
        )
    return fd


def reopen(fd: int, flags: int) -> int:
    """Open the very object ``fd`` names (no path lookup again) with real access ``flags``."""
    try:
        return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC | os.O_NONBLOCK)
    finally:
        os.close(fd)


def ensure_directory(full: str, shown: str) -> int:
    """An ``O_PATH`` descriptor of directory ``full``, creating missing components one by one.

    Every component is opened relative to the checked descriptor of its parent and checked in
    turn, so a directory is only ever created inside /workspace whatever a racer renames.
    """
    fd = os.open(WORKSPACE, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in full[len(WORKSPACE) :].split("/"):
        if not part:
            continue
        try:
            try:
                child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError as exc:
            raise Refused("invalid", f"cannot create the directories of {shown}: {exc.strerror}") from None
        finally:
            os.close(fd)
        fd = child
        inside(fd, shown)
    return fd


def read_file(request: dict) -> dict:
    """Up to ``request["max"]`` bytes of a regular file in /workspace."""
    limit = int(request["max"])
    shown = str(request["path"])
    fd = open_inside(lexical(shown), shown)
    try:
        fd = reopen(fd, os.O_RDONLY)
    except OSError as exc:
        raise Refused("invalid", f"cannot open {shown}: {exc.strerror}") from None
    chunks, size = [], 0
    try:
        while size < limit:
            data = os.read(fd, min(READ_CHUNK, limit - size))
            if not data:
                break
            chunks.append(data)
            size += len(data)
    finally:
        os.close(fd)
    return {"data": encode(b"".join(chunks))}


def write_file(request: dict) -> dict:
    """Replace (or create) a regular file in /workspace, its directories created as needed."""
    shown = str(request["path"])
    full = lexical(shown)
    if full == WORKSPACE:
        raise Refused("invalid", "cannot write to the workspace directory itself")
    data = decode(request["data"])
    parent = ensure_directory(os.path.dirname(full), shown)
    name = os.path.basename(full)
    try:
        try:
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o644,
                dir_fd=parent,
            )
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            # The name is a symlink: write through it only if it leads to a file in /workspace.
            fd = os.open(name, os.O_PATH | os.O_CLOEXEC, dir_fd=parent)
            inside(fd, shown)
            fd = reopen(fd, os.O_WRONLY)
    except Refused:
        raise
    except FileNotFoundError:
        raise Refused("not_found", f"no such file: {shown}") from None
    except OSError as exc:
        raise Refused("invalid", f"cannot open {shown}: {exc.strerror}") from None
    finally:
        os.close(parent)
    try:
        info = inside(fd, shown)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("invalid", f"not a regular file: {shown}")
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return {}


def list_dir(request: dict) -> dict:
    """A directory's entries in /workspace: [name, kind, size], sorted, at most MAX_LIST_ENTRIES."""
    shown = str(request["path"])
    fd = open_inside(lexical(shown), shown, directory=True)
    try:
        fd = reopen(fd, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise Refused("invalid", f"cannot list {shown}: {exc.strerror}") from None
    entries = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    kind = "symlink"
                elif stat.S_ISDIR(info.st_mode):
                    kind = "dir"
                elif stat.S_ISREG(info.st_mode):
                    kind = "file"
                else:
                    kind = "other"
                name = entry.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                entries.append([name, kind, info.st_size])
                if len(entries) >= MAX_LIST_ENTRIES:
                    break
    finally:
        os.close(fd)
    entries.sort()
    return {"entries": entries}
