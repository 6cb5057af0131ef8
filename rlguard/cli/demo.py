"""``rlguard demo``: the main job on embedded defaults (SQLite, the local Docker engine).

Three steps, each living in its own package and only called from this thin command:

1. the sandbox: a project's tests in a hardened sandbox, then a table of what it refuses;
2. episodes: the built-in suite (and two real-world tasks) played honestly and by a reward hacker
   (a scripted policy scored by the tiny model) through the gateway: guard, decoys, tamper-proof
   grading, compaction, store;
3. training: one PPO update (learned critic, token-level GAE) on the tiny model from those episodes.

RLGUARD_DATABASE_URL chooses the database; ``rlguard export`` afterwards yields the episodes. With
``--json`` the tables and notes go to stderr and one JSON document of every step goes to stdout.
"""

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from rlguard.cli.output import err_console, print_json, spinner
from rlguard.errors import RlguardError
from rlguard.settings import Settings, get_settings


async def _sandbox_step(settings: Settings, console: Console) -> dict[str, Any]:
    from sandbox.base import SandboxError
    from sandbox.docker_backend import DockerBackend
    from sandbox.showcase import print_report, run_showcase, showcase_summary

    try:
        backend = DockerBackend.from_settings(settings)
        try:
            with spinner("running the project's tests and the probes in a sandbox"):
                report = await run_showcase(backend)
        finally:
            await backend.close()
    except SandboxError as exc:
        raise RlguardError(str(exc)) from None
    print_report(report, console)
    return showcase_summary(report)


# Real-world tasks the demo plays beside the builtin suite: a real historical regression of parse
# (its issue #57) and an injected one in inflection, each graded by the project's own test file.
DEMO_REALWORLD_TASKS = ("r1chardj0n3s__parse-2", "jpvanhal__inflection-1")


def _realworld_suite(settings: Settings, console: Console) -> Path:
    """Build (first run: sdists fetched with pip, about a minute) or reuse the real-world suite,
    registered by name like any suite ``rlguard tasks build`` makes."""
    from rlguard.cli.resources import suite_index
    from rlguard.cli.tasks import build_realworld_suite

    index = suite_index(settings)
    with spinner("building the real-world suite") as phase:
        result = asyncio.run(build_realworld_suite(settings, index.built_dir("realworld"), log=phase))
    index.register(result.suite_dir)
    state = "up to date" if result.cached else f"built in {result.seconds:.0f} s"
    console.print(f"real-world suite: {len(result.instance_ids)} tasks, {state} ({result.suite_dir})")
    return result.suite_dir


def _episodes_step(
    settings: Settings, concurrency: int, realworld: Path | None, console: Console
) -> dict[str, Any]:
    from rlguard.demo import demo_summary, print_demo_report, run_demo_rollouts
    from tasks.spec import load_suite

    suites, tasks = ("builtin",), None
    if realworld is not None:
        suites = ("builtin", str(realworld))
        tasks = [task.id for task in load_suite("builtin")]
        tasks += [f"{realworld.name}/{task_id}" for task_id in DEMO_REALWORLD_TASKS]
    report = run_demo_rollouts(settings, concurrency=concurrency, tasks=tasks, suites=suites)
    print_demo_report(report, console)
    return demo_summary(report)


def _training_step(settings: Settings, max_episodes: int) -> dict | None:
    from rollout.tinymodel import default_tiny_model_dir, ensure_tiny_model
    from trainer.train import run_ppo_update

    out_dir = settings.state_dir / "runs" / time.strftime("demo-%Y%m%d-%H%M%S")
    with spinner("one PPO update on the tiny model"):
        model = ensure_tiny_model(default_tiny_model_dir(settings.state_dir))
        return run_ppo_update(settings.resolved_database_url, model, out_dir, max_episodes=max_episodes)


def _finite(values: dict | None) -> dict | None:
    """Metrics with NaN and infinities as null, so ``--json`` prints standard JSON."""
    if values is None:
        return None
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}


def _redacted(url: str) -> str:
    from store.engine import redact

    return redact(url)


def register(app: typer.Typer) -> None:
    """Add ``rlguard demo``."""

    @app.command("demo")
    def demo(
        concurrency: int = typer.Option(8, "--concurrency", min=1, help="Episodes at once"),
        skip_sandbox: bool = typer.Option(False, "--skip-sandbox", help="Skip the sandbox showcase step"),
        skip_training: bool = typer.Option(False, "--skip-training", help="Skip the PPO update step"),
        skip_realworld: bool = typer.Option(
            False, "--skip-realworld", help="Play the builtin suite only (no real-world tasks)"
        ),
        as_json: bool = typer.Option(
            False, "--json", help="Print every step's results as one JSON document (tables go to stderr)"
        ),
    ) -> None:
        """The demo: a sandbox, guarded episodes, one PPO update.

        Three steps on embedded defaults (SQLite, the local Docker engine): a project's tests in a
        hardened sandbox and what it refuses; the built-in tasks (and two real-world ones) played
        honestly and by a reward hacker through the guard; one PPO update on those episodes.
        """
        from transformers.utils import logging as hf_logging

        from rlguard.cli.resources import check_engine_and_database, engine_client
        from sandbox.image import ensure_image

        hf_logging.disable_progress_bar()  # the demo draws its own progress; per-load bars are noise
        console = err_console() if as_json else Console()
        started = time.monotonic()
        settings = get_settings()
        check_engine_and_database(settings)
        with spinner("the sandbox image"):
            ensure_image(engine_client(settings))
        result: dict[str, Any] = {"sandbox": None, "episodes": None, "training": None}
        if not skip_sandbox:
            console.rule("[bold]1. Sandbox")
            result["sandbox"] = asyncio.run(_sandbox_step(settings, console))
            if not result["sandbox"]["ok"]:
                raise RlguardError("the sandbox step of the demo failed (see above)")
            console.print(f"[dim]sandbox step: {time.monotonic() - started:.0f} s[/]")
        console.rule("[bold]2. Episodes through the guard")
        step_started = time.monotonic()
        realworld = None if skip_realworld else _realworld_suite(settings, console)
        result["episodes"] = _episodes_step(settings, concurrency, realworld, console)
        totals = result["episodes"]["totals"]
        console.print(f"[dim]episodes step: {time.monotonic() - step_started:.0f} s[/]")
        if totals.get("episodes", 0) == totals.get("errors", 0):
            raise RlguardError("every demo episode failed; see the errors above")
        if not skip_training:
            console.rule("[bold]3. One PPO update on the tiny model")
            step_started = time.monotonic()
            update = _training_step(settings, max_episodes=totals["episodes"])
            result["training"] = _finite(update)
            if update is None or update.get("step") is None:
                console.print("no trainable sub-trajectories were found; no update was made")
            else:
                shown = {k: v for k, v in update.items() if isinstance(v, int | float)}
                for key in sorted(shown):
                    console.print(f"  {key:<32} {shown[key]:.4g}")
                console.print(f"  checkpoint: {update['checkpoint']}")
            console.print(f"[dim]training step: {time.monotonic() - step_started:.0f} s[/]")
        console.rule("[bold]Where things are")
        database = _redacted(settings.resolved_database_url)
        console.print(f"database:   {database}")
        console.print("episodes:   .venv/bin/rlguard episodes list, then rlguard episodes show ID")
        console.print("export:     .venv/bin/rlguard export --out episodes.jsonl")
        console.print(
            "audit page: .venv/bin/rlguard serve, then http://"
            f"{settings.gateway.host}:{settings.gateway.port}/audit "
            f"(admin token: RLGUARD_ADMIN_TOKEN or {settings.state_dir / 'admin_token'}); "
            "or .venv/bin/rlguard audit"
        )
        console.print(f"demo took {time.monotonic() - started:.0f} s")
        if as_json:
            print_json({**result, "database": database, "seconds": round(time.monotonic() - started, 1)})
