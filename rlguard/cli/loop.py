"""``rlguard loop``: the closed loop (rollout, train, reload, repeat) on one schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rlguard.cli.output import bar, console, line, print_json
from rlguard.cli.policy import MODEL_HELP
from rlguard.cli.rollout import SUITES_HELP, chosen_tasks
from rlguard.cli.train import INTERCEPT_PENALTY_HELP, trainer_settings
from rlguard.settings import get_settings
from trainer.errors import TrainerError

SCHEDULES = ("sync", "async")


def loop(
    algo: str = typer.Option(
        "ppo", "--algo", help="ppo (GAE and a learned critic), grpo, rloo or reinforce_pp"
    ),
    schedule: str = typer.Option(
        "sync", "--schedule", help="sync: rollout and training in turn; async: overlapped, bounded staleness"
    ),
    model: str = typer.Option("tiny", "--model", help=f"The starting policy: {MODEL_HELP}"),
    steps: int = typer.Option(2, "--steps", min=1, help="Training steps (one step's episodes each)"),
    group_size: int = typer.Option(1, "--group-size", min=1, help="Episodes of one task in a step"),
    tasks_per_step: int | None = typer.Option(
        None, "--tasks-per-step", min=1, help="Tasks in a step (default: every matched task)"
    ),
    suite: list[str] = typer.Option(["builtin"], "--suite", help=SUITES_HELP),
    task: list[str] = typer.Option([], "--task", help="Only these task ids (repeatable)"),
    out: Path = typer.Option(Path("runs/loop"), "--out", help="Run directory (resumed when it holds one)"),
    max_turns: int | None = typer.Option(None, "--max-turns", min=1, help="Turns per episode"),
    max_tokens_per_turn: int | None = typer.Option(
        None, "--max-tokens-per-turn", min=1, help="Tokens the policy may generate per turn"
    ),
    max_staleness: int = typer.Option(1, "--max-staleness", min=0, help="async: versions a token may lag"),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="async: episodes in flight (default: what the staleness gate admits)"
    ),
    queue_size: int | None = typer.Option(
        None, "--queue-size", min=1, help="async: finished episodes waiting for the trainer, at most"
    ),
    policy_url: str | None = typer.Option(
        None, "--policy-url", help="A policy server already running (vLLM, SGLang), not the built-in one"
    ),
    reload_protocol: str | None = typer.Option(
        None, "--reload-protocol", help="How weights reach --policy-url: builtin, sglang or vllm"
    ),
    served_model_name: str = typer.Option(
        "default", "--served-model-name", help="The model name --policy-url answers to"
    ),
    intercept_penalty: float | None = typer.Option(
        None, "--intercept-penalty", min=0, help=INTERCEPT_PENALTY_HELP
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the run's summary as JSON"),
) -> None:
    """The closed loop: rollout, train, reload, repeat.

    It starts a policy server (or drives --policy-url) and a gateway serving the chosen suites.

    With --schedule async they overlap: workers keep playing while the trainer trains on what
    landed, episodes in flight go on with new weights, and nothing older than --max-staleness
    versions is trained on (the rollout is held back, and what still got too old is dropped).
    """
    from rlguard.cli.policy import check_model
    from rlguard.cli.resources import resolve_suites
    from rlguard.loops.run import run_loop
    from rlguard.loops.spec import AsyncSchedule, LoopSpec, SyncSchedule

    if schedule not in SCHEDULES:
        raise TrainerError(f"--schedule must be sync or async, not {schedule!r}")
    trainer = trainer_settings(
        algo, {"reload_protocol": reload_protocol, "intercept_penalty": intercept_penalty}
    )
    settings = get_settings().model_copy(deep=True)
    suites = resolve_suites(settings, suite)
    chosen_tasks(suites, task)
    settings.gateway.suites = list(suites)  # the loop's gateway serves the loop's suites
    check_model(model)
    try:
        spec = LoopSpec(
            model=model,
            suites=suites,
            task_filter=tuple(task),
            run_dir=out,
            steps=steps,
            group_size=group_size,
            tasks_per_step=tasks_per_step,
            max_turns=max_turns,
            max_tokens_per_turn=max_tokens_per_turn,
            policy_url=policy_url,
            served_model_name=served_model_name,
            server_process=schedule == "async",
            gateway_process=schedule == "async",
        )
        chosen = (
            AsyncSchedule(max_staleness=max_staleness, workers=workers, queue_size=queue_size)
            if schedule == "async"
            else SyncSchedule()
        )
        with bar(info=True) as progress:
            shown = progress.add_task(f"loop {schedule}", total=steps, info="starting the services")

            def on_step(summary: Any) -> None:
                progress.update(shown, advance=1, info=f"reward {summary.mean_reward:.3f}")
                if not as_json:
                    line(_step_line(summary))

            result = run_loop(spec, chosen, settings, trainer, on_step=on_step)
    except ValueError as exc:
        raise TrainerError(str(exc)) from None
    if as_json:
        print_json(result.to_dict())
    else:
        console().print({k: v for k, v in result.to_dict().items() if k != "per_step"})


def _step_line(summary: Any) -> str:
    metrics = summary.metrics
    return (
        f"step {summary.step}: {summary.episodes} episodes, mean reward {summary.mean_reward:.3f}, "
        f"policy {summary.policy_version}, queue {summary.queue}, "
        f"staleness {metrics.get('data/staleness_mean', 0.0):.2f}, "
        f"dropped {metrics.get('data/dropped_episodes', 0.0):.0f}"
    )


def register(app: typer.Typer) -> None:
    """Add ``rlguard loop``."""
    app.command("loop")(loop)
