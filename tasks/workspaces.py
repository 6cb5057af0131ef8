"""Final workspaces to grade, made on the host: the task's solution, a patch, or a directory.

``rlguard grade`` and ``rlguard tasks check`` grade what an episode's ``finish`` would: an archive
of ``/workspace``. These build one from the pristine task (its git repository included) plus the
reference solution or a unified diff (applied with ``git apply``, as an agent's patch would be).
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.archive import tar_directory
from tasks.errors import TaskError

if TYPE_CHECKING:
    from tasks.spec import Task

MAX_PATCH_BYTES = 16 * 1024 * 1024


def overlay_tar(archive: bytes, files: dict[str, str]) -> bytes:
    """``archive`` with ``files`` (workspace-relative path -> text) written over it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            if member.name in files:
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, 1000, 1000
            info.mtime = 1704067200
            dst.addfile(info, io.BytesIO(data))
    return out.getvalue()


def solution_workspace(task: Task) -> bytes:
    """The initial workspace with the reference solution's files in place."""
    return overlay_tar(task.workspace_tar(), task.solution_files())


def patched_workspace(task: Task, patch_text: str) -> bytes:
    """The initial workspace with ``patch_text`` applied by ``git apply`` (a clear error if it fails)."""
    if len(patch_text.encode()) > MAX_PATCH_BYTES:
        raise TaskError(f"patch is over {MAX_PATCH_BYTES} bytes")
    if not patch_text.strip():
        return task.workspace_tar()  # an empty diff changes nothing (``git apply`` would refuse it)
    with tempfile.TemporaryDirectory(prefix="rlguard-patch-") as tmp:
        work = Path(tmp) / "workspace"
        work.mkdir()
        with tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as tar:
            tar.extractall(work, filter="data")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
        result = subprocess.run(
            ["git", "apply", "--allow-empty", "--whitespace=nowarn", "-"],
            cwd=work,
            input=patch_text.encode(),
            env=env,
            capture_output=True,
            timeout=120,
        )
        if result.returncode != 0:
            error = result.stderr.decode()[-500:].strip()
            raise TaskError(f"the patch does not apply to {task.id}: {error}")
        return tar_directory(work)


def directory_workspace(directory: Path) -> bytes:
    """A directory on the host as the final workspace."""
    if not directory.is_dir():
        raise TaskError(f"--workspace {directory}: not a directory")
    return tar_directory(directory)
