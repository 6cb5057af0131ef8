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
    hidden = task.hidden_files()  # regular files only, never read through a link (tasks.safefiles)
    for directory in sorted({parent for file in hidden for parent in _parents(file)}):
        members[directory] = (_member(directory, tarfile.DIRTYPE, 0o755), None)
    for name, data in hidden.items():
        info = _member(name, tarfile.REGTYPE, 0o644)
        info.size = len(data)
        members[name] = (info, data)
    return members


def _member(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = kind, mode
    info.uid = info.gid = 1000
    info.uname = info.gname = "agent"
    info.mtime = 1704067200
    return info


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


# What Python's path finder loads as a module: source, and compiled extensions of any ABI tag
# (``x.cpython-311-x86_64-linux-gnu.so``, ``x.abi3.so``, ``x.so``). Bytecode is dropped before this.
_MODULE_SUFFIXES = (".py", ".so", ".pyd")


def _top_level_modules(names: list[str], roots: list[str], links: frozenset[str] = frozenset()) -> set[str]:
    """Importable top-level names directly under ``roots``.

    A name is importable when it is a module file (``x.py``, ``x.<abi>.so``), a package whose
    ``__init__`` is source or a compiled extension (``x/__init__.py``, ``x/__init__.abi3.so``), a
    namespace portion (a directory holding a module file directly: it extends a namespace package
    of the same name), or a link in ``links`` (``x -> some/package``, which Python follows).
    """
    found: set[str] = set()
    for name in names:
        for root in roots:
            prefix = f"{root}/" if root else ""
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :].split("/")
            if len(rest) == 1 and (rest[0].endswith(_MODULE_SUFFIXES) or name in links):
                found.add(rest[0].split(".", 1)[0])
            elif len(rest) == 2 and rest[1].endswith(_MODULE_SUFFIXES):
                found.add(rest[0])  # x/__init__.py, x/__init__.abi3.so, or a portion x/y.py
    return {name for name in found if name.isidentifier()}


def added_modules(task: Task, graded_workspace_tar: bytes, pristine: Members | None = None) -> list[str]:
    """Top-level modules of the graded workspace that the pristine task does not have.

    The launcher refuses to run when one of them would shadow a module the image provides (a new
    ``hypothesis.py`` or ``difflib.py`` in /workspace would replace what the tests or pytest import).
    """
    roots = ["", *(p.strip("/") for p in task.grading.pythonpath)]
    with tarfile.open(fileobj=io.BytesIO(graded_workspace_tar)) as tar:
        members_final = [m for m in tar if m.isfile() or m.issym()]
    final = [m.name for m in members_final]
    final_links = frozenset(m.name for m in members_final if m.issym())
    members = pristine_members(task) if pristine is None else pristine
    files = [name for name, (info, _) in members.items() if not info.isdir()]
    pristine_links = frozenset(name for name, (info, _) in members.items() if info.issym())
    added = _top_level_modules(final, roots, final_links) - _top_level_modules(files, roots, pristine_links)
    return sorted(added)
