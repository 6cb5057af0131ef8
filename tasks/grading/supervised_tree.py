"""Who owns what in a ``pytest``-mode grading container: the grader's files and the test side are the
supervisor's uid's, the agent's files the agent's uid's.

The graded workspace (``pytest_workspace.grading_workspace_tar``: protected paths pristine, start-up
hooks dropped) is split in two archives:

* the **supervisor archive**, unpacked at ``/`` by the supervisor's uid before anything of the agent's
  is: every restored test file and test configuration file (mode 0644, read-only for the agent's uid),
  their directories and every directory above them (sticky and writable by all, 1777: the tests and
  the code under test may add files there, never change, remove or rename the supervisor's), an
  empty ``__pycache__`` owned by the supervisor in every directory that holds a restored module (no
  bytecode can be planted where a test module would load it), and the grader's own files under
  ``/tmp``;
* the **agent archive**, everything else of the final workspace, unpacked after it by the agent's uid,
  without the directories the supervisor already made.

The kernel then keeps the tests as grading restored them for the whole run, whatever the code under
test does: writes, renames, deletes, ``chmod`` and planted bytecode all fail with ``EACCES``/``EPERM``.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass

from tasks.testfiles import is_protected

MTIME = 1704067200
OPEN_DIR_MODE = 0o1777


@dataclass(frozen=True)
class SupervisedTree:
    """The two archives and what the supervisor holds."""

    supervisor_archive: bytes
    agent_archive: bytes
    restored_files: list[str]


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _dir(name: str, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, MTIME
    return info


def _file(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, MTIME
    return info, data


def split_graded_workspace(
    graded_tar: bytes, protected_extra: list[str], grader_dir: str, grader_files: dict[str, bytes]
) -> SupervisedTree:
    """Split ``graded_tar`` (see the module docstring); ``grader_dir`` is an absolute path under /tmp
    and ``grader_files`` its contents (name -> bytes)."""
    restored: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    agent: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with tarfile.open(fileobj=io.BytesIO(graded_tar)) as tar:
        for member in tar:
            data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if is_protected(member.name, protected_extra) and (member.isfile() or member.isdir()):
                restored[member.name] = (member, data)
            else:
                agent.append((member, data))
    supervisor_dirs = {parent for name in restored for parent in _parents(name)}
    supervisor_dirs |= {name for name, (info, _) in restored.items() if info.isdir()}
    module_dirs = {name.rpartition("/")[0] for name, (info, _) in restored.items() if name.endswith(".py")}
    caches = {f"{d}/__pycache__" if d else "__pycache__" for d in module_dirs}
    files = sorted(name for name, (info, _) in restored.items() if info.isfile())
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as dst:
        dst.addfile(_dir("workspace", OPEN_DIR_MODE))
        for name in sorted(supervisor_dirs | caches | set(files)):
            where = f"workspace/{name}"
            if name in caches and name not in restored:
                dst.addfile(_dir(where, 0o755))
            elif name in supervisor_dirs:
                dst.addfile(_dir(where, OPEN_DIR_MODE))
            else:
                info, data = restored[name]
                executable = 0o755 if info.mode & 0o111 else 0o644
                dst.addfile(*_as_file(where, data or b"", executable))
        root = grader_dir.strip("/")
        dst.addfile(_dir(root, 0o755))
        for name in sorted(grader_files):
            dst.addfile(*_as_file(f"{root}/{name}", grader_files[name], 0o644))
    agent_out = io.BytesIO()
    with tarfile.open(fileobj=agent_out, mode="w") as dst:
        for info, data in agent:
            if info.isdir() and (info.name in supervisor_dirs or info.name in caches):
                continue
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return SupervisedTree(out.getvalue(), agent_out.getvalue(), files)


def restored_files(graded_tar: bytes, protected_extra: list[str]) -> list[str]:
    """Workspace-relative names of the restored files ``split_graded_workspace`` hands the supervisor."""
    with tarfile.open(fileobj=io.BytesIO(graded_tar)) as tar:
        return sorted(m.name for m in tar if m.isfile() and is_protected(m.name, protected_extra))


def _as_file(name: str, data: bytes, mode: int) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info, payload = _file(name, data, mode)
    return info, io.BytesIO(payload)
