"""Reproducible tar archives of directories on the host: the same tree gives the same archive.

A workspace travels into a sandbox, and from the host into grading (``tasks.workspaces``), as a tar
archive. Owner, group and mtime are fixed, so an archive depends only on the tree's names, contents,
modes and links; nothing is read through a link (``tasks.safefiles``).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

from tasks.safefiles import TreeLimits, read_file, walk

# What a final workspace on the host may hold (``rlguard grade --workspace``, a built repository):
# links are kept as links (never followed); devices and FIFOs are refused.
WORKSPACE_TAR_LIMITS = TreeLimits(file_bytes=256 * 1024 * 1024, total_bytes=256 * 1024 * 1024)
FIXED_MTIME = 1704067200  # 2024-01-01: archives do not change with the time they were made


def tar_of_files(files: dict[str, bytes]) -> bytes:
    """A reproducible tar of ``files`` (archive path -> contents), each a plain 0644 file."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, FIXED_MTIME
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def tar_directory(directory: Path) -> bytes:
    """A reproducible tar of ``directory``'s contents (sorted, fixed owner uid 1000, fixed mtime).

    Nothing is read through a link: links are archived as links, files are read with
    ``tasks.safefiles`` (a device or FIFO is refused)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        entries = walk(directory, links=lambda _n, _t: True, limits=WORKSPACE_TAR_LIMITS, skip=frozenset())
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.uid = info.gid = 1000
            info.uname = info.gname = "agent"
            info.mtime = FIXED_MTIME
            if entry.kind == "file":
                data = read_file(directory, entry.name, WORKSPACE_TAR_LIMITS.file_bytes)
                st = os.lstat(directory / entry.name)
                info.size, info.mode = len(data), stat.S_IMODE(st.st_mode)
                tar.addfile(info, io.BytesIO(data))
            elif entry.kind == "link":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
                tar.addfile(info)
            else:
                info.type, info.mode = tarfile.DIRTYPE, stat.S_IMODE(os.lstat(directory / entry.name).st_mode)
                tar.addfile(info)
    return buf.getvalue()
