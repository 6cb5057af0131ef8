"""Command-line sub-commands of this package (registered into ``rlguard.cli``):
``train``, ``loop``, ``plot``, ``bench train`` and ``bench learn``."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from rlguard.errors import RlguardError

console = Console()

ALGOS = ("ppo", "grpo", "rloo", "reinforce_pp")


def _settings(algo: str, overrides: dict[str, Any]):
    """The trainer settings from the environment, with the command line's explicit values on top."""
    from pydantic import ValidationError

    from rlguard.settings import get_settings

    if algo not in ALGOS:
        raise RlguardError(f"--algo must be one of {', '.join(ALGOS)}, not {algo!r}")
    values = {k: v for k, v in overrides.items() if v is not None}
    try:
        return type(get_settings().trainer).model_validate(
            get_settings().trainer.model_dump() | {"algo": algo, **values}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RlguardError(f"bad trainer setting {first['loc']}: {first['msg']}") from None


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
    )


def _info(metrics: dict[str, float]) -> str:
    keys = (
        ("reward", "data/reward_mean"),
        ("pg", "actor/pg_loss"),
        ("vf", "critic/value_loss"),
        ("ev", "critic/explained_variance"),
        ("tok/s", "perf/tokens_per_s"),
    )
    return "  ".join(f"{label} {metrics[key]:.3g}" for label, key in keys if key in metrics)


def train(
    algo: str = typer.Option("ppo", "--algo", help="ppo (GAE + critic) | grpo | rloo | reinforce_pp"),
    model: str = typer.Option("tiny", "--model", help="HF model directory, or 'tiny' (built locally)"),
    steps: int = typer.Option(1, "--steps", min=1, help="Training steps to run"),
    out: Path = typer.Option(Path("runs/train"), "--out", help="Run directory (checkpoints, metrics)"),
    policy_url: str | None = typer.Option(None, "--policy-url", help="Policy server to reload each step"),
    database_url: str | None = typer.Option(None, "--database-url", help="Store URL (default: settings)"),
    episodes_per_step: int = typer.Option(64, "--episodes-per-step", min=1),
    wait_s: float = typer.Option(0.0, "--wait-s", min=0, help="Wait this long for data before stopping"),
    actor_lr: float | None = typer.Option(None, "--actor-lr"),
    critic_lr: float | None = typer.Option(None, "--critic-lr"),
    kl_coef: float | None = typer.Option(None, "--kl-coef"),
    ppo_epochs: int | None = typer.Option(None, "--ppo-epochs"),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
) -> None:
    """Train on the store's unconsumed episodes: checkpoint each step, then reload the policy server.

    Under ``torchrun --nproc_per_node N -m rlguard train ...`` it runs data-parallel (DDP, or
    FSDP2 with RLGUARD_TRAINER__PARALLEL=fsdp).
    """
    from rlguard.settings import get_settings
    from trainer.runtime import init_runtime, shutdown_runtime
    from trainer.train import TrainingRun, resolve_model

    settings = _settings(
        algo, {"actor_lr": actor_lr, "critic_lr": critic_lr, "kl_coef": kl_coef, "ppo_epochs": ppo_epochs}
    )
    url = database_url or get_settings().resolved_database_url
    runtime = init_runtime(settings.parallel, device=device)
    run = TrainingRun(out, resolve_model(model), url, settings, runtime, policy_url=policy_url)
    done = 0
    progress = _progress() if runtime.is_main else None
    try:
        with progress or contextlib.nullcontext():
            task = progress.add_task(f"train {algo}", total=steps, info="") if progress else None
            deadline = time.monotonic() + wait_s
            while done < steps:
                result = run.step(episodes_per_step)
                if result is None:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(min(2.0, max(deadline - time.monotonic(), 0.0)))
                    continue
                done += 1
                deadline = time.monotonic() + wait_s
                if progress is not None:
                    progress.update(task, advance=1, info=_info(result.metrics))
    finally:
        run.close()
        shutdown_runtime(runtime)
    if runtime.is_main:
        if done == 0:
            raise RlguardError(f"the store at {url} holds no unconsumed, ended episodes to train on")
        console.print(f"{done} step(s); metrics in {out / 'metrics.jsonl'}; policy {run.policy_checkpoint}")


def loop(
    algo: str = typer.Option("ppo", "--algo", help="ppo | grpo | rloo | reinforce_pp"),
    model: str = typer.Option("tiny", "--model", help="Starting policy: HF directory or 'tiny'"),
    iterations: int = typer.Option(2, "--iterations", min=1, help="rollout -> train -> reload rounds"),
    episodes_per_task: int = typer.Option(2, "--episodes-per-task", min=1),
    tasks: list[str] = typer.Option(["builtin"], "--tasks", help="Task suite(s)"),
    task: list[str] = typer.Option([], "--task", help="Only these task ids (repeatable)"),
    out: Path = typer.Option(Path("runs/loop"), "--out", help="Run directory"),
    max_turns: int | None = typer.Option(None, "--max-turns", min=1),
    max_tokens_per_turn: int | None = typer.Option(None, "--max-tokens-per-turn", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print each round's summary as JSON"),
) -> None:
    """The closed loop on the built-in policy server and tasks: rollout, train, reload, repeat."""
    from trainer.loop import LoopConfig, run_loop

    settings = _settings(algo, {})
    config = LoopConfig(
        model=model,
        iterations=iterations,
        episodes_per_task=episodes_per_task,
        suites=tuple(tasks),
        task_filter=tuple(task),
        run_dir=out,
        max_turns=max_turns,
        max_tokens_per_turn=max_tokens_per_turn,
    )
    rounds = run_loop(config, settings, on_round=None if as_json else _print_round)
    if as_json:
        print(json.dumps(rounds, indent=2))


def _print_round(summary: dict[str, Any]) -> None:
    console.print(
        f"round {summary['round']}: {summary['episodes']} episodes, "
        f"mean reward {summary['mean_reward']:.3f}, step {summary['step']}, "
        f"policy {summary['policy_version']}"
    )


def plot(run_dir: Path = typer.Argument(..., help="A run directory holding metrics.jsonl")) -> None:
    """Draw a run's curves (each metric; learning curves for bench learn) to PNG files beside it."""
    from trainer.plot import plot_run

    for path in plot_run(run_dir):
        console.print(str(path))


def bench_train(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    configs: str = typer.Option("tiny,100m", "--configs", help="Comma-separated: tiny, 100m"),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
) -> None:
    """Trainer step time and tokens/s vs a plain forward+backward of the same actor and critic."""
    from trainer.bench import run_train_bench

    try:
        result = run_train_bench([c.strip() for c in configs.split(",") if c.strip()], device)
    except ValueError as exc:
        raise RlguardError(str(exc)) from None
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title="rlguard bench train")
    for column in ("config", "params", "tokens", "step s", "raw fwd+bwd s", "tokens/s", "step / raw"):
        table.add_column(column)
    for name, row in result["configs"].items():
        table.add_row(
            name,
            f"{row['actor_parameters'] / 1e6:.1f}M",
            str(row["batch_tokens"]),
            f"{row['step_s']:.3f}",
            f"{row['raw_fwd_bwd_s']:.3f}",
            f"{row['tokens_per_s']:.0f}",
            f"{row['step_vs_raw_fwd_bwd']:.2f}",
        )
    console.print(table)


def bench_learn(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds per algorithm and horizon"),
    out: Path = typer.Option(Path("runs/bench-learn"), "--out", help="Where curves and results go"),
    budget_tokens: int | None = typer.Option(
        None, "--budget-tokens", min=1000, help="Environment tokens per long-horizon run (default 1.5M)"
    ),
) -> None:
    """PPO+critic vs GRPO on long (compacted, multi-turn) and short synthetic horizons."""
    from trainer.learn_bench import run_learn_bench

    result = run_learn_bench(seeds=seeds, out_dir=out, budget_tokens=budget_tokens)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    table = Table(title=f"rlguard bench learn ({seeds} seeds)")
    for column in (
        "algorithm",
        "long: final",
        "long: mean in training",
        "short: final",
        "short: mean in training",
    ):
        table.add_column(column)
    for algo in ("ppo", "grpo"):
        table.add_row(
            algo,
            *(
                f"{result.get(f'{algo}_{horizon}{suffix}', float('nan')):.3f}"
                for horizon in ("long", "short")
                for suffix in ("", "_auc")
            ),
        )
    console.print(table)
    for path in result.get("plots", []):
        console.print(str(path))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this package's commands to the root app and its benchmarks to ``rlguard bench``."""
    app.command("train")(train)
    app.command("loop")(loop)
    app.command("plot")(plot)
    bench.command("train")(bench_train)
    bench.command("learn")(bench_learn)
