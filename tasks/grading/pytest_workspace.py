"""The workspace ``pytest`` mode grades: the agent's files, with every test and test-infrastructure
file put back as the task shipped it and every file that would load into pytest or Python dropped.

Which paths are protected and which dropped: ``tasks.testfiles``.

A protected path holds exactly its pristine content, or nothing when the pristine task has none
(the agent's new ``conftest.py`` or ``pytest.ini`` is dropped). Bytecode (``__pycache__``, ``*.pyc``)
and ``.pytest_cache`` are dropped everywhere: a planted ``.pyc`` with the right header would be
loaded in place of a restored test. A non-directory the agent put where a protected file's parent
directory belongs (a symlink ``tests -> elsewhere``) is dropped too, so restored files land where
pytest looks for them.
"""

from __future__ import annotations

import io
import tarfile
from typing import TYPE_CHECKING

from tasks.errors import TaskError
from tasks.testfiles import clean_name, is_dropped, is_protected

if TYPE_CHECKING:
    from tasks.spec import Task

MAX_GRADING_WORKSPACE_BYTES = 256 * 1024 * 1024


Members = dict[str, tuple[tarfile.TarInfo, bytes | None]]


def pristine_members(task: Task) -> Members:
    """The task's pristine tree (workspace at base plus ``hidden/``, the test patch) by member name."""
    members: Members = {}
    with tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as tar:
        for member in tar:
            name = clean_name(member.name)
            if name is None:
                continue
            data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            member.name = name
            members[name] = (member, data)
    if task.hidden_dir.is_dir():
        for path in sorted(task.hidden_dir.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            name = path.relative_to(task.hidden_dir).as_posix()
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 1000
            info.uname = info.gname = "agent"
            info.mtime = 1704067200
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                members[name] = (info, None)
            else:
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                members[name] = (info, data)
    return members


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def grading_workspace_tar(task: Task, final_workspace_tar: bytes, pristine: Members | None = None) -> bytes:
    """The final workspace with protected paths pristine and dropped paths gone (module docstring)."""
    extra = task.protected_extra()
    pristine = pristine_members(task) if pristine is None else pristine
    restored = {name: entry for name, entry in pristine.items() if is_protected(name, extra)}
    needed_dirs = {parent for name in restored for parent in _parents(name)}
    out = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=out, mode="w") as dst:
        try:
            src = tarfile.open(fileobj=io.BytesIO(final_workspace_tar))  # noqa: SIM115 (closed below)
        except tarfile.TarError as exc:
            raise TaskError(f"final workspace is not a tar archive: {exc}") from exc
        with src:
            for member in src:
                name = clean_name(member.name)
                if name is None or is_dropped(name) or is_protected(name, extra):
                    continue
                if not (member.isfile() or member.isdir() or member.issym()):
                    continue  # devices, fifos and hard links have no business in a graded workspace
                if name in needed_dirs and not member.isdir():
                    continue
                total += member.size
                if total > MAX_GRADING_WORKSPACE_BYTES:
                    raise TaskError(f"final workspace is over {MAX_GRADING_WORKSPACE_BYTES} bytes")
                member.name = name
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name in sorted(needed_dirs):
            if name not in restored:
                info = tarfile.TarInfo(name)
                info.type, info.mode, info.uid, info.gid, info.mtime = (
                    tarfile.DIRTYPE,
                    0o755,
                    1000,
                    1000,
                    1704067200,
                )
                dst.addfile(info)
        for _name, (info, data) in restored.items():
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _top_level_modules(names: list[str], roots: list[str]) -> set[str]:
    """Importable top-level names directly under ``roots`` (``x.py``, ``x/__init__.py``, extensions)."""
    found: set[str] = set()
    for name in names:
        for root in roots:
            prefix = f"{root}/" if root else ""
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :].split("/")
            if len(rest) == 1 and rest[0].endswith((".py", ".so", ".pyd")):
                found.add(rest[0].split(".", 1)[0])
            elif len(rest) == 2 and rest[1] == "__init__.py":
                found.add(rest[0])
    return found


def added_modules(task: Task, graded_workspace_tar: bytes, pristine: Members | None = None) -> list[str]:
    """Top-level modules of the graded workspace that the pristine task does not have.

    The launcher refuses to run when one of them would shadow a module the image provides (a new
    ``hypothesis.py`` or ``difflib.py`` in /workspace would replace what the tests or pytest import).
    """
    roots = ["", *(p.strip("/") for p in task.grading.pythonpath)]
    with tarfile.open(fileobj=io.BytesIO(graded_workspace_tar)) as tar:
        final = [m.name for m in tar if m.isfile() or m.issym()]
    members = pristine_members(task) if pristine is None else pristine
    files = [name for name, (info, _) in members.items() if not info.isdir()]
    return sorted(_top_level_modules(final, roots) - _top_level_modules(files, roots))
