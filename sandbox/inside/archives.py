"""The whole workspace in and out as a tar archive, by GNU tar run as the agent's uid.

In: the archive goes through a nameless temporary file, so tar's stdin never blocks the runner.
Out: the archive is read while tar writes it and refused past the cap; files the agent made
unreadable are skipped, not fatal. Standard library only.
"""

import os

from sandbox.inside.files import WORKSPACE
from sandbox.inside.processes import DEVNULL, DEVNULL_W, READ_CHUNK, kill_and_reap, read_capped, reap, spawn
from sandbox.inside.protocol import Refused, decode, encode


def nameless_file() -> int:
    """A read-write file no path reaches: ``O_TMPFILE`` in /tmp, else a memfd (gVisor's tmpfs of
    2022 has no ``O_TMPFILE``)."""
    try:
        return os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    except OSError:
        return os.memfd_create("rlguard-archive", os.MFD_CLOEXEC)


def put_tar(request: dict) -> dict:
    """Unpack the request's archive into /workspace (owners and modes of the archive ignored)."""
    data = decode(request["data"])
    # Through a nameless temporary file, not a pipe: tar's stdin then never blocks the runner.
    archive = nameless_file()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(archive, view) :]
        os.lseek(archive, 0, os.SEEK_SET)
        err_r, err_w = os.pipe()
        try:
            argv = ["tar", "-x", "--no-same-owner", "--no-same-permissions", "-C", WORKSPACE, "-f", "-"]
            pid = spawn(argv, archive, DEVNULL_W, err_w)
        finally:
            os.close(err_w)
        errors = read_capped(err_r, 4096)
        os.close(err_r)
    finally:
        os.close(archive)
    if reap(pid) != 0:
        raise Refused("invalid", "workspace archive rejected: " + errors.decode("utf-8", "replace"))
    return {}


def get_tar(request: dict) -> dict:
    """/workspace as a tar archive of at most ``request["max"]`` bytes."""
    limit = int(request["max"])
    out_r, out_w = os.pipe()
    try:
        # Unreadable files (``chmod 000``) are skipped, not fatal: the agent cannot make the export
        # fail and so keep its episode out of training; what it hid is simply not graded.
        argv = ["tar", "-c", "--ignore-failed-read", "-C", WORKSPACE, "-f", "-", "."]
        pid = spawn(argv, DEVNULL, out_w, DEVNULL_W)
    finally:
        os.close(out_w)
    chunks, size = [], 0
    try:
        while True:
            data = os.read(out_r, READ_CHUNK)
            if not data:
                break
            size += len(data)
            if size > limit:
                kill_and_reap(pid)
                raise Refused("too_large", f"workspace archive exceeds {limit} bytes")
            chunks.append(data)
    finally:
        os.close(out_r)
    if reap(pid) not in (0, 1):  # 1: a file changed while it was read
        raise Refused("error", "tar of the workspace failed")
    return {"data": encode(b"".join(chunks))}
