"""``rlguard tasks build`` and ``rlguard tasks build-env``: shipped suites and per-task environment images.

Added to the ``rlguard tasks`` group by ``tasks.cli``. Imports happen inside the commands so
``rlguard --help`` stays fast.
Caches live under the state directory (``RLGUARD_STATE_DIR``): ``tasks/build/<suite>`` (sdists,
repositories, rows), ``tasks/envs`` (wheels), ``tasks/suites/<suite>`` (the built suite).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from tasks.realworld.build import SuiteBuild

BUILDABLE = ("realworld",)


def _state_dir() -> Path:
    from store.settings import StoreEnv

    return StoreEnv().state_dir


def default_suite_dir(name: str) -> Path:
    """Where ``rlguard tasks build NAME`` puts the suite unless told otherwise."""
    return _state_dir() / "tasks" / "suites" / name


def add_commands(tasks_app: typer.Typer) -> None:
    """Add ``build`` and ``build-env`` to the ``rlguard tasks`` group."""

    @tasks_app.command("build")
    def build_command(
        name: str = typer.Argument(..., help=f"The suite to build: {', '.join(BUILDABLE)}"),
        out: Path | None = typer.Option(
            None, "--out", help="Suite directory to write (default: STATE_DIR/tasks/suites/NAME)"
        ),
        force: bool = typer.Option(False, "--force", help="Rebuild even when the recipes did not change"),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON"),
    ) -> None:
        """Build a shipped suite from its recipes (sdists fetched with pip), then import it."""
        from tasks.errors import TaskError

        if name not in BUILDABLE:
            raise TaskError(f"no buildable suite {name!r}; known: {', '.join(BUILDABLE)}")
        suite_dir = (out or default_suite_dir(name)).resolve()
        result = asyncio.run(build_realworld_suite(suite_dir, force))
        summary = {
            "suite_dir": str(result.suite_dir),
            "rows": str(result.rows_path),
            "repos": str(result.repos_dir),
            "tasks": len(result.instance_ids),
            "cached": result.cached,
            "seconds": round(result.seconds, 1),
        }
        if as_json:
            typer.echo(json.dumps(summary))
        else:
            state = "up to date" if result.cached else "built"
            typer.echo(f"suite {name} {state}: {len(result.instance_ids)} tasks in {result.suite_dir}")
            typer.echo(f"rows: {result.rows_path}; repositories: {result.repos_dir}")

    @tasks_app.command("build-env")
    def build_env_command(
        suite: str = typer.Argument(..., help="A built-in suite name or a suite directory"),
        as_json: bool = typer.Option(False, "--json", help="Print the images as JSON"),
    ) -> None:
        """Build the image of every task environment of SUITE (offline containers, cached by recipe)."""
        from sandbox.cli import engine_client
        from sandbox.image import ensure_image
        from sandbox.settings import SandboxEnv
        from tasks.environments import build_environments
        from tasks.spec import load_suite

        tasks = load_suite(suite)
        configured = SandboxEnv().sandbox.image
        client = engine_client()
        wanted = []
        for task in tasks:
            base = task.base_image(configured)
            if task.environment is not None and not task.environment.empty:
                ensure_image(client, base)
            wanted.append((task.environment, base))
        results = build_environments(client, wanted, _state_dir() / "tasks" / "envs")
        if as_json:
            typer.echo(
                json.dumps(
                    [{"image": r.image, "cached": r.cached, "seconds": round(r.seconds, 1)} for r in results]
                )
            )
            return
        if not results:
            typer.echo(f"no task of {suite} names an environment")
        for result in results:
            typer.echo(f"{result.image}: {'cached' if result.cached else f'built in {result.seconds:.1f} s'}")


async def build_realworld_suite(suite_dir: Path, force: bool = False) -> SuiteBuild:
    """Build (or find up to date) the shipped real-world suite in ``suite_dir`` on the configured engine."""
    from sandbox.cli import engine_client
    from sandbox.docker_backend import DockerBackend
    from sandbox.image import ensure_image
    from sandbox.settings import SandboxEnv
    from tasks.realworld.build import build_realworld

    env = SandboxEnv()
    client = engine_client()
    base = ensure_image(client, env.sandbox.image or None)
    backend = DockerBackend.from_settings(env)
    state = _state_dir() / "tasks"
    try:
        return await build_realworld(
            state / "build" / suite_dir.name,
            suite_dir,
            backend,
            client,
            base,
            env_cache_dir=state / "envs",
            force=force,
        )
    finally:
        await backend.close()
