"""What a task's own code does when graded: the baseline the monitor and the second opinion need.

Two questions have no answer without looking at the task itself:

* which run-time events its code under test causes legitimately (``six.exec_`` takes its caller's
  frame; a parser opens the fixture a test hands it; a pytest plugin project patches pytest): the
  monitor findings of grading the **pristine** workspace and the **reference solution**, by kind and
  phase (``monitor_policy.baseline_key``);
* which of the second opinion's tests ``isolated`` mode runs faithfully: those that pass there with
  the reference solution.

``ensure_calibration`` grades both once (three containers, at the same time) and keeps the answer
on disk by content: the task's files, grading spec and image, and the grader's own code. Until a
task has one, its monitor findings count without a baseline and its second opinion only lists.
``rlguard tasks check`` and the first grading of a task compute it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.grading.result import GradeResult
    from tasks.spec import Task

log = logging.getLogger(__name__)

VERSION = "1"
_MEMORY: dict[str, Calibration] = {}
_LOCKS: dict[str, asyncio.Lock] = {}
_INSIDE = Path(__file__).resolve().parent / "inside"


@dataclass(frozen=True)
class Calibration:
    """One task's baseline (finding keys) and the second opinion's faithful tests."""

    baseline: frozenset[str]
    runnable: frozenset[str]
    has_solution: bool

    def to_json(self) -> str:
        return json.dumps(
            {
                "baseline": sorted(self.baseline),
                "runnable": sorted(self.runnable),
                "has_solution": self.has_solution,
            }
        )


def calibration_key(task: Task, image: str = "") -> str:
    """A hash of everything the calibration depends on."""
    digest = hashlib.sha256(f"{VERSION}\0{task.resolved_image(image)}\0".encode())
    digest.update(task.workspace_tar())
    digest.update(task.grading.model_dump_json().encode())
    for folder in (task.hidden_dir, task.solution_dir):
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    digest.update(f"{path.relative_to(task.root)}\0".encode() + path.read_bytes())
    for path in sorted(_INSIDE.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _cache_file(key: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rlguard" / "grading-calibration" / f"{key}.json"


def cached(task: Task, image: str = "") -> Calibration | None:
    """The task's calibration if one was computed (memory, then disk); never computes."""
    key = calibration_key(task, image)
    found = _MEMORY.get(key)
    if found is not None:
        return found
    try:
        raw = json.loads(_cache_file(key).read_text())
        found = Calibration(frozenset(raw["baseline"]), frozenset(raw["runnable"]), bool(raw["has_solution"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    _MEMORY[key] = found
    return found


async def ensure_calibration(
    backend: SandboxBackend,
    task: Task,
    raw_run: Callable[..., Awaitable[GradeResult]],
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> Calibration:
    """The task's calibration, computed now if it has none: the pristine and reference workspaces
    graded by ``raw_run`` (``pytest`` mode with the monitor, nothing judged), the reference in
    ``isolated`` mode for the second opinion."""
    key = await asyncio.to_thread(calibration_key, task, image)  # hashes the task's files: off the loop
    async with _LOCKS.setdefault(key, asyncio.Lock()):  # episodes finishing at once calibrate once
        found = await asyncio.to_thread(cached, task, image)
        if found is not None:
            return found
        return await _calibrate(backend, task, raw_run, key, image=image, limits=limits)


async def _calibrate(
    backend: SandboxBackend,
    task: Task,
    raw_run: Callable[..., Awaitable[GradeResult]],
    key: str,
    *,
    image: str,
    limits: SandboxLimits | None,
) -> Calibration:
    from tasks.grading.monitor_policy import baseline_key
    from tasks.grading.second_opinion import isolated_opinion
    from tasks.workspaces import solution_workspace

    pristine = task.workspace_tar()
    has_solution = bool(task.solution_files())
    runs = [raw_run(backend, task, pristine, image=image, limits=limits)]
    if has_solution:
        gold = solution_workspace(task)
        runs.append(raw_run(backend, task, gold, image=image, limits=limits))
        runs.append(isolated_opinion(backend, task, gold, image=image, limits=limits))
    results = await asyncio.gather(*runs)
    baseline = {
        baseline_key(finding)
        for result in results[:2]
        for finding in (result.details.get("monitor") or {}).get("findings", [])
    }
    runnable: frozenset[str] = frozenset()
    if has_solution:
        opinion = results[2]
        runnable = frozenset(n for n, outcome in opinion.outcomes.items() if outcome == "passed")
    calibration = Calibration(frozenset(baseline), runnable, has_solution)
    _MEMORY[key] = calibration
    path = _cache_file(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(calibration.to_json())
        tmp.replace(path)
    except OSError:
        log.warning("cannot cache the grading calibration in %s", path)
    return calibration
