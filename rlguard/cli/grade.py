"""``rlguard grade``: grade one workspace or patch against a task, as an episode's ``finish`` does.

The task's grading mode runs in a fresh container; when it yields a final patch (``pytest`` mode)
the guard reviews it and the configured policy (``RLGUARD_GATEWAY__PATCH_REVIEW``) applies.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer

from rlguard.cli.output import line, print_json, spinner
from rlguard.cli.resources import local_backend, resolve_suite
from rlguard.cli.tasks import SUITE_HELP
from rlguard.errors import RlguardError
from rlguard.settings import get_settings

OUTCOMES = ("passed", "failed", "error", "skipped")


def summary(reward: float, details: dict[str, Any]) -> dict[str, Any]:
    """The printed shape: reward, resolved, reason, mode, per-test outcomes (+ the patch review)."""
    tests = {k: (v if v in OUTCOMES else "error") for k, v in (details.get("tests") or {}).items()}
    out = {
        "reward": reward,
        "resolved": bool(details.get("resolved", reward == 1.0)),
        "reason": details.get("reason"),
        "mode": details.get("mode"),
        "tests": tests,
    }
    if "patch_review" in details:
        out["patch_review"] = details["patch_review"]
    return out


def grade(
    suite: str = typer.Option(..., "--suite", help=SUITE_HELP),
    task_id: str = typer.Option(..., "--task", help="Task id within the suite"),
    workspace: Path | None = typer.Option(None, "--workspace", help="Final workspace directory"),
    patch: Path | None = typer.Option(None, "--patch", help="Unified diff applied to the task's workspace"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Grade a final workspace or patch against a task.

    Grading runs as an episode's finish does: the task's mode in a fresh container, then the
    guard's review of the final patch. The exit status is 0 whenever grading ran, whatever the
    reward.
    """
    from guard.pipeline import Guard
    from guard.review_policy import apply_patch_review
    from tasks.grading.modes import grade_task
    from tasks.spec import load_suite
    from tasks.workspaces import directory_workspace, patched_workspace

    if (workspace is None) == (patch is None):
        raise RlguardError("give exactly one of --workspace DIR and --patch FILE")
    if workspace is not None and not workspace.is_dir():
        raise RlguardError(f"--workspace {workspace}: not a directory")
    settings = get_settings()
    tasks = {task.task_id: task for task in load_suite(resolve_suite(settings, suite))}
    task = tasks.get(task_id.split("/")[-1])
    if task is None:
        raise RlguardError(f"no task {task_id!r} in {suite}; known: {', '.join(sorted(tasks)[:20])}")
    if patch is not None:
        try:
            archive = patched_workspace(task, patch.read_text())
        except OSError as exc:
            raise RlguardError(f"--patch {patch}: cannot read: {exc.strerror}") from None
    else:
        archive = directory_workspace(workspace)  # type: ignore[arg-type]

    async def run(phase: Any) -> tuple[float, dict[str, Any]]:
        async with local_backend(settings) as backend:
            phase(f"grading {task.id} ({task.grading.mode} mode) in a fresh container")
            result = await grade_task(
                backend, task, archive, image=settings.sandbox.image, limits=settings.sandbox.limits
            )
        reward, details = result.reward, dict(result.details)
        if isinstance(details.get("patch"), str):
            phase("reviewing the final patch")
            guard = Guard.from_settings(settings.guard)
            material = result.changes if result.changes is not None else details["patch"]
            try:
                review = guard.review_patch(material, task.protected_paths)
            finally:
                await guard.aclose()
            reward, details = apply_patch_review(reward, details, review, settings.gateway.patch_review)
        return reward, details

    with spinner(f"grading {task.id}") as phase:
        reward, details = asyncio.run(run(phase))
    out = summary(reward, details)
    if as_json:
        print_json(out)
        return
    counts = {o: sum(v == o for v in out["tests"].values()) for o in OUTCOMES}
    line(f"{task.id}: reward {reward} ({out['reason']}, mode {out['mode']}); tests {counts}")
    for finding in out.get("patch_review", {}).get("findings") or []:
        line(f"  patch review: {finding['rule_id']} ({finding['action']}) in {finding['path']}")


def register(app: typer.Typer) -> None:
    """Add ``rlguard grade``."""
    app.command("grade")(grade)
