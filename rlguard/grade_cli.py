"""``rlguard grade``: grade one workspace or patch against a task, as an episode's ``finish`` does.

The task's grading mode runs in a fresh container; when it yields a final patch (``pytest`` mode)
the guard reviews it and the configured policy (``RLGUARD_GATEWAY__PATCH_REVIEW``) applies.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer

from rlguard.errors import RlguardError

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


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``rlguard grade``."""

    @app.command("grade")
    def grade_command(
        suite: str = typer.Option(..., "--suite", help="A built-in suite name or a suite directory"),
        task_id: str = typer.Option(..., "--task", help="Task id within the suite"),
        workspace: Path | None = typer.Option(None, "--workspace", help="Final workspace directory"),
        patch: Path | None = typer.Option(
            None, "--patch", help="Unified diff applied to the task's workspace"
        ),
        as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    ) -> None:
        """Grade a final workspace (or a patch) against a task; exit 0 whenever grading ran."""
        from guard.pipeline import Guard
        from rlguard.patch_review import apply_patch_review
        from rlguard.settings import get_settings
        from tasks.cli import local_backend
        from tasks.grading.modes import grade_task
        from tasks.spec import load_suite
        from tasks.workspaces import directory_workspace, patched_workspace

        if (workspace is None) == (patch is None):
            raise RlguardError("give exactly one of --workspace DIR and --patch FILE")
        tasks = {task.task_id: task for task in load_suite(suite)}
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
        settings = get_settings()

        async def run() -> tuple[float, dict[str, Any]]:
            async with local_backend(settings) as backend:
                result = await grade_task(
                    backend, task, archive, image=settings.sandbox.image, limits=settings.sandbox.limits
                )
            reward, details = result.reward, dict(result.details)
            if isinstance(details.get("patch"), str):
                guard = Guard.from_settings(settings.guard)
                try:
                    review = guard.review_patch(details["patch"], task.protected_paths)
                finally:
                    await guard.aclose()
                reward, details = apply_patch_review(reward, details, review, settings.gateway.patch_review)
            return reward, details

        reward, details = asyncio.run(run())
        out = summary(reward, details)
        if as_json:
            typer.echo(json.dumps(out, indent=2, sort_keys=True))
            return
        counts = {o: sum(v == o for v in out["tests"].values()) for o in OUTCOMES}
        typer.echo(f"{task.id}: reward {reward} ({out['reason']}, mode {out['mode']}); tests {counts}")
        if out.get("patch_review", {}).get("findings"):
            for finding in out["patch_review"]["findings"]:
                typer.echo(f"  patch review: {finding['rule_id']} ({finding['action']}) in {finding['path']}")
