"""``rlguard tasks list|check|build|build-env|import swebench``: task suites.

A suite is named by a built-in name, a name registered in the state directory (``tasks build`` and
``tasks import`` register what they write; see ``tasks.suite_index``) or a directory. Caches live
under the state directory: ``tasks/build/<suite>`` (sdists, repositories, rows), ``tasks/envs``
(wheels), ``tasks/suites/<suite>`` (built suites).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rlguard.cli.output import bar, cell, console, group, line, print_json, spinner, table
from rlguard.cli.resources import engine_client, local_backend, resolve_suite, suite_index
from rlguard.settings import Settings, get_settings
from tasks.errors import TaskError

if TYPE_CHECKING:
    from tasks.realworld.build import SuiteBuild

BUILDABLE = ("realworld",)
SUITE_HELP = "A suite: a built-in name, a name built or imported here, or a directory"

tasks_app = group("Task suites: list, check, build, build environments, import.")
import_app = group("Import tasks from other formats.")
tasks_app.add_typer(import_app, name="import")


@tasks_app.command("list")
def tasks_list(
    suite: str | None = typer.Argument(None, help=f"{SUITE_HELP} (default: every suite known by name)"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """List tasks: their grading mode, horizon and expected tests.

    Without SUITE: the tasks of every suite known by name (built-in, built, imported).
    """
    from tasks.spec import load_suite

    settings = get_settings()
    suites = [resolve_suite(settings, suite)] if suite else suite_index(settings).all_dirs()
    rows = []
    for directory in suites:
        for task in load_suite(directory):
            expected = len(task.grading.fail_to_pass) + len(task.grading.pass_to_pass)
            rows.append(
                {"id": task.id, "mode": task.grading.mode, "horizon": task.horizon, "tests": expected}
            )
    if as_json:
        print_json(rows)
        return
    shown = table("task", "mode", "horizon", "expected tests")
    for row in rows:
        shown.add_row(cell(row["id"]), row["mode"], row["horizon"], str(row["tests"] or "-"))
    console().print(shown)


@tasks_app.command("check")
def tasks_check(
    suite: str = typer.Argument(..., help=SUITE_HELP),
    task: list[str] = typer.Option([], "--task", help="Only these task ids (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Check that a suite's tasks teach what they should.

    Every task loads, its solution scores 1.0 and passes the guard's patch review, and its
    untouched workspace scores less. The exit status is 2 when a task fails.
    """
    from guard.review import PatchReview, review_patch
    from guard.rules import RuleEngine
    from tasks.check import check_task
    from tasks.spec import load_suite

    settings = get_settings()
    tasks = _chosen(load_suite(resolve_suite(settings, suite)), task, suite)
    rules = RuleEngine.from_settings(settings.guard)

    def review(patch: str) -> PatchReview:
        return review_patch(patch, rules)

    async def run() -> list[dict[str, Any]]:
        rows = []
        async with local_backend(settings) as backend:
            with bar("checking") as progress:
                done = progress.add_task("checking", total=len(tasks))
                for one in tasks:
                    progress.update(done, description=one.id)
                    rows.append(
                        await check_task(
                            backend,
                            one,
                            image=settings.sandbox.image,
                            limits=settings.sandbox.limits,
                            review=review,
                        )
                    )
                    progress.advance(done)
        return rows

    rows = asyncio.run(run())
    if as_json:
        print_json(rows)
    else:
        shown = table("task", "mode", "solution", "untouched", "ok", "problem")
        for row in rows:
            shown.add_row(
                cell(row["task"]),
                row["mode"],
                str(row.get("solution_reward", "-")),
                str(row.get("untouched_reward", "-")),
                "yes" if row["ok"] else "NO",
                cell(row["problem"]),
            )
        console().print(shown)
    bad = [row["task"] for row in rows if not row["ok"]]
    if bad:
        raise TaskError(f"{len(bad)} of {len(rows)} task(s) failed the check: {', '.join(bad)}")


def _chosen(tasks: list[Any], wanted: list[str], suite: str) -> list[Any]:
    """The tasks named by ``--task`` (id or suite/id), or all; an unknown id is one error."""
    if not wanted:
        return tasks
    by_id = {t.task_id: t for t in tasks} | {t.id: t for t in tasks}
    unknown = [w for w in wanted if w not in by_id]
    if unknown:
        known = ", ".join(sorted(t.task_id for t in tasks)[:20])
        raise TaskError(f"no task {unknown[0]!r} in {suite}; known: {known}")
    return list({by_id[w].id: by_id[w] for w in wanted}.values())


@tasks_app.command("build")
def tasks_build(
    name: str = typer.Argument(..., help=f"The suite to build: {', '.join(BUILDABLE)}"),
    out: Path | None = typer.Option(
        None, "--out", help="Suite directory to write (default: STATE_DIR/tasks/suites/NAME)"
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the recipes did not change"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON"),
) -> None:
    """Build a shipped suite from its recipes.

    The projects' sdists are fetched with pip, their ground truth computed, and the suite imported
    and registered, so every command finds it by its directory's name.
    """
    if name not in BUILDABLE:
        raise TaskError(f"no buildable suite {name!r}; known: {', '.join(BUILDABLE)}")
    settings = get_settings()
    index = suite_index(settings)
    suite_dir = (out or index.built_dir(name)).resolve()
    index.check_name(suite_dir)
    with spinner(f"building the {name} suite") as phase:
        result = asyncio.run(build_realworld_suite(settings, suite_dir, force, log=phase))
    registered = index.register(result.suite_dir)
    summary = {
        "suite": registered,
        "suite_dir": str(result.suite_dir),
        "rows": str(result.rows_path),
        "repos": str(result.repos_dir),
        "tasks": len(result.instance_ids),
        "cached": result.cached,
        "seconds": round(result.seconds, 1),
    }
    if as_json:
        print_json(summary, indent=None)
        return
    state = "up to date" if result.cached else f"built in {result.seconds:.0f} s"
    line(f"suite {registered} {state}: {len(result.instance_ids)} tasks in {result.suite_dir}")
    line(f"rows: {result.rows_path}; repositories: {result.repos_dir}")


@tasks_app.command("build-env")
def tasks_build_env(
    suite: str = typer.Argument(..., help=SUITE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the images as JSON"),
) -> None:
    """Build the images of a suite's task environments.

    Each distinct environment is built once, in offline containers, and cached by its recipe.
    """
    from sandbox.image import ensure_image
    from tasks.environments import build_environments
    from tasks.spec import load_suite

    settings = get_settings()
    tasks = load_suite(resolve_suite(settings, suite))
    client = engine_client(settings)
    wanted = []
    with spinner(f"building the environments of {suite}") as phase:
        for task in tasks:
            base = task.base_image(settings.sandbox.image)
            if task.environment is not None and not task.environment.empty:
                phase(f"base image {base}")
                ensure_image(client, base)
            wanted.append((task.environment, base))
        results = build_environments(client, wanted, settings.state_dir / "tasks" / "envs", log=phase)
    if as_json:
        print_json(
            [{"image": r.image, "cached": r.cached, "seconds": round(r.seconds, 1)} for r in results],
            indent=None,
        )
        return
    if not results:
        line(f"no task of {suite} names an environment")
    for result in results:
        line(f"{result.image}: {'cached' if result.cached else f'built in {result.seconds:.1f} s'}")


@import_app.command("swebench")
def import_swebench_command(
    rows: Path = typer.Argument(..., help="SWE-bench-format rows (JSONL or a JSON list)"),
    repos: Path = typer.Option(..., "--repos", help="Local clones at DIR/<owner>__<name>"),
    out: Path = typer.Option(
        ..., "--out", help="Suite directory to write (created); its name names the suite"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON"),
) -> None:
    """Import SWE-bench-format rows as a suite.

    One task per row, graded in pytest mode (resolved: every FAIL_TO_PASS and PASS_TO_PASS test
    passes). The suite is registered under its directory's name.
    """
    from tasks.swebench import import_swebench

    if not rows.is_file():
        raise TaskError(f"{rows}: no such rows file")
    index = suite_index(get_settings())
    index.check_name(out)
    with spinner(f"importing {rows.name}"):
        ids = import_swebench(rows, repos, out)
    name = index.register(out)
    if as_json:
        print_json({"suite": name, "suite_dir": str(out.resolve()), "tasks": ids}, indent=None)
        return
    line(f"imported {len(ids)} task(s) into the suite {name} ({out}): {', '.join(ids)}")


async def build_realworld_suite(
    settings: Settings, suite_dir: Path, force: bool = False, log: Any = None
) -> SuiteBuild:
    """Build (or find up to date) the shipped real-world suite in ``suite_dir`` on the configured engine."""
    from sandbox.docker_backend import DockerBackend
    from sandbox.image import ensure_image
    from tasks.realworld.build import build_realworld

    client = engine_client(settings)
    base = ensure_image(client, settings.sandbox.image or None)
    backend = DockerBackend.from_settings(settings)
    state = settings.state_dir / "tasks"
    options = {"log": log} if log is not None else {}
    try:
        return await build_realworld(
            state / "build" / suite_dir.name,
            suite_dir,
            backend,
            client,
            base,
            env_cache_dir=state / "envs",
            force=force,
            **options,
        )
    finally:
        await backend.close()


def register(app: typer.Typer) -> None:
    """Add ``rlguard tasks``."""
    app.add_typer(tasks_app, name="tasks")
