"""``rlguard tasks ...``: list, check, build suites, import SWE-bench rows; ``rlguard bench grading``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sandbox.settings import SandboxEnv
from tasks import build_cli
from tasks.errors import TaskError

console = Console()


@contextlib.asynccontextmanager
async def local_backend(env: SandboxEnv) -> AsyncIterator[Any]:
    """A Docker backend for the configured instance and engine, closed after use."""
    from sandbox.docker_backend import DockerBackend

    backend = DockerBackend.from_settings(env)
    try:
        yield backend
    finally:
        await backend.close()


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``rlguard tasks`` and ``rlguard bench grading``."""
    tasks_app = typer.Typer(
        help="Task suites: list, check, import, build, environments.", no_args_is_help=True
    )
    import_app = typer.Typer(help="Import tasks from other formats.", no_args_is_help=True)
    tasks_app.add_typer(import_app, name="import")
    app.add_typer(tasks_app, name="tasks")
    build_cli.add_commands(tasks_app)  # build, build-env

    @tasks_app.command("list")
    def tasks_list(
        suite: str = typer.Argument("builtin", help="A built-in suite name or a suite directory"),
        as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    ) -> None:
        """The tasks of a suite: id, grading mode, horizon, expected tests."""
        from tasks.spec import load_suite

        rows = []
        for task in load_suite(suite):
            expected = len(task.grading.fail_to_pass) + len(task.grading.pass_to_pass)
            rows.append(
                {"id": task.id, "mode": task.grading.mode, "horizon": task.horizon, "tests": expected}
            )
        if as_json:
            _print_json(rows)
            return
        table = Table("task", "mode", "horizon", "expected tests")
        for row in rows:
            table.add_row(row["id"], row["mode"], row["horizon"], str(row["tests"] or "-"))
        console.print(table)

    @tasks_app.command("check")
    def tasks_check(
        suite: str = typer.Argument(..., help="A built-in suite name or a suite directory"),
        as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    ) -> None:
        """Every task loads, its solution scores 1.0 (and passes the guard's patch review), untouched less."""
        from guard.review import PatchReview, review_patch
        from guard.rules import RuleEngine
        from guard.settings import GuardEnv
        from tasks.check import check_suite
        from tasks.spec import load_suite

        tasks = load_suite(suite)

        env = SandboxEnv()
        guard = GuardEnv().guard

        def review(patch: str) -> PatchReview:
            return review_patch(patch, RuleEngine.from_settings(guard))

        async def run() -> list[dict[str, Any]]:
            async with local_backend(env) as backend:
                return await check_suite(
                    backend, tasks, image=env.sandbox.image, limits=env.sandbox.limits, review=review
                )

        rows = asyncio.run(run())
        if as_json:
            _print_json(rows)
        else:
            table = Table("task", "mode", "solution", "untouched", "ok", "problem")
            for row in rows:
                table.add_row(
                    row["task"],
                    row["mode"],
                    str(row.get("solution_reward", "-")),
                    str(row.get("untouched_reward", "-")),
                    "yes" if row["ok"] else "NO",
                    row["problem"],
                )
            console.print(table)
        bad = [row["task"] for row in rows if not row["ok"]]
        if bad:
            raise TaskError(f"{len(bad)} of {len(rows)} task(s) failed the check: {', '.join(bad)}")

    @import_app.command("swebench")
    def import_swebench_command(
        rows: Path = typer.Argument(..., help="SWE-bench-format rows (JSONL or a JSON list)"),
        repos: Path = typer.Option(..., "--repos", help="Local clones at DIR/<owner>__<name>"),
        out: Path = typer.Option(..., "--out", help="Suite directory to write (created)"),
    ) -> None:
        """One task per row, graded in pytest mode (resolved = every FAIL_TO_PASS and PASS_TO_PASS passes)."""
        from tasks.swebench import import_swebench

        ids = import_swebench(rows, repos, out)
        typer.echo(f"imported {len(ids)} task(s) into {out}: {', '.join(ids)}")

    @bench.command("grading")
    def bench_grading_command(
        suite: str | None = typer.Option(
            None, "--suite", help="Suite to measure (default: the shipped inflection mini suite)"
        ),
        repeats: int = typer.Option(3, "--repeats", min=1, help="Runs per task (median kept)"),
        as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    ) -> None:
        """pytest-mode grading vs plain pytest of the same tests, same image (target: <= 1.3x)."""
        import tempfile

        from tasks.check import bench_grading
        from tasks.minisuite import build_rows
        from tasks.spec import load_suite
        from tasks.swebench import import_swebench

        env = SandboxEnv()

        async def run(tasks: list[Any]) -> dict[str, Any]:
            async with local_backend(env) as backend:
                return await bench_grading(
                    backend, tasks, repeats=repeats, image=env.sandbox.image, limits=env.sandbox.limits
                )

        with tempfile.TemporaryDirectory(prefix="rlguard-bench-grading-") as tmp:
            if suite is None:
                rows_path, repos_dir = build_rows(Path(tmp))
                import_swebench(rows_path, repos_dir, Path(tmp) / "minisuite")
                suite = str(Path(tmp) / "minisuite")
            report = asyncio.run(run(load_suite(suite)))
        if as_json:
            _print_json(report)
            return
        table = Table("metric", "value")
        for key in ("tasks", "repeats", "grade_s_p50", "plain_pytest_s_p50", "grade_vs_plain"):
            table.add_row(key, str(report[key]))
        console.print(table)
